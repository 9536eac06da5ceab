package optim

import (
	"math"
	"runtime"
	"slices"
	"testing"
)

func near(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-6*math.Max(1, math.Abs(float64(b[i]))) {
			return false
		}
	}
	return true
}

// TestApply checks each optimizer against steps worked out by hand.
func TestApply(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		start []float32
		grads [][]float32 // one per step
		want  [][]float32 // parameters after each step
	}{
		{"sgd", Config{Kind: SGD, LR: 0.1}, []float32{1, -2},
			[][]float32{{0.5, 1}, {0.5, -3}},
			[][]float32{{0.95, -2.1}, {0.9, -1.8}}},
		{"sgd is the default kind", Config{LR: 1}, []float32{0},
			[][]float32{{2}}, [][]float32{{-2}}},
		{"sgd zero lr", Config{Kind: SGD}, []float32{3},
			[][]float32{{2}}, [][]float32{{3}}},
		// v = 0.9v + g: v1 = [1, -2], v2 = [0.9+0.5, -1.8+0] = [1.4, -1.8]; p -= 0.1v.
		{"momentum default 0.9", Config{Kind: Momentum, LR: 0.1}, []float32{1, 0},
			[][]float32{{1, -2}, {0.5, 0}},
			[][]float32{{0.9, 0.2}, {0.76, 0.38}}},
		// μ = 0.5: v = 2, then 0.5·2 + 2 = 3, then 0.5·3 - 1 = 0.5.
		{"momentum 0.5", Config{Kind: Momentum, LR: 1, Momentum: 0.5}, []float32{10},
			[][]float32{{2}, {2}, {-1}},
			[][]float32{{8}, {5}, {4.5}}},
		// β1 = β2 = ε = 0.5, lr 1, g = 2: m = 1, v = 2, m̂ = 2, v̂ = 4, step = 2/(2+0.5) = 0.8.
		// Step 2, g = 0: m = 0.5, v = 1, m̂ = 0.5/0.75, v̂ = 1/0.75, step = 0.666667/(1.154701+0.5) = 0.402893.
		{"adam hand", Config{Kind: Adam, LR: 1, Beta1: 0.5, Beta2: 0.5, Eps: 0.5}, []float32{1},
			[][]float32{{2}, {0}},
			[][]float32{{0.2}, {0.2 - 0.402893}}},
		// Defaults: the first step moves each coordinate by ≈ lr against the gradient's sign.
		// Step 2, coordinate 0, g = -1: m = -0.055, v = 0.00124975, m̂ = -0.289474,
		// v̂ = 0.625188, step = 0.1·(-0.289474)/0.790688 = -0.036610.
		// Coordinate 1, g = 0: m = -0.36, v = 0.015984, m̂ = -1.894737, v̂ = 7.995998,
		// step = 0.1·(-1.894737)/2.827719 = -0.067006.
		{"adam defaults", Config{Kind: Adam, LR: 0.1}, []float32{1, 1},
			[][]float32{{0.5, -4}, {-1, 0}},
			[][]float32{{0.9, 1.1}, {0.936610, 1.167006}}},
	}
	for _, tt := range tests {
		p := slices.Clone(tt.start)
		s := NewState(tt.cfg, len(p))
		for i, g := range tt.grads {
			Apply(tt.cfg, s, p, g)
			if !near(p, tt.want[i]) {
				t.Errorf("%s: after step %d Apply(%+v) params = %v; want %v", tt.name, i+1, tt.cfg, p, tt.want[i])
			}
		}
	}
}

func TestApplyRows(t *testing.T) {
	// A block of 3 rows of 2. Rows not listed keep values and state.
	tests := []struct {
		name string
		cfg  Config
		rows [][]int
		grad [][]float32
		want []float32
	}{
		{"sgd", Config{Kind: SGD, LR: 0.5}, [][]int{{2, 0}}, [][]float32{{2, 4, -2, 0}},
			[]float32{2, 1, 1, 1, 0, -1}},
		{"sgd repeated row", Config{Kind: SGD, LR: 0.5}, [][]int{{1, 1}}, [][]float32{{2, 0, 2, 0}},
			[]float32{1, 1, -1, 1, 1, 1}},
		// Row 0 gets momentum over two pushes (v = 1 then 1.9); row 2 only once (v = 1).
		{"momentum lazy", Config{Kind: Momentum, LR: 1}, [][]int{{0}, {0, 2}}, [][]float32{{1, 0}, {1, 0, 1, 0}},
			[]float32{-1.9, 1, 1, 1, 0, 1}}, // row 0: 1 - 1 - 1.9
		// Row 1 is first touched by the second push, yet gets a first Adam step (≈ lr): its
		// bias correction counts its own updates.
		{"adam per-row steps", Config{Kind: Adam, LR: 0.1}, [][]int{{0}, {0, 1}}, [][]float32{{3, -3}, {3, -3, 5, 0}},
			[]float32{0.8, 1.2, 0.9, 1, 1, 1}},
	}
	for _, tt := range tests {
		p := []float32{1, 1, 1, 1, 1, 1}
		s := NewState(tt.cfg, len(p))
		for i := range tt.rows {
			ApplyRows(tt.cfg, s, p, 2, tt.rows[i], tt.grad[i])
		}
		if !near(p, tt.want) {
			t.Errorf("%s: ApplyRows(%+v, rows %v) params = %v; want %v", tt.name, tt.cfg, tt.rows, p, tt.want)
		}
		touched := map[int]bool{}
		for _, rs := range tt.rows {
			for _, r := range rs {
				touched[r] = true
			}
		}
		for r := range 3 {
			for _, st := range [][]float32{s.M, s.V} {
				if !touched[r] && st != nil && (st[2*r] != 0 || st[2*r+1] != 0) {
					t.Errorf("%s: state of untouched row %d = %v; want zeros", tt.name, r, st[2*r:2*r+2])
				}
			}
		}
	}
	// Adam on the whole block and on every row at once agree on the first step.
	cfg := Config{Kind: Adam, LR: 0.01}
	a, b := []float32{1, 2, 3, 4}, []float32{1, 2, 3, 4}
	g := []float32{0.1, -0.2, 0.3, -0.4}
	Apply(cfg, NewState(cfg, 4), a, g)
	ApplyRows(cfg, NewState(cfg, 4), b, 2, []int{0, 1}, g)
	if !slices.Equal(a, b) {
		t.Errorf("Apply = %v, ApplyRows over all rows = %v; want equal", a, b)
	}
}

func TestConfig(t *testing.T) {
	if got, want := (Config{}).WithDefaults(), (Config{Kind: SGD, Momentum: 0.9, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}); got != want {
		t.Errorf("Config{}.WithDefaults() = %+v; want %+v", got, want)
	}
	tests := []struct {
		cfg Config
		ok  bool
	}{
		{Config{Kind: Adam, LR: 0.001}, true},
		{Config{Kind: "rmsprop", LR: 0.1}, false},
		{Config{LR: -1}, false},
		{Config{LR: float32(math.Inf(1))}, false},
		{Config{Kind: Momentum, Momentum: 1}, false},
		{Config{Kind: Adam, Beta2: 1.5}, false},
		{Config{Kind: Adam, Eps: -1}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("Config%+v.Validate() = %v; want ok=%v", tt.cfg, err, tt.ok)
		}
	}
}

func BenchmarkApplyAdam(b *testing.B) {
	const n = 1 << 20 // a 4 MiB block
	cfg := Config{Kind: Adam, LR: 0.001}
	s := NewState(cfg, n)
	p, g := make([]float32, n), make([]float32, n)
	for i := range g {
		g[i] = float32(i%7) - 3
	}
	b.SetBytes(4 * n)
	for b.Loop() {
		Apply(cfg, s, p, g)
	}
}

// TestDecay: cosine and linear decays go from LR at iteration 0 to
// Final·LR at Steps and stay there; none keeps LR.
func TestDecay(t *testing.T) {
	for _, tt := range []struct {
		decay string
		final float32
		t     int64
		want  float32
	}{
		{DecayNone, 0, 50, 1},
		{"", 0, 50, 1},
		{DecayCosine, 0, 0, 1},
		{DecayCosine, 0, 50, 0.5},
		{DecayCosine, 0, 100, 0},
		{DecayCosine, 0.1, 100, 0.1},
		{DecayCosine, 0.1, 50, 0.55},
		{DecayCosine, 0, 200, 0},
		{DecayLinear, 0, 25, 0.75},
		{DecayLinear, 0.2, 50, 0.6},
		{DecayLinear, 0.2, -5, 1},
	} {
		c := Config{Kind: SGD, LR: 1, Decay: tt.decay, Final: tt.final, Steps: 100}
		if got := c.At(tt.t).LR; math.Abs(float64(got-tt.want)) > 1e-6 {
			t.Errorf("%s final %g: LR at %d = %g; want %g", tt.decay, tt.final, tt.t, got, tt.want)
		}
	}
	if err := (Config{Kind: SGD, LR: 1, Decay: "step"}).Validate(); err == nil {
		t.Error("Validate accepted decay step")
	}
}

// TestSplitEqualsOnePass: a block large enough to split across goroutines
// is updated exactly as in one pass, for every optimizer.
func TestSplitEqualsOnePass(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	n := 3*SplitMin + 37
	for _, kind := range []string{SGD, Momentum, Adam} {
		c := Config{Kind: kind, LR: 0.01}
		grad := make([]float32, n)
		for i := range grad {
			grad[i] = float32(i%97) - 48
		}
		split, one := make([]float32, n), make([]float32, n)
		ss, so := NewState(c, n), NewState(c, n)
		for range 3 {
			Apply(c, ss, split, grad)
			// The reference: the same kernels over the whole block at once.
			cc := mustValid(c)
			switch kind {
			case SGD:
				sgd(cc, one, grad)
			case Momentum:
				momentum(cc, so.V, one, grad)
			case Adam:
				so.Step++
				adam(cc, so.Step, so.M, so.V, one, grad)
			}
		}
		for i := range one {
			if split[i] != one[i] {
				t.Fatalf("%s: param[%d] = %v split, %v in one pass", kind, i, split[i], one[i])
			}
		}
	}
}

// TestApplyRangeEqualsApply: an update computed a range at a time, out of
// place (copies of the parameters and state, as a server does while a
// gradient arrives), is bit for bit Apply's, for every optimizer and for
// ranges of several sizes (the last one the block's odd tail).
func TestApplyRangeEqualsApply(t *testing.T) {
	for _, n := range []int{5*1024 + 37, 512<<10 + 37} {
		testApplyRange(t, n)
	}
}

func testApplyRange(t *testing.T, n int) {
	for _, kind := range []string{SGD, Momentum, Adam} {
		for _, chunk := range []int{32 * (n / 5000), 1024 * (n / 5000), n + 31} {
			c := Config{Kind: kind, LR: 0.01}
			grad := make([]float32, n)
			for i := range grad {
				grad[i] = float32(i%97) - 48
			}
			ranged, whole := make([]float32, n), make([]float32, n)
			sr, sw := NewState(c, n), NewState(c, n)
			for step := range 3 {
				Apply(c, sw, whole, grad)
				// Out of place: copies, updated range by range.
				next := State{M: slices.Clone(sr.M), V: slices.Clone(sr.V), Step: sr.Step}
				vals := slices.Clone(ranged)
				AdvanceStep(c, &next)
				// And with ApplyRangeTo, into fresh buffers.
				next2 := State{Step: next.Step}
				if sr.M != nil {
					next2.M = make([]float32, n)
				}
				if sr.V != nil {
					next2.V = make([]float32, n)
				}
				vals2 := make([]float32, n)
				for lo := 0; lo < n; {
					hi := min(lo+chunk, n)
					if n-hi < RangeUnit {
						hi = n // a short tail goes with this range
					}
					ApplyRangeTo(c, &next2, vals2, sr, ranged, grad, lo, hi)
					ApplyRange(c, &next, vals, grad, lo, hi)
					lo = hi
				}
				if !slices.Equal(vals, vals2) || !slices.Equal(next.M, next2.M) || !slices.Equal(next.V, next2.V) {
					t.Fatalf("%s, ranges of %d, step %d: ApplyRangeTo differs from ApplyRange", kind, chunk, step)
				}
				ranged, sr = vals, &next
				for i := range whole {
					if ranged[i] != whole[i] {
						t.Fatalf("%s, ranges of %d, step %d: param[%d] = %v by range, %v by Apply", kind, chunk, step, i, ranged[i], whole[i])
					}
				}
				if sr.Step != sw.Step || !slices.Equal(sr.M, sw.M) || !slices.Equal(sr.V, sw.V) {
					t.Fatalf("%s, ranges of %d, step %d: state differs from Apply's", kind, chunk, step)
				}
			}
		}
	}
}

// TestApplyRangeUndoable: SGD in place a range at a time, with the old
// values left where the gradient was, is bit for bit Apply's (on the
// vector kernels, where the CPU has them, and on the Go loops), reports a
// non-finite result, and copying the saved values back restores the block
// exactly.
func TestApplyRangeUndoable(t *testing.T) {
	defer func(v bool) { vector = v }(vector)
	for _, vec := range []bool{vector, false} {
		vector = vec
		for _, n := range []int{1, 31, 32, 33, 5*1024 + 37, 512<<10 + 37} {
			for _, chunk := range []int{32, 1024, n + 31} {
				c := Config{Kind: SGD, LR: 0.01}
				grad, start := make([]float32, n), make([]float32, n)
				for i := range grad {
					grad[i] = float32(i%97) - 48
					start[i] = float32(i%89)*0.37 - 11
				}
				grad[n/2] = float32(math.Inf(1))
				whole := slices.Clone(start)
				wantFinite := Apply(c, NewState(c, n), whole, grad)
				vals, saved := slices.Clone(start), slices.Clone(grad)
				finite := true
				for lo := 0; lo < n; {
					hi := min(lo+chunk, n)
					if n-hi < RangeUnit {
						hi = n // a short tail goes with this range
					}
					finite = ApplyRangeUndoable(c, vals, saved, lo, hi) && finite
					lo = hi
				}
				if finite != wantFinite || finite {
					t.Errorf("vector=%v n=%d ranges of %d: finite = %v; Apply says %v (an Inf was pushed)", vec, n, chunk, finite, wantFinite)
				}
				for i := range whole {
					if math.Float32bits(vals[i]) != math.Float32bits(whole[i]) {
						t.Fatalf("vector=%v n=%d ranges of %d: param[%d] = %v; Apply %v", vec, n, chunk, i, vals[i], whole[i])
					}
				}
				if !slices.Equal(saved, start) {
					t.Fatalf("vector=%v n=%d ranges of %d: the saved values are not the old ones", vec, n, chunk)
				}
			}
		}
	}
}
