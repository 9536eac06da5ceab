package manager

import (
	"sync"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// A job's actor is the one goroutine that writes the job's state. It takes
// in its agents' messages that change it, in the order they came: acks,
// server counters, refusals and primary-agent reports from every agent
// stream of the job go through it, so that the streams wait on the job's
// inbox (gRPC flow control pushes back on a busy job) rather than on the
// job's lock. The console's commands on the job (Trigger, Decide,
// SetPolicy) run on it too, in their turn (call), and so does every write
// the job's other goroutines make (onActor): an agent's connection and
// disconnection, a heartbeat that changes a node's state, the job's move
// to running and to its end, its ticker's expiries, lost nodes, policy
// proposals and timeline, EPS's withdrawals, launches and size changes,
// every step of a change under way, the settling of a finished job's
// actions. So every change to the job is taken in in one order with the
// acks. The actor holds the job's lock while it writes, so that the other
// goroutines read under the lock held for reading; what they do with what
// they read — store writes, sends, process launches, waits — they do off
// the actor. Progress reports, which write only their node's progress
// (under its own lock), are taken in side by side on their own streams
// (ingest.go). The job's periodic work (its tick: lost nodes, the
// Monitor's snapshot, the policies, action expiry, the timeline) runs on a
// goroutine of the job's own, its ticker (runTicks), which hands its writes
// to the actor: a tick writes to the store and may launch processes, and
// the acks and counters must not wait for that (at 5,000 agents a tick on
// the actor put 0.4 s into the ingest p99). Jobs tick side by side; other
// jobs never wait for a job's lock or its actor.
//
// The actor starts with the job's first message, the ticker when the job
// is admitted (startTicker); both are tracked like every goroutine of the
// manager (spawn) and end when the job ends or the manager closes; a
// message that comes after is taken in on the caller's goroutine.

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

// agentMsg is one message of an agent, with when it arrived, or a call
// (do) for the actor to run in its turn.
type agentMsg struct {
	n   *nodeState
	msg *agentpb.AgentMessage
	t0  time.Time
	do  func()
}

// startTicker starts the job's ticker, ticking every Config.Tick until the
// job ends or the manager closes. Its clock ticker is made here, before
// the goroutine, so that a fake clock counts it from the call on.
func (j *jobState) startTicker() {
	m := j.m
	t := m.clk.NewTicker(m.cfg.Tick)
	if !m.spawn(func() { j.runTicks(t) }) {
		t.Stop() // the manager is closing
	}
}

// runTicks runs the job's tick at every tick of t while the job is live.
func (j *jobState) runTicks(t clock.Ticker) {
	defer t.Stop()
	for {
		select {
		case <-t.C():
			j.mu.RLock()
			over := j.over()
			j.mu.RUnlock()
			if !over {
				j.tick(j.m.now())
			}
		case <-j.endedCh:
			return
		case <-j.m.done:
			return
		}
	}
}

// post hands an agent's message to the job's actor, starting it if need
// be; it blocks while the inbox is full. After the actor has ended, the
// message is taken in here.
func (j *jobState) post(n *nodeState, msg *agentpb.AgentMessage) {
	in := agentMsg{n: n, msg: msg, t0: j.m.clk.Now()}
	if !j.enqueue(in) {
		j.m.takeIn(j, []agentMsg{in})
	}
}

// call runs f on the job's actor, in its turn after the agents' messages
// queued before it, and returns once f has run: the console's commands on
// a job (Trigger, Decide, SetPolicy) are taken in in one order with its
// agents' acks. After the actor has ended, f runs on the caller's
// goroutine. f must not call the job's actor itself.
func (j *jobState) call(f func()) {
	run := sync.OnceFunc(f)
	done := make(chan struct{})
	if !j.enqueue(agentMsg{do: func() { run(); close(done) }}) {
		run()
		return
	}
	select {
	case <-done:
	case <-j.act.done:
		run() // the manager closed before the actor took it: at most once
	}
}

// onActor runs f on the job's actor with the job's lock held (call): how
// the job's other goroutines — its ticker, EPS's pass, a change under way —
// change its gate and its actions' records, so that every such change is
// the actor's, in one order with the acks. The caller holds no lock of
// the job's and is not the actor.
func (j *jobState) onActor(f func()) {
	j.call(func() { j.locked(f) })
}

// locked runs f with the job's lock held: how the job's actor itself
// writes the job's state (onActor from the actor would wait for itself).
func (j *jobState) locked(f func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	f()
}

// enqueue puts in in the actor's inbox, starting the actor if need be; it
// blocks while the inbox is full and says false, taking nothing, once the
// actor has ended.
func (j *jobState) enqueue(in agentMsg) bool {
	m := j.m
	j.actorOnce.Do(func() {
		j.act = &actor{inbox: make(chan agentMsg, inboxSize), done: make(chan struct{})}
		if !m.spawn(j.runActor) {
			close(j.act.done) // the manager is closing
		}
	})
	select {
	case <-j.act.done:
		return false
	default:
	}
	select {
	case j.act.inbox <- in:
		return true
	case <-j.act.done:
		return false
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

// takeIn handles a batch of agent messages (and calls) in order, as
// fromAgent does.
func (m *Manager) takeIn(j *jobState, batch []agentMsg) {
	for _, in := range batch {
		if in.do != nil {
			in.do()
			continue
		}
		m.fromAgent(j, in.n, in.msg)
		ingest.Observe(clock.Since(m.clk, in.t0).Seconds())
	}
}
