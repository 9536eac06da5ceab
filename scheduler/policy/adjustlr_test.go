package policy

import (
	"math"
	"testing"

	"github.com/kelpie/kelpie/scheduler/monitor"
)

func TestAdjustLR(t *testing.T) {
	// Short-window BPTs 0.1, 0.1, 0.1, 0.25 s: Σ 1/T = 34. A healthy
	// worker's gradient is 0.1·34 − 1 = 2.4 updates stale, worker-3's
	// 0.25·34 − 1 = 7.5: its rate is scaled by 2.4/7.5 = 0.32.
	transient := workerScenario(slowAfter(25*s, 400*ms), 10*ms)
	healthy := workerScenario(steadyAt(100*ms), 10*ms)
	want := map[string]float64{"worker-0": 1, "worker-1": 1, "worker-2": 1, "worker-3": 0.32}
	tests := []struct {
		name string
		snap monitor.Snapshot
		p    AdjustLR
		have map[string]float64
		want map[string]float64 // nil: no action
	}{
		{"lagging worker penalised", transient, AdjustLR{}, nil, want},
		{"already in effect", transient, AdjustLR{}, map[string]float64{"worker-3": 0.33}, nil},
		{"floor", transient, AdjustLR{MinScale: 0.5}, nil, map[string]float64{"worker-0": 1, "worker-1": 1, "worker-2": 1, "worker-3": 0.5}},
		{"healthy", healthy, AdjustLR{}, nil, nil},
		{"recovered: back to 1", healthy, AdjustLR{}, map[string]float64{"worker-3": 0.32}, map[string]float64{"worker-0": 1, "worker-1": 1, "worker-2": 1, "worker-3": 1}},
	}
	for _, tt := range tests {
		job := ndJob(false, nil)
		job.LRScale = tt.have
		acts := tt.p.Propose(tt.snap, job)
		if tt.want == nil {
			if len(acts) != 0 {
				t.Errorf("%s: Propose = %q; want none", tt.name, plan(acts))
			}
			continue
		}
		if len(acts) != 1 || acts[0].Kind != KindAdjustLR {
			t.Errorf("%s: Propose = %q; want one ADJUST_LR", tt.name, plan(acts))
			continue
		}
		got := acts[0].LRScale
		ok := len(got) == len(tt.want)
		for k, v := range tt.want {
			ok = ok && math.Abs(got[k]-v) < 1e-9
		}
		if !ok {
			t.Errorf("%s: LRScale = %v; want %v", tt.name, got, tt.want)
		}
	}
}
