package manager

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/policydecl"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// pluginPolicy is a policy added the way docs/scheduler.md says, for this
// package's tests: it halves the learning rate of every worker slower
// than factor × the mean. Nothing in the manager knows it.
type pluginPolicy struct{}

var pluginFactor = policydecl.Param{Name: "factor", Type: policydecl.Float, Default: 3, Min: 1, MinOpen: true, Max: math.Inf(1), Source: "test §1"}

func (pluginPolicy) Decl() policydecl.Policy {
	return policydecl.Policy{Name: "test-plugin", Params: []policydecl.Param{pluginFactor}}
}

func (pluginPolicy) Propose(s policy.Snapshot, _ *rand.Rand) []policy.Action {
	f := s.Params.Float(pluginFactor)
	var out []policy.Action
	for _, w := range s.Monitor.Workers {
		if w.RatioTrans > f {
			out = append(out, policy.Action{Kind: policy.KindAdjustLR, Policy: "test-plugin", Target: w.Node,
				LRScale: map[string]float64{w.Node: 0.5}, Reason: fmt.Sprintf("%s is %.1f× the mean", w.Node, w.RatioTrans)})
		}
	}
	return out
}

func init() { policy.Register(pluginPolicy{}) }

// TestPluginPolicyRuns: a registered policy is a job's policy like the
// builtin ones: off by default, with its declared parameters in the job's
// view, its live edits checked against its declaration, and its
// proposals through the gate once it is on.
func TestPluginPolicyRuns(t *testing.T) {
	m, j := testJob(t, Config{}, "plug", 4, 1)
	v := m.View([]string{"plug"}, 0)[0]
	i := slices.IndexFunc(v.GetPolicies(), func(p *consolepb.PolicyView) bool { return p.GetName() == "test-plugin" })
	if i < 0 || v.GetPolicies()[i].GetMode() != ModeOff || v.GetPolicies()[i].GetParams()["factor"] != 3 {
		t.Fatalf("the job's policies = %v; want test-plugin off with factor 3", v.GetPolicies())
	}
	if err := m.SetPolicy("plug", "test-plugin", ModeApprove, map[string]float64{"factor": 0.5}, "test"); err == nil || !strings.Contains(err.Error(), "factor must be > 1, not 0.5 (test §1)") {
		t.Fatalf("factor 0.5: %v", err)
	}
	if err := m.SetPolicy("plug", "test-plugin", ModeApprove, map[string]float64{"factor": 2}, "test"); err != nil {
		t.Fatal(err)
	}
	pauseActor(j)
	j.state = StateRunning
	resumeActor(j)
	for w := range 4 {
		node := fmt.Sprintf("worker-%d", w)
		for at := time.Duration(0); at < 10*time.Second; at += 100 * time.Millisecond {
			bpt := 100 * time.Millisecond
			if w == 3 && at >= 5*time.Second {
				bpt = 500 * time.Millisecond
			}
			j.mon.ObserveWorker(node, monitor.WorkerSample{At: at, BPT: bpt, BatchSize: 16, Iteration: int64(at / (100 * time.Millisecond))})
		}
	}
	snap := j.mon.Snapshot(10 * time.Second)
	if w, _ := snap.Worker("worker-3"); w.RatioTrans <= 2 {
		t.Fatalf("worker-3 is %.2f× the mean; the scenario wants it above 2", w.RatioTrans)
	}
	j.runPolicies(snap, j.submitted.Add(10*time.Second))
	pauseActor(j)
	defer resumeActor(j)
	var got []string
	for _, a := range j.actions {
		got = append(got, a.Policy+" "+a.Kind+" "+a.Target+" "+a.State)
	}
	if !slices.Contains(got, "test-plugin ADJUST_LR worker-3 "+ActProposed) {
		t.Errorf("actions = %q; want test-plugin's ADJUST_LR of worker-3 waiting for approval", got)
	}
}
