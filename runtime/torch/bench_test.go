package torch

import (
	"testing"
	"time"

	"github.com/kelpie/kelpie/runtime/data"
)

// BenchmarkStep is one training step of the tiny model through the child:
// the request, forward and backward, the reply. It reports where a step's
// time goes (ms per step): in Python, and in the round trip's two pipe
// hops. On a loaded machine the hops are the scheduler's wake-up latency.
func BenchmarkStep(b *testing.B) {
	if err := pythonHasTorch(); err != nil {
		b.Skip(err)
	}
	m, err := New(Config{Script: tinyPath(b), Seed: 1, Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	p, g := m.Shared()
	var bt data.Batch
	idx := make([]int, 32)
	for i := range idx {
		idx[i] = i
	}
	Set{Name: "train", N: 600}.Fill(&bt, idx)
	m.Grad(p, &bt, g, 1)
	before := m.Timing()
	b.ResetTimer()
	for range b.N {
		m.Grad(p, &bt, g, 1)
	}
	b.StopTimer()
	t := m.Timing()
	per := func(d, d0 time.Duration) float64 { return float64(d-d0) / float64(b.N) / 1e6 }
	b.ReportMetric(per(t.Python, before.Python), "python-ms/step")
	b.ReportMetric(per(t.ToChild, before.ToChild), "to-child-ms/step")
	b.ReportMetric(per(t.ToWorker, before.ToWorker), "to-worker-ms/step")
}
