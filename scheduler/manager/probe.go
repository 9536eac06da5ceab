package manager

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/probe"
	"github.com/kelpie/kelpie/scheduler/textclean"
)

// Bounds of a probe (kelpie job probe): what every role is asked to do.
const (
	// ProbeKernelRounds is the rounds of the fixed compute kernel each
	// role runs (a few milliseconds each).
	ProbeKernelRounds = 12
	// ProbeEchoBytes is what each round trip carries each way, and
	// ProbeTrips the round trips per worker and server.
	ProbeEchoBytes = 64 << 10
	ProbeTrips     = 4
	// ProbeTimeout is how long a probe waits for the agents by default;
	// ProbeMaxTimeout the most a caller may ask for.
	ProbeTimeout    = 10 * time.Second
	ProbeMaxTimeout = time.Minute
)

// probeWaits routes the agents' probe answers to the probes waiting for
// them, by request id (the stream's node name checked against it).
type probeWaits struct {
	mu   sync.Mutex
	next uint64
	wait map[string]*probeWait
}

type probeWait struct {
	node string
	ch   chan *agentpb.ProbeReply
}

// probeReply hands an agent's answer to the probe that asked for it; an
// answer nobody waits for (late, or from another node) is dropped.
func (m *Manager) probeReply(node string, r *agentpb.ProbeReply) {
	m.probeWaits.mu.Lock()
	w := m.probeWaits.wait[r.GetId()]
	if w != nil && w.node == node {
		delete(m.probeWaits.wait, r.GetId())
	} else {
		w = nil
	}
	m.probeWaits.mu.Unlock()
	if w != nil {
		w.ch <- r // buffered: one answer per request
	}
}

// Probe runs the probe of node, a node of the live job (an operator
// command: the console checks the caller), within timeout (ProbeTimeout
// if 0): every role of the job runs the same compute kernel and every
// worker makes round trips to each active server, at once, through their
// agents; scheduler/probe judges the node's figures against the others'.
// An event names who asked and what the probe found.
func (m *Manager) Probe(ctx context.Context, job, node string, timeout time.Duration, who string) (*consolepb.ProbeResult, error) {
	j, ok := m.lookup(job)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no job %q", job)
	}
	if timeout <= 0 {
		timeout = ProbeTimeout
	}
	timeout = min(timeout, ProbeMaxTimeout)
	type asked struct {
		name, role string
		id         string
		ch         chan *agentpb.ProbeReply
		err        string
	}
	var all []*asked
	var refused error
	// The job's nodes and their agents' streams are the actor's: the
	// requests go out on its turn, the answers are awaited off it.
	j.onActor(func() {
		if j.over() {
			refused = status.Errorf(codes.FailedPrecondition, "job %s has ended: there is nothing left to probe", job)
			return
		}
		if n := j.nodes[node]; n == nil || n.removed {
			refused = status.Errorf(codes.NotFound, "job %s has no node %q", job, node)
			return
		}
		var servers []*agentpb.ProbeServer
		addrs := j.coord.ServerAddrs()
		for _, i := range j.activeServers() {
			servers = append(servers, &agentpb.ProbeServer{Name: spec.ServerName(i), Addr: addrs[i]})
		}
		for _, n := range sortedNodes(j.nodes) {
			if n.removed {
				continue
			}
			a := &asked{name: n.name, role: n.role}
			all = append(all, a)
			if n.conn == nil {
				a.err = "its agent is not connected"
				continue
			}
			m.probeWaits.mu.Lock()
			m.probeWaits.next++
			a.id = "probe-" + strconv.FormatUint(m.probeWaits.next, 10)
			a.ch = make(chan *agentpb.ProbeReply, 1)
			if m.probeWaits.wait == nil {
				m.probeWaits.wait = map[string]*probeWait{}
			}
			m.probeWaits.wait[a.id] = &probeWait{node: n.name, ch: a.ch}
			m.probeWaits.mu.Unlock()
			req := &agentpb.ProbeRequest{Id: a.id, KernelRounds: ProbeKernelRounds, EchoBytes: ProbeEchoBytes, Trips: ProbeTrips,
				TimeoutS: (timeout * 3 / 4).Seconds()} // the agent waits a little less than we do
			if n.role == "worker" {
				req.Servers = servers
			}
			if !n.conn.send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Probe{Probe: req}}) {
				a.err = "its agent's stream is full or closing"
				a.ch = nil
			}
		}
	})
	if refused != nil {
		return nil, refused
	}

	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	late := false
	out := &consolepb.ProbeResult{Job: job, Node: node}
	var judged []probe.Node
	for _, a := range all {
		pn := &consolepb.ProbeNode{Node: a.name, Role: a.role, Error: a.err}
		if a.ch != nil && !late {
			select {
			case r := <-a.ch:
				pn.KernelS = r.GetKernelS()
				pn.Error = textclean.Clean(r.GetError(), 4096)
				for _, t := range r.GetTrips() {
					pn.Trips = append(pn.Trips, &consolepb.ProbeServerTrip{Server: textclean.Clean(t.GetServer(), 64),
						RttS: t.GetRttS(), ServerS: t.GetServerS(), Error: textclean.Clean(t.GetError(), 1024)})
				}
			case <-deadline.C:
				late = true
			case <-ctx.Done():
				late = true
			}
		}
		if a.ch != nil && pn.KernelS == 0 && pn.Error == "" {
			pn.Error = fmt.Sprintf("its agent did not answer within %s", timeout)
		}
		out.Nodes = append(out.Nodes, pn)
		jn := probe.Node{Name: pn.Node, Role: pn.Role, KernelS: pn.KernelS, Err: pn.Error}
		for _, t := range pn.Trips {
			jn.Trips = append(jn.Trips, probe.Trip{Server: t.Server, RTT: t.RttS, Own: t.ServerS, Err: t.Error})
		}
		judged = append(judged, jn)
	}
	m.probeWaits.mu.Lock()
	for _, a := range all {
		delete(m.probeWaits.wait, a.id)
	}
	m.probeWaits.mu.Unlock()

	v := probe.Judge(node, judged)
	out.Verdict, out.Subject, out.Cause, out.Ratio, out.Detail = v.Verdict, v.Subject, v.Cause, v.Ratio, v.Detail
	for _, pn := range out.Nodes {
		pn.KernelRatio = v.KernelRatio[pn.Node]
		for _, t := range pn.Trips {
			t.Ratio = v.TripRatio[pn.Node][t.Server]
		}
	}
	out.Time = ts(m.now())
	m.event(job, "job", node, fmt.Sprintf("probe of %s: %s", node, v.Detail), who)
	return out, nil
}
