package manager

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// TestJobActor: the agent messages of a job's streams, posted concurrently,
// are taken in by the job's actor in each stream's order (every worker ends
// at its last iteration; heartbeats in between change the node's state),
// and once the job has ended the actor is gone and a straggler's message
// is taken in on its own goroutine.
func TestJobActor(t *testing.T) {
	m, j := testJob(t, Config{}, "actor", 4, 1)
	const reports = 300
	report := func(w string, it int64) *kelpiepb.AgentMessage {
		return &kelpiepb.AgentMessage{Body: &kelpiepb.AgentMessage_Report{Report: &kelpiepb.ProgressReport{
			Job: "actor", Node: w, Iteration: it, BatchSize: 16, Loss: 0.5, BptSeconds: []float64{0.01}}}}
	}
	heartbeat := func(state kelpiepb.NodeState) *kelpiepb.AgentMessage {
		return &kelpiepb.AgentMessage{Body: &kelpiepb.AgentMessage_Heartbeat{Heartbeat: &kelpiepb.Heartbeat{
			Status: &kelpiepb.NodeStatus{State: state, Pid: 1}}}}
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
					j.post(n, heartbeat(kelpiepb.NodeState_NODE_STATE_RUNNING))
				}
			}
		}()
	}
	wg.Wait()
	taken := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
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
	m.mu.Lock()
	for i := range 4 {
		n := j.nodes[fmt.Sprintf("worker-%d", i)]
		if n.status.State != kelpiepb.NodeState_NODE_STATE_RUNNING {
			t.Errorf("%s is %v; its heartbeat was not taken in", n.name, n.status.State)
		}
	}
	m.mu.Unlock()
	if err := m.Kill("actor", "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.act.done:
	case <-time.After(time.Minute):
		t.Fatal("the actor still runs after its job ended")
	}
	j.post(j.nodes["worker-0"], report("worker-0", reports+1))
	m.mu.Lock()
	it := j.nodes["worker-0"].progress().iteration
	m.mu.Unlock()
	if it != reports+1 {
		t.Errorf("a report after the end left worker-0 at iteration %d, want %d", it, reports+1)
	}
}
