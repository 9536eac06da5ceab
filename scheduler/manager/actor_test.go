package manager

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
)

// TestJobActor: the agent messages of a job's streams, posted concurrently,
// are taken in by the job's actor in each stream's order (every worker ends
// at its last iteration; heartbeats in between change the node's state),
// a straggler's message after the job ended is still the actor's (a
// finished job is still read, and late acks come), and once the manager
// has closed the actor is gone and a message is taken in on its own
// goroutine.
func TestJobActor(t *testing.T) {
	m, j := testJob(t, Config{}, "actor", 4, 1)
	const reports = 300
	report := func(w string, it int64) *agentpb.AgentMessage {
		return &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Report{Report: &coordinatorpb.ProgressReport{
			Job: "actor", Node: w, Iteration: it, BatchSize: 16, Loss: 0.5, BptSeconds: []float64{0.01}}}}
	}
	heartbeat := func(state agentpb.NodeState) *agentpb.AgentMessage {
		return &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{
			Status: &agentpb.NodeStatus{State: state, Pid: 1}}}}
	}
	var wg sync.WaitGroup
	for i := range 4 {
		w := fmt.Sprintf("worker-%d", i)
		n := j.nodes[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := int64(1); it <= reports; it++ {
				j.post(n, report(w, it))
				if it == reports/2 {
					j.post(n, heartbeat(agentpb.NodeState_NODE_STATE_RUNNING))
				}
			}
		}()
	}
	wg.Wait()
	taken := func() bool {
		pauseActor(j)
		defer resumeActor(j)
		for i := range 4 {
			if j.nodes[fmt.Sprintf("worker-%d", i)].progress().iteration != reports {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(time.Minute); !taken(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the actor did not take in every report")
		}
	}
	pauseActor(j)
	for i := range 4 {
		n := j.nodes[fmt.Sprintf("worker-%d", i)]
		if n.status.State != agentpb.NodeState_NODE_STATE_RUNNING {
			t.Errorf("%s is %v; its heartbeat was not taken in", n.name, n.status.State)
		}
	}
	resumeActor(j)
	if err := m.Kill("actor", "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.act.done:
		t.Fatal("the actor ended with its job")
	default:
	}
	j.post(j.nodes["worker-0"], report("worker-0", reports+1))
	pauseActor(j)
	it := j.nodes["worker-0"].progress().iteration
	resumeActor(j)
	if it != reports+1 {
		t.Errorf("a report after the end left worker-0 at iteration %d, want %d", it, reports+1)
	}
	m.Close()
	select {
	case <-j.act.done:
	case <-time.After(time.Minute):
		t.Fatal("the actor still runs after the manager closed")
	}
	j.post(j.nodes["worker-0"], report("worker-0", reports+2))
	pauseActor(j)
	it = j.nodes["worker-0"].progress().iteration
	resumeActor(j)
	if it != reports+2 {
		t.Errorf("a report after the close left worker-0 at iteration %d, want %d", it, reports+2)
	}
}

// TestJobsTickApart: each job ticks on its own goroutine, under its own
// lock.
// While one job's lock is held (a long section of that job's), another job
// still ticks (its silent worker is found lost), takes in its agents'
// messages and answers the console; under the one manager-wide lock of
// before, all of them waited for the first job.
func TestJobsTickApart(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := store.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Store: st, NoLaunch: true, Tick: time.Second, LostAfter: 5 * time.Second, LogDir: t.TempDir(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		st.Close()
	})
	for _, name := range []string{"a", "b"} {
		s, err := spec.Parse(name+".yaml", []byte("name: "+name+"\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\n"+
			"train: {global_batch: 64}\ncluster: {workers: 2, servers: 1}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.SubmitSpec(s, "test"); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := m.lookup("a")
	b, _ := m.lookup("b")
	running := &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{
		Status: &agentpb.NodeStatus{State: agentpb.NodeState_NODE_STATE_RUNNING, Pid: 1}}}}
	for _, n := range []string{"worker-0", "worker-1"} {
		takeOn(m, b, b.nodes[n], running)
	}

	pauseActor(a) // job a is busy for as long as the test needs
	defer resumeActor(a)
	clk.Advance(6 * time.Second) // past LostAfter: b's next tick finds its workers lost
	state := func(n string) agentpb.NodeState {
		pauseActor(b)
		defer resumeActor(b)
		return b.nodes[n].status.State
	}
	deadline := time.Now().Add(time.Minute)
	for state("worker-0") != agentpb.NodeState_NODE_STATE_LOST {
		if time.Now().After(deadline) {
			t.Fatalf("job b did not tick while job a's lock was held: worker-0 is %v", state("worker-0"))
		}
		time.Sleep(time.Millisecond)
	}
	done := make(chan error, 1)
	go func() {
		// An agent's message taken in by b's actor, then a console call.
		b.post(b.nodes["worker-1"], running)
		done <- m.SetPolicy("b", policy.NameAntDTND, ModeOff, nil, "test")
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("job b's agent message and console call waited for job a")
	}
	for state("worker-1") != agentpb.NodeState_NODE_STATE_RUNNING {
		if time.Now().After(deadline) {
			t.Fatalf("worker-1 is %v after its agent said it runs again; want running", state("worker-1"))
		}
		time.Sleep(time.Millisecond)
	}
}

// TestJobCall: a call on the job's actor (how the console's commands reach
// a job) runs in its turn after the agents' messages queued before it,
// still on the actor once the job has ended, and on the caller's goroutine
// once the manager has closed.
func TestJobCall(t *testing.T) {
	m, j := testJob(t, Config{}, "call", 2, 1)
	n := j.nodes["worker-0"]
	const reports = 200
	for it := int64(1); it <= reports; it++ {
		j.post(n, &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Report{Report: &coordinatorpb.ProgressReport{
			Job: "call", Node: "worker-0", Iteration: it, BatchSize: 32, BptSeconds: []float64{0.01}}}})
	}
	var seen int64
	j.call(func() { seen = n.progress().iteration })
	if seen != reports {
		t.Errorf("the call saw worker-0 at iteration %d; want %d, every report posted before it", seen, reports)
	}
	if err := m.SetPolicy("call", policy.NameAntDTND, ModeOff, nil, "test"); err != nil {
		t.Fatal(err)
	}
	if err := m.Kill("call", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Trigger("call", &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-0"}, "test"); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a trigger on a killed job: %v; want FailedPrecondition", err)
	}
	m.Close()
	<-j.act.done
	ran := false
	j.call(func() { ran = true })
	if !ran {
		t.Error("a call after the manager closed did not run")
	}
}

// TestWritesOnActor: a write of the job's state made by another goroutine
// (here a heartbeat that changes a node's state, taken in on its agent's
// stream) waits for its turn on the job's actor: while the actor is busy
// with a call the write is queued behind it and the node's state is
// unchanged; once the call returns the write is taken in. Written on the
// stream's goroutine under the job's lock, as before, it would not wait.
func TestWritesOnActor(t *testing.T) {
	m, j := testJob(t, Config{}, "owned", 2, 1)
	n := j.nodes["worker-0"]
	busy, hold := make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // a failed check must not leave the actor held: closing the manager waits for it
	go j.call(func() {
		close(busy)
		<-hold
	})
	<-busy
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		m.streamHeartbeat(j, n, &agentpb.Heartbeat{Status: &agentpb.NodeStatus{State: agentpb.NodeState_NODE_STATE_RUNNING, Pid: 7}})
	}()
	for len(j.act.inbox) == 0 { // until the heartbeat's write is queued
		select {
		case <-wrote:
			t.Fatal("the heartbeat was taken in while the actor was busy: written off the actor")
		default:
			time.Sleep(time.Millisecond)
		}
	}
	status := func() (agentpb.NodeState, int32) {
		pauseActor(j)
		defer resumeActor(j)
		return n.status.State, n.status.Pid
	}
	// The actor is held by the call above: the node is read as the actor
	// would.
	if st, pid := n.status.State, n.status.Pid; st == agentpb.NodeState_NODE_STATE_RUNNING || pid == 7 {
		t.Fatalf("worker-0 is %v (pid %d) while the actor is busy: the heartbeat was written off the actor", st, pid)
	}
	release()
	<-wrote
	if st, pid := status(); st != agentpb.NodeState_NODE_STATE_RUNNING || pid != 7 {
		t.Errorf("worker-0 is %v (pid %d) after the actor took the heartbeat in; want running, pid 7", st, pid)
	}
}

// paused are the jobs whose actors a test holds (pauseActor), with what
// lets each go on (a chan struct{}).
var paused sync.Map

// pauseActor holds j's actor in a call of its own until resumeActor(j):
// meanwhile the test goroutine may read and write j's state as the actor
// would (the call's start happens before pauseActor returns, and
// resumeActor happens before the actor goes on).
func pauseActor(j *jobState) {
	held, goOn := make(chan struct{}), make(chan struct{})
	go j.call(func() {
		close(held)
		<-goOn
	})
	<-held
	// Only one call holds the actor at a time: until resumeActor, no other
	// pauseActor of j gets here.
	paused.Store(j, goOn)
}

// resumeActor lets j's actor go on after pauseActor(j).
func resumeActor(j *jobState) {
	goOn, _ := paused.LoadAndDelete(j)
	close(goOn.(chan struct{}))
}

// reportOn takes in a report on j's actor, as its agent's stream does.
func reportOn(m *Manager, j *jobState, node string, r *coordinatorpb.ProgressReport) error {
	var err error
	j.onActor(func() { err = m.report(j, node, r) })
	return err
}

// takeOn hands an agent's message to j's actor and waits for it to be
// taken in, as a stream's post does (but synchronously).
func takeOn(m *Manager, j *jobState, n *nodeState, msg *agentpb.AgentMessage) {
	j.onActor(func() { m.fromAgent(j, n, msg) })
}
