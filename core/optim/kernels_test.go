package optim

import (
	"fmt"
	"math"
	"testing"
)

// TestKernelsAgreeWithLoops: the vector kernels (where the CPU has them)
// give the Go loops' results up to the rounding of a fused multiply-add, at
// every length around the vector unit, and the sums exactly.
func TestKernelsAgreeWithLoops(t *testing.T) {
	for _, n := range []int{0, 1, 7, 31, 32, 33, 63, 64, 65, 100, 1000} {
		g := make([]float32, n)
		start := make([]float32, n)
		for i := range g {
			g[i] = float32(i%13)*0.37 - 2
			start[i] = float32(i%7)*1.5 - 4
		}
		c := Config{Kind: Momentum, LR: 0.1, Momentum: 0.9}
		p1, p2 := append([]float32(nil), start...), append([]float32(nil), start...)
		if !sgd(c, p1, g) || !sgdGo(c.LR, p2, g) {
			t.Fatalf("n=%d: finite values reported not finite", n)
		}
		if !near(p1, p2) {
			t.Errorf("n=%d: sgd = %v; Go loop %v", n, p1, p2)
		}
		v1, v2 := make([]float32, n), make([]float32, n)
		p1, p2 = append(p1[:0], start...), append(p2[:0], start...)
		for range 3 {
			if !momentum(c, v1, p1, g) || !momentumGo(c.Momentum, c.LR, v2, p2, g) {
				t.Fatalf("n=%d: momentum reported non-finite values", n)
			}
		}
		if !near(p1, p2) || !near(v1, v2) {
			t.Errorf("n=%d: momentum = %v, %v; Go loop %v, %v", n, p1, v1, p2, v2)
		}
		a1, a2 := append([]float32(nil), start...), append([]float32(nil), start...)
		Accumulate(a1, g)
		accumulateGo(a2, g)
		for i := range a1 {
			if a1[i] != a2[i] {
				t.Fatalf("n=%d: Accumulate[%d] = %v; Go loop %v", n, i, a1[i], a2[i])
			}
		}
	}
}

// TestKernelsSeeNonFinite: an update that makes one parameter NaN or ±Inf,
// wherever it lies (vector body, padded tail, Go loop), is reported.
func TestKernelsSeeNonFinite(t *testing.T) {
	for _, n := range []int{1, 5, 32, 45, 96, 129} {
		for _, at := range []int{0, n / 2, n - 1} {
			for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 3e38} {
				name := fmt.Sprintf("n=%d at=%d grad %v", n, at, bad)
				g := make([]float32, n)
				g[at] = bad
				p := make([]float32, n)
				p[at] = -3e38 // with 3e38·10 the result overflows to -Inf
				for _, c := range []Config{{Kind: SGD, LR: 10}, {Kind: Momentum, LR: 10}, {Kind: Adam, LR: 10}} {
					if c.Kind == Adam && !math.IsNaN(float64(bad)) && !math.IsInf(float64(bad), 0) {
						continue // Adam's step is bounded by about lr: a huge finite gradient stays finite
					}
					pp := append([]float32(nil), p...)
					if Apply(c, NewState(c, n), pp, g) {
						t.Errorf("%s %s: Apply reported finite; p[%d] = %v", name, c.Kind, at, pp[at])
					}
					next := NewState(c, n)
					AdvanceStep(c, next)
					if ApplyRangeTo(c, next, make([]float32, n), NewState(c, n), p, g, 0, n) {
						t.Errorf("%s %s: ApplyRangeTo reported finite", name, c.Kind)
					}
					rows := []int{at}
					pr := append([]float32(nil), p...)
					if ApplyRows(c, NewState(c, n), pr, 1, rows, g[at:at+1]) {
						t.Errorf("%s %s: ApplyRows reported finite; p[%d] = %v", name, c.Kind, at, pr[at])
					}
				}
			}
		}
	}
	// And a finite update is finite, also when split across goroutines.
	n := 2*SplitMin + 3
	c := Config{Kind: SGD, LR: 0.5}
	if !Apply(c, NewState(c, n), make([]float32, n), make([]float32, n)) {
		t.Error("a zero update reported non-finite")
	}
}

func benchmarkApply(b *testing.B, kind string, n int) {
	cfg := Config{Kind: kind, LR: 1e-6}
	s := NewState(cfg, n)
	p, g := make([]float32, n), make([]float32, n)
	for i := range g {
		g[i] = float32(i%7) - 3
	}
	b.SetBytes(4 * int64(n))
	for b.Loop() {
		Apply(cfg, s, p, g)
	}
}

// The update of a 1 MiB block (a push in `kelpie bench pushpull`), with
// the divergence check it includes.
func BenchmarkApplySGD1MB(b *testing.B)      { benchmarkApply(b, SGD, 1<<18) }
func BenchmarkApplyMomentum1MB(b *testing.B) { benchmarkApply(b, Momentum, 1<<18) }

// The same update with the Go loop, for the ratio.
func BenchmarkSGDGoLoop1MB(b *testing.B) {
	const n = 1 << 18
	p, g := make([]float32, n), make([]float32, n)
	b.SetBytes(4 * n)
	for b.Loop() {
		sgdGo(1e-6, p, g)
	}
}

func BenchmarkAccumulate1MB(b *testing.B) {
	const n = 1 << 18
	p, g := make([]float32, n), make([]float32, n)
	b.SetBytes(4 * n)
	for b.Loop() {
		Accumulate(p, g)
	}
}
