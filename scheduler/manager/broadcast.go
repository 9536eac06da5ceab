package manager

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
)

// A global action (a batch split, learning-rate scales, a new block table
// for the workers) goes down through one agent, the primary, picked at
// random among the live workers' agents (AntDT Fig. 6): the scheduler sends
// it the command once, with the target iteration and the peer addresses
// of the others (the secondaries), and the primary forwards it to each
// over the agents' peer service (agent/peer.go). Every agent applies it at
// the target iteration and acks on its own stream, so the acks are
// handled as before (the gate, or a table change's sequence).
//
// Nothing is lost when the primary cannot do its part: it reports the
// secondaries it could not reach (ActionForwarded) and the scheduler sends
// those the command itself; when that report does not come within
// forwardTimeout (the primary died, its stream broke), every secondary gets
// the command from the scheduler. Agents take an action at most once, so a
// secondary that gets it both ways applies it once. An agent that serves no
// peer service (peer_addr empty), or a job with one worker, gets its
// command directly, as does every node action (KILL_RESTART) and every
// server command (servercmd.go).

// forwardTimeout is how long the scheduler waits for a primary's
// ActionForwarded before it sends the command to every secondary itself:
// more than an agent's call to one secondary (agent.Options.PeerTimeout,
// 5 s), the secondaries being called in parallel.
const forwardTimeout = 15 * time.Second

// Command routes, counted per broadcast (broadcast.sent).
const (
	routePrimary  = "primary"  // the one command to the primary
	routeDirect   = "direct"   // to an agent without a peer service
	routeFallback = "fallback" // to a secondary the primary did not reach
)

// broadcast is one global action sent through a primary. Kept for the
// job's life (a few per minute at most), so that its routes can be told.
type broadcast struct {
	action  string
	primary string
	peers   []string          // the secondaries, in the order sent
	sent    map[string]int    // commands the scheduler sent, by route
	settled map[string]string // secondary -> how it got the command: "primary" or why it fell back
	report  chan struct{}     // closed when the primary's report came or the fallback ran
	closed  bool              // report is closed
}

// broadcastTo is the sends of a global action's command to the named
// workers' agents: through a primary picked at random among those whose
// agent is connected and serves a peer service, directly to the other
// connected ones; a node whose agent is away gets it replayed when it
// connects. Called on the job's actor.
func (m *Manager) broadcastTo(j *jobState, a *consolepb.Action, names []string) sendList {
	var candidates, direct []string
	for _, name := range names {
		n := j.nodes[name]
		switch {
		case n == nil || n.conn == nil:
		case n.peerAddr == "":
			direct = append(direct, name)
		default:
			candidates = append(candidates, name)
		}
	}
	if len(candidates) < 2 {
		// One worker: nobody to forward to.
		return j.sendRoute(a, append(direct, candidates...), nil)
	}
	primary := candidates[rand.IntN(len(candidates))]
	if j.pickPrimary != nil {
		primary = j.pickPrimary(candidates)
	}
	b := &broadcast{action: a.Id, primary: primary, sent: map[string]int{},
		settled: map[string]string{}, report: make(chan struct{})}
	cmd := j.command(a, primary)
	if m.cfg.SignAction != nil {
		// Secondaries apply only what the scheduler signed for this
		// primary to forward; unsigned, every agent hears it from here.
		if err := m.cfg.SignAction(cmd, primary); err != nil {
			return j.sendRoute(a, append(direct, candidates...), nil)
		}
	}
	cmd.Primary = true
	for _, name := range candidates {
		if name != primary {
			b.peers = append(b.peers, name)
			cmd.Peers = append(cmd.Peers, &agentpb.PeerAddr{Peer: name, Addr: j.nodes[name].peerAddr})
		}
	}
	if j.broadcasts == nil {
		j.broadcasts = map[string]*broadcast{}
	}
	j.broadcasts[a.Id] = b
	b.sent[routePrimary]++
	m.event(j.spec.Name, "action", primary, fmt.Sprintf("action %s %s: primary %s forwards it to %d agent(s), at iteration %d",
		a.Id, a.Kind, primary, len(b.peers), a.TargetIteration), "scheduler")
	conn := j.nodes[primary].conn
	sends := j.sendRoute(a, direct, b)
	sends = append(sends, func() {
		if conn.send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Command{Command: cmd}}) {
			return
		}
		// The primary's stream is gone or full: the others hear it from
		// the scheduler (the primary gets it again when it reconnects).
		var s sendList
		j.onActor(func() { s = m.fallBack(j, b, b.peers, "the primary's stream refused the command") })
		s.run()
	})
	m.spawn(func() { m.awaitForward(j, b) })
	return sends
}

// AgentPeerAddr is the address of a node's agent's peer service, as its
// agent registered it ("" and false for no such node or none).
func (m *Manager) AgentPeerAddr(job, node string) (string, bool) {
	j, ok := m.lookup(job)
	if !ok {
		return "", false
	}
	var addr string
	j.onActor(func() {
		if n := j.nodes[node]; n != nil {
			addr = n.peerAddr
		}
	})
	return addr, addr != ""
}

// sendRoute is the sends of an action's command to the named nodes'
// agents, directly (counted on b when there is one).
func (j *jobState) sendRoute(a *consolepb.Action, names []string, b *broadcast) sendList {
	if b != nil && len(names) > 0 {
		b.sent[routeDirect] += len(names)
	}
	return j.sendCommand(a, names)
}

// awaitForward waits for the primary's report of a broadcast; without one
// within forwardTimeout, every secondary gets the command from the
// scheduler.
func (m *Manager) awaitForward(j *jobState, b *broadcast) {
	select {
	case <-b.report:
		return
	case <-m.clk.After(forwardTimeout):
	case <-j.endedCh:
		return
	case <-m.done:
		return
	}
	var sends sendList
	j.onActor(func() {
		sends = m.fallBack(j, b, b.peers, fmt.Sprintf("no report from the primary %s within %v", b.primary, forwardTimeout))
	})
	sends.run()
}

// forwarded takes a primary's report of its broadcast: the secondaries it
// could not reach get the command from the scheduler.
func (m *Manager) forwarded(j *jobState, node string, rep *agentpb.ActionForwarded) {
	b := j.broadcasts[rep.ActionId]
	if b == nil || b.primary != node || b.closed {
		return
	}
	for _, p := range rep.Reached {
		if _, ok := b.settled[p]; !ok {
			b.settled[p] = routePrimary
		}
	}
	var unreached, why []string
	for _, u := range rep.Unreached {
		unreached = append(unreached, u.Peer)
		why = append(why, u.Peer+": "+u.Error)
	}
	// A secondary the primary says nothing of was not reached either.
	for _, p := range b.peers {
		if _, ok := b.settled[p]; !ok && !slices.Contains(unreached, p) {
			unreached = append(unreached, p)
			why = append(why, p+": not in the primary's report")
		}
	}
	var sends sendList
	if len(unreached) > 0 {
		sends = m.fallBack(j, b, unreached, fmt.Sprintf("the primary %s could not reach %s", node, strings.Join(why, "; ")))
	} else {
		b.closed = true
		close(b.report)
	}
	sends.run()
}

// fallBack sends a broadcast's command to secondaries directly (those not
// settled yet) and ends the wait for the primary's report. Called on the
// job's actor; the sends run after, off it.
func (m *Manager) fallBack(j *jobState, b *broadcast, nodes []string, why string) sendList {
	if !b.closed {
		b.closed = true
		close(b.report)
	}
	a := j.byID[b.action]
	if a == nil || a.State != ActDispatched {
		return nil // settled meanwhile (applied, failed, the job ended)
	}
	var to []string
	for _, p := range nodes {
		if _, done := b.settled[p]; done {
			continue
		}
		b.settled[p] = why
		if n := j.nodes[p]; n != nil && !n.removed {
			to = append(to, p)
		}
	}
	if len(to) == 0 {
		return nil
	}
	b.sent[routeFallback] += len(to)
	m.event(j.spec.Name, "action", "", fmt.Sprintf("action %s %s: sent to %s directly (%s)", a.Id, a.Kind, strings.Join(to, ", "), why), "scheduler")
	return j.sendCommand(a, to)
}
