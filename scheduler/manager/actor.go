package manager

import (
	"sync"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// A job's actor is the one goroutine that touches the job's state (etcd
// raft's node/raft split: the state is raft's, the actor's loop is
// node.run, and every other goroutine holds a handle). It takes in the
// job's agent messages in the order they came — progress reports,
// heartbeats, acks, server counters, refusals, primary-agent reports — and
// runs the console's commands on the job (Trigger, Decide, SetPolicy) and
// every write the job's other goroutines make (onActor) in their turn:
// agents connecting and leaving, the job's move to running and to its end,
// its ticker's expiries, lost nodes, policy proposals and timeline, EPS's
// withdrawals, launches and size changes, every step of a change under
// way. No lock guards the job's state: a goroutine that needs to read it
// either reads what the actor published (the job's facts after each batch,
// facts.go; the views' frozen rows, at most once per view TTL) or asks the
// actor (onActor, like etcd's node.Status); what it does with what it read
// — store writes, sends, process launches, waits — it does off the actor.
// The job's periodic work (its tick: lost nodes, the Monitor's snapshot,
// the policies, action expiry, the timeline) runs on a goroutine of the
// job's own, its ticker (runTicks), which hands its writes to the actor: a
// tick writes to the store and may launch processes, and the reports and
// acks must not wait for that. Jobs tick side by side; other jobs never
// wait for a job's actor.
//
// The actor starts with the job's first message, the ticker when the job
// is admitted (startTicker); both are tracked like every goroutine of the
// manager (spawn). The ticker ends with the job; the actor outlives it (a
// finished job is still read, and late acks still come) and ends when the
// manager closes: what comes after is taken in on the caller's goroutine,
// one caller at a time (jobState.late).

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
	m.spawn(j.runDrains)
}

// runDrains takes the Monitor's queue in whenever it fills (telemetry.full)
// while the job is live: a goroutine of its own, not the ticker, which
// waits for the actor in every tick — at 20,000 agents a tick waited
// seconds behind the reports, the queue reached twice its bound, and the
// actor took it in itself, a third of its time (the Monitor's take-in is
// some 280,000 calls a second there). The actor only queues.
func (j *jobState) runDrains() {
	for {
		select {
		case <-j.mon.full:
			j.mon.Drain()
		case <-j.endedCh:
			return
		case <-j.m.done:
			return
		}
	}
}

// runTicks runs the job's tick at every tick of t while the job is live.
func (j *jobState) runTicks(t clock.Ticker) {
	defer t.Stop()
	for {
		select {
		case <-t.C():
			if !j.facts().over {
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
		j.late.Lock()
		defer j.late.Unlock()
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
	if !j.enqueue(agentMsg{do: func() { run(); j.publishFacts(); close(done) }}) {
		j.lateRun(run)
		return
	}
	select {
	case <-done:
	case <-j.act.done:
		// The manager closed before the actor took it: at most once
		// (run), here, or by the actor's last batch.
		j.lateRun(run)
	}
}

// lateRun runs f for the ended actor, one caller at a time, and publishes
// the job's facts after it.
func (j *jobState) lateRun(f func()) {
	j.late.Lock()
	defer j.late.Unlock()
	f()
	j.publishFacts()
}

// onActor runs f on the job's actor (call): how the job's other
// goroutines — its ticker, EPS's pass, a change under way, a reader of
// what the actor did not publish — read and change its state, so that
// every such access is the actor's, in one order with the agents'
// messages. The caller is not the actor (f would wait for itself): code
// that runs on the actor touches the state directly.
func (j *jobState) onActor(f func()) { j.call(f) }

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

// runActor takes in the job's messages until the manager closes; after
// each batch it publishes the job's facts.
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
			j.publishFacts()
		case <-j.m.done:
			return
		}
	}
}

// takeIn handles a batch of agent messages (and calls) in order, as
// fromAgent does. The facts are published after a call (its caller may
// read them as soon as it returns: call) and after the batch (runActor).
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
