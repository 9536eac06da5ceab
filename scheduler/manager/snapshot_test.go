package manager

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// TestSnapshotsUnderLoad: readers hammer what the job's actor publishes —
// its facts, the console's detail and summary views (rebuilt again and
// again: the clock moves past their TTL), the Prometheus outcome counts
// and the policies' inputs through the ticker's path — while the actor
// takes in a stream of reports and writes of the job's state from other
// goroutines. Under -race any read of the job's state off the actor that
// the actor does not hand over shows as a data race; a torn read shows as
// a node row whose batch size and iteration come from different reports
// (every report here carries batch = iteration), or facts whose state and
// over disagree. The rows are frozen a few nodes per turn of the actor, so
// reports are taken in between the turns of one build.
func TestSnapshotsUnderLoad(t *testing.T) {
	const workers, reports = 32, 400
	defer func(n int) { rowsPerTurn = n }(rowsPerTurn)
	rowsPerTurn = 5 // the rows are frozen in several turns, reports in between
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, j := testJob(t, Config{Clock: clk}, "hammer", workers, 2)
	names := j.spec.WorkerNames()
	nodes := make([]*nodeState, len(names))
	for i, name := range names {
		nodes[i] = j.node(name)
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	torn := make(chan string, 16)
	tear := func(what string) {
		select {
		case torn <- what:
		default:
		}
	}
	reader := func(read func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				read()
			}
		}()
	}
	reader(func() {
		f := j.facts()
		if f.over != (f.state == StateCompleted || f.state == StateFailed || f.state == StateKilled || f.state == StateDiverged) {
			tear("facts: state " + f.state + " with over disagreeing")
		}
	})
	reader(func() {
		for _, v := range m.View([]string{"hammer"}, 30) {
			if len(v.Nodes) != workers+2 {
				tear("view: " + v.Name + " does not show every node once")
			}
			for _, n := range v.Nodes {
				if n.Role == "worker" && n.Iteration > 0 && int64(n.BatchSize) != n.Iteration {
					tear("view: " + n.Name + " shows the batch of one report and the iteration of another")
				}
			}
		}
	})
	reader(func() { m.View(nil, 0) })
	reader(func() { clk.Advance(ViewTTL); time.Sleep(time.Millisecond) })

	// Writes from another goroutine, through the actor: a node's agent
	// connecting and leaving, as the streams do.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			n := nodes[i%len(nodes)]
			hb := &agentpb.Heartbeat{Status: &agentpb.NodeStatus{State: agentpb.NodeState_NODE_STATE_RUNNING, Pid: int32(100 + i%3)}}
			m.streamHeartbeat(j, n, hb)
		}
	}()

	// The reports, posted as the agents' streams post them.
	var posters sync.WaitGroup
	for w, n := range nodes {
		posters.Add(1)
		go func() {
			defer posters.Done()
			for it := int64(1); it <= reports; it++ {
				r := &coordinatorpb.ProgressReport{Job: "hammer", Node: n.name, Iteration: it, BatchSize: int32(it),
					BptSeconds: []float64{0.01, 0.012}, Comm: []*coordinatorpb.CommSample{{Server: int32(w % 2), Bytes: 100, Seconds: 0.001}}}
				j.post(n, &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Report{Report: r}})
			}
		}()
	}
	posters.Wait()
	// The ticker's path reads the job too: the Monitor, the policies'
	// inputs, the goodput ledger, the timeline.
	j.tick(clk.Now())
	stop.Store(true)
	wg.Wait()
	close(torn)
	for what := range torn {
		t.Error(what)
	}

	// Every report was taken in: each worker's last is its iteration.
	pauseActor(j)
	defer resumeActor(j)
	for _, n := range nodes {
		if p := n.progress(); p.iteration != reports || p.batch != reports {
			t.Errorf("%s is at iteration %d, batch %d; want %d", n.name, p.iteration, p.batch, reports)
		}
	}
	if j.state != StateRunning {
		t.Errorf("job is %s; want running (its first report moved it)", j.state)
	}
}
