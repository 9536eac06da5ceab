package manager

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// TestReportsSideBySide: the reports of many workers, taken in on their
// own goroutines (as their agents' streams do) while views are built and
// heartbeats come, all land: every worker ends at its last iteration with
// every BPT sample counted, each server has heard of the pushes to it, the
// job has left "starting", and the race detector sees no unguarded access.
func TestReportsSideBySide(t *testing.T) {
	const workers, reports = 16, 200
	m, j := testJob(t, Config{}, "sidebyside", workers, 2)
	var wg sync.WaitGroup
	for i := range workers {
		w := fmt.Sprintf("worker-%d", i)
		n := j.nodes[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := int64(1); it <= reports; it++ {
				reportOn(m, j, w, &coordinatorpb.ProgressReport{Job: "sidebyside", Node: w, Iteration: it, BatchSize: 4, Loss: 0.5,
					BptSeconds: []float64{0.01, 0.02}, Comm: []*coordinatorpb.CommSample{{Server: int32(it % 2), Bytes: 100, Seconds: 0.001}}})
				if it%50 == 0 {
					takeOn(m, j, n, &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{
						Status: &agentpb.NodeStatus{State: agentpb.NodeState_NODE_STATE_RUNNING, Pid: 1}}}})
				}
			}
		}()
	}
	stop := make(chan struct{})
	viewsDone := make(chan struct{})
	go func() {
		defer close(viewsDone)
		for {
			select {
			case <-stop:
				return
			default:
				j.invalidateViews()
				m.View([]string{"sidebyside"}, 10)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-viewsDone
	for i := range workers {
		p := j.nodes[fmt.Sprintf("worker-%d", i)].progress()
		if p.iteration != reports || p.bptCount != 2*reports || !p.reported {
			t.Errorf("worker-%d: iteration %d, %d BPT samples; want %d, %d", i, p.iteration, p.bptCount, reports, 2*reports)
		}
		if len(p.spark) != sparkLen {
			t.Errorf("worker-%d: sparkline of %d samples, want %d", i, len(p.spark), sparkLen)
		}
	}
	for _, s := range []string{"server-0", "server-1"} {
		if p := j.nodes[s].progress(); p.heard.IsZero() || len(p.spark) != sparkLen {
			t.Errorf("%s: heard at %v, sparkline of %d; want the pushes to it", s, p.heard, len(p.spark))
		}
	}
	pauseActor(j)
	state := j.state
	resumeActor(j)
	if state != StateRunning {
		t.Errorf("job state %q after its reports, want %q", state, StateRunning)
	}
}

// TestSparkWith: a sparkline keeps the last sparkLen samples, in order,
// and never changes the slice it was given (copies of a node's progress
// share it).
func TestSparkWith(t *testing.T) {
	seq := func(from, to int) []float64 {
		var s []float64
		for i := from; i < to; i++ {
			s = append(s, float64(i))
		}
		return s
	}
	// A window that has slid within its array, and one whose array is
	// full: appending must not write over what they show.
	slid := append(make([]float64, 0, sparkCap), seq(0, 100)...)[40:]
	full := append(make([]float64, 0, sparkCap), seq(0, sparkCap)...)[sparkCap-sparkLen:]
	for _, c := range []struct {
		name     string
		old, add []float64
		want     []float64
	}{
		{"slid within its array", slid, seq(100, 103), seq(43, 103)},
		{"its array full", full, seq(sparkCap, sparkCap+2), seq(sparkCap-sparkLen+2, sparkCap+2)},
		{"empty", nil, nil, []float64{}},
		{"first samples", nil, seq(0, 3), seq(0, 3)},
		{"below the bound", seq(0, 10), seq(10, 12), seq(0, 12)},
		{"at the bound", seq(0, 58), seq(58, 60), seq(0, 60)},
		{"past the bound", seq(0, 60), seq(60, 65), seq(5, 65)},
		{"more than the bound at once", seq(0, 10), seq(10, 100), seq(40, 100)},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := slices.Clone(c.old)
			got := sparkWith(c.old, c.add...)
			if !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v", got, c.want)
			}
			if !slices.Equal(old, c.old) {
				t.Errorf("the old sparkline changed: %v", c.old)
			}
			// Appending to what it returned leaves it as it was too.
			again := slices.Clone(got)
			sparkWith(got, 1e9, 2e9)
			if !slices.Equal(again, got) {
				t.Errorf("appending changed the returned sparkline: %v", got)
			}
		})
	}
}
