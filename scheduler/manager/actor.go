package manager

import (
	"time"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// A job's actor is the goroutine that takes in its agents' messages in the
// order they came: reports, server counters and acks from every agent
// stream of the job go through it (heartbeats, which may write the node's
// state to the store, are taken in on their stream), so that the streams
// wait on the job's inbox (gRPC flow control pushes back on a busy job)
// rather than on the manager's lock, and one job's agents never contend
// with another's. Reports that queue up meanwhile are taken in together,
// under one acquisition of the manager's lock. It is the first step to a
// job owned by one goroutine (issue 10): the state it writes is still
// guarded by the manager's lock, which views, ticks and actions share.
//
// The actor starts with the job's first message, is tracked like every
// goroutine of the manager (spawn) and ends when the job ends or the
// manager closes; a message that comes after is taken in on the caller's
// goroutine.

// inboxSize bounds the messages waiting for a job's actor; batchSize bounds
// those it takes in at once.
const (
	inboxSize = 1024
	batchSize = 256
)

// actor is a job's actor: its inbox and the signal that it has ended.
type actor struct {
	inbox chan agentMsg
	done  chan struct{}
}

// agentMsg is one message of an agent, with when it arrived.
type agentMsg struct {
	n   *nodeState
	msg *kelpiepb.AgentMessage
	t0  time.Time
}

// post hands an agent's message to the job's actor, starting it if need
// be; it blocks while the inbox is full. After the actor has ended, the
// message is taken in here.
func (j *jobState) post(n *nodeState, msg *kelpiepb.AgentMessage) {
	m := j.m
	in := agentMsg{n: n, msg: msg, t0: m.clk.Now()}
	j.actorOnce.Do(func() {
		j.act = &actor{inbox: make(chan agentMsg, inboxSize), done: make(chan struct{})}
		if !m.spawn(j.runActor) {
			close(j.act.done) // the manager is closing
		}
	})
	select {
	case <-j.act.done:
		m.takeIn(j, []agentMsg{in})
		return
	default:
	}
	select {
	case j.act.inbox <- in:
	case <-j.act.done:
		m.takeIn(j, []agentMsg{in})
	}
}

// runActor takes in the job's messages until the job ends or the manager
// closes, then what is still queued.
func (j *jobState) runActor() {
	defer close(j.act.done)
	batch := make([]agentMsg, 0, batchSize)
	for {
		select {
		case in := <-j.act.inbox:
			batch = append(batch[:0], in)
		drain:
			for len(batch) < batchSize {
				select {
				case in := <-j.act.inbox:
					batch = append(batch, in)
				default:
					break drain
				}
			}
			j.m.takeIn(j, batch)
		case <-j.endedCh:
			j.drainInbox()
			return
		case <-j.m.done:
			return
		}
	}
}

// drainInbox takes in the messages queued when the job ended.
func (j *jobState) drainInbox() {
	for {
		select {
		case in := <-j.act.inbox:
			j.m.takeIn(j, []agentMsg{in})
		default:
			return
		}
	}
}

// takeIn handles a batch of agent messages in order: a run of reports goes
// to the samples ledger one by one and to the nodes and the Monitor under
// one acquisition of the manager's lock; every other message as fromAgent
// does.
func (m *Manager) takeIn(j *jobState, batch []agentMsg) {
	for i := 0; i < len(batch); {
		if batch[i].msg.GetReport() == nil {
			m.fromAgent(j, batch[i].n, batch[i].msg)
			ingest.Observe(clock.Since(m.clk, batch[i].t0).Seconds())
			i++
			continue
		}
		k := i
		for k < len(batch) && batch[k].msg.GetReport() != nil {
			_ = j.coord.Observe(batch[k].msg.GetReport()) // the samples ledger
			k++
		}
		now, servers := m.now(), j.coord.ServerNames()
		m.mu.Lock()
		for _, in := range batch[i:k] {
			j.observe(in.n.name, in.msg.GetReport(), now, servers)
		}
		m.mu.Unlock()
		for _, in := range batch[i:k] {
			ingest.Observe(clock.Since(m.clk, in.t0).Seconds())
		}
		i = k
	}
}
