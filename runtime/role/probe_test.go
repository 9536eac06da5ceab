package role

import (
	"context"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/straggler"
)

// TestProbeKernelInjection: the probe's kernel runs under the node's
// injected compute delay, as an iteration does (50 ms a round here, far
// above the kernel's own few milliseconds), every round; without an
// injection no round waits for one.
func TestProbeKernelInjection(t *testing.T) {
	in := straggler.Injection{Node: "worker-1", Kind: straggler.Compute, Sleep: 50 * time.Millisecond, Intensity: 1}
	slow := &prober{sched: straggler.ForNode([]straggler.Injection{in}, "worker-1"), start: time.Now()}
	took, ran := slow.kernel(context.Background(), 4)
	if ran != 4 || took < 50*time.Millisecond {
		t.Errorf("kernel under a 50ms compute injection: %d rounds, %v a round; want 4, at least 50ms", ran, took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ran := slow.kernel(ctx, 4); ran != 0 {
		t.Errorf("kernel after its context ended ran %d rounds", ran)
	}
}
