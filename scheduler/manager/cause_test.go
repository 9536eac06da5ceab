package manager

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// TestCauseInView: reports whose split shows worker-2 computing three
// times as long as the others make worker-2 a straggler whose view names
// "compute" as its cause; a batch cut proposed for it cites that cause,
// and one proposed for a worker slow on the wire is warned about.
func TestCauseInView(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, _ := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	stragglerReports(m, j, clk)
	views := m.View([]string{"hist"}, 0)
	if len(views) != 1 {
		t.Fatalf("views = %d", len(views))
	}
	for _, n := range views[0].GetNodes() {
		c := n.GetCause()
		switch n.GetName() {
		case "worker-2":
			if c.GetKind() != "compute" || c.GetRatio() != 4 || c.GetDetail() != "compute 4.0× median" {
				t.Errorf("worker-2 (%s): cause %v; want compute 4.0× median", n.GetClass(), c)
			}
			if n.GetSplit().GetComputeS() != 0.008 {
				t.Errorf("worker-2's split %v; want 8 ms of compute per iteration", n.GetSplit())
			}
		default:
			if c != nil {
				t.Errorf("%s (%s, not straggling) has cause %v", n.GetName(), n.GetClass(), c)
			}
		}
	}
	pauseActor(j)
	why := j.causeInputs().causes()
	cut := &consolepb.Action{Kind: "ADJUST_BS", Reason: "r", BatchSizes: map[string]int32{"worker-0": 18, "worker-1": 18, "worker-2": 10, "worker-3": 18}}
	j.citeCause(cut, why)
	wire := &consolepb.Action{Kind: "ADJUST_BS", Reason: "r", BatchSizes: map[string]int32{"worker-0": 18, "worker-1": 18, "worker-2": 18, "worker-3": 10}}
	j.citeCause(wire, why)
	resumeActor(j)
	if cut.Cause != "compute" || !strings.HasSuffix(cut.Reason, "[cause: worker-2: compute 4.0× median]") || cut.CauseWarning != "" {
		t.Errorf("the cut of worker-2: cause %q, reason %q, warning %q; want compute cited, no warning", cut.Cause, cut.Reason, cut.CauseWarning)
	}
	if wire.Cause != "pull" || !strings.Contains(wire.CauseWarning, "ADJUST_BS does not answer the measured cause: worker-3: pull") {
		t.Errorf("the cut of worker-3: cause %q, warning %q; want pull and a warning", wire.Cause, wire.CauseWarning)
	}
	// A restart of worker-2: its relaunched process is judged by its own
	// reports.
	pauseActor(j)
	j.forgetCause(&consolepb.Action{Kind: "KILL_RESTART", Target: "worker-2"})
	_, kept := j.causeInputs().phases["worker-2"]
	resumeActor(j)
	if kept {
		t.Error("worker-2's split outlived its restart")
	}
}

// TestRollbackProposed: an applied batch cut that the judge finds a miss
// is proposed for rollback (its policy in approve mode): an ADJUST_BS of
// policy rollback restoring the batch sizes from before it, citing it.
// In auto mode the rollback is decided at once.
func TestRollbackProposed(t *testing.T) {
	for _, mode := range []string{ModeApprove, ModeAuto} {
		t.Run(mode, func(t *testing.T) {
			clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
			_, j, report := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
			slow := map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.028, "worker-3": 0.002}
			for range 10 {
				report(slow)
			}
			at := clk.now()
			pauseActor(j)
			j.policies["antdt-nd"].Mode = mode
			a := &consolepb.Action{Id: "a-1", Job: "hist", Kind: "ADJUST_BS", Policy: "antdt-nd", State: ActApplied,
				BatchSizes: map[string]int32{"worker-0": 18, "worker-1": 18, "worker-2": 10, "worker-3": 18},
				Evidence:   map[string]float64{"predicted_throughput": 2 * j.thr.rate()},
				Created:    timestamppb.New(at.Add(-time.Second)), Updated: timestamppb.New(at),
				History: []*consolepb.ActionTransition{{State: ActProposed, At: timestamppb.New(at.Add(-time.Second))},
					{State: ActApplied, At: timestamppb.New(at)}}}
			j.recordUndo(a)
			j.actions = append(j.actions, a)
			j.byID[a.Id] = a
			resumeActor(j)
			for range 7 {
				report(slow)
			}
			pauseActor(j)
			defer resumeActor(j)
			if !a.GetRealized().GetMiss() {
				t.Fatalf("the cut was not judged a miss: %v", a.GetRealized())
			}
			var back *consolepb.Action
			for _, x := range j.actions {
				if x.RollbackOf == "a-1" {
					back = x
				}
			}
			if back == nil {
				t.Fatal("no rollback of the missed cut")
			}
			if back.Kind != "ADJUST_BS" || back.Policy != "rollback" || back.BatchSizes["worker-2"] != 16 || back.BatchSizes["worker-0"] != 16 ||
				!strings.Contains(back.Reason, "missed its prediction") {
				t.Errorf("rollback = %v; want ADJUST_BS back to 16 each, citing the miss", back)
			}
			if proposed := back.State == ActProposed; proposed != (mode == ModeApprove) {
				t.Errorf("in %s mode the rollback is %s", mode, back.State)
			}
		})
	}
}

// TestPreviewFilled: an action added through the gate gets its preview
// (scheduler/preview) shortly after: a worker's restart, locally, says
// what the machine runs and what the restart costs.
func TestPreviewFilled(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	report(map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.002, "worker-3": 0.002})
	id, err := m.Trigger("hist", &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-2"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pauseActor(j)
		p := j.byID[id].GetPreview()
		resumeActor(j)
		if p != nil {
			if !strings.HasPrefix(p.GetStart(), "local: ") || !strings.Contains(p.GetCost(), "back to the queue") {
				t.Errorf("preview = %v; want the local capacity and the restart's cost", p)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no preview")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stragglerReports sends 10 seconds of reports of historyJob's workers:
// worker-2 spends 6 ms more per iteration, all of it compute; worker-3 a
// little more on the wire, not enough to straggle.
func stragglerReports(m *Manager, j *jobState, clk *testClock) {
	iter := int64(0)
	for range 10 {
		clk.add(time.Second)
		iter += 10
		for _, w := range []string{"worker-0", "worker-1", "worker-2", "worker-3"} {
			bpt, sp := 0.004, &coordinatorpb.TimeSplit{Iterations: 10, ComputeS: 0.02, DataS: 0.002, PushS: 0.009, PullS: 0.009}
			switch w {
			case "worker-2":
				bpt, sp.ComputeS = 0.010, 0.08 // 6 ms more per iteration, all of it compute
			case "worker-3":
				sp.PullS = 0.03 // a little slower on the wire, not a straggler
			}
			r := &coordinatorpb.ProgressReport{Job: "hist", Node: w, Iteration: iter, Samples: iter * 16, BatchSize: 16, Split: sp,
				Comm: []*coordinatorpb.CommSample{{Server: 0, Bytes: 1000, Seconds: 0.001}}}
			for range 10 {
				r.BptSeconds = append(r.BptSeconds, bpt)
			}
			takeOn(m, j, j.nodes[w], &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Report{Report: r}})
		}
		j.tick(clk.now())
	}
}
