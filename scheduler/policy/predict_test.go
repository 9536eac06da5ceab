package policy

import (
	"math"
	"strings"
	"testing"
)

// TestPredictionFromMeasuredThroughput: with the job's measured throughput
// known (samples per wall-clock second, the console's figure), a batch
// change predicts that figure scaled by the change of the iteration's time
// (0.96 s → 0.64 s: × 1.5), so its "before" is what the operator sees and
// what its realized effect is measured in — not the global batch over the
// slowest device's compute time (768 / 0.96 = 800/s), which leaves the
// waiting out ("10920 → 17590" beside "2.13k → 17.6k/s").
func TestPredictionFromMeasuredThroughput(t *testing.T) {
	p := AntDTDD{MinBatch: 32, MaxBatch: 128, MinAccum: 1, MaxAccum: 5}
	job := Job{Name: "dd", GlobalBatch: 768, Workers: fourWorkers, Throughput: 500,
		Accumulation: map[string]int{"worker-0": 2, "worker-1": 2, "worker-2": 2, "worker-3": 2}}
	acts := p.Propose(ddSnapshot(400, 400, 200, 200), job)
	if len(acts) != 1 {
		t.Fatalf("Propose = %q; want one ADJUST_BS", plan(acts))
	}
	a := acts[0]
	if math.Abs(a.PredictedThroughput-750) > 1e-9 {
		t.Errorf("predicted %v samples/s; want 500 × 0.96/0.64 = 750", a.PredictedThroughput)
	}
	if !strings.Contains(a.Predicted, "throughput 500 → 750 samples/s") {
		t.Errorf("prediction %q; want it to start from the measured 500 samples/s", a.Predicted)
	}
}
