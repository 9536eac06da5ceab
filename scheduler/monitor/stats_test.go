package monitor

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func near(got, want, tol float64) bool {
	return math.Abs(got-want) <= tol
}

func TestFitRecoversAlphaBeta(t *testing.T) {
	// A server at 400 MB/s (α = 2.5 ns per byte) with 3 ms of latency
	// (β), sampled at sizes from 1 to 8 MiB with Gaussian noise of 0.1 ms.
	// With n = 200 the standard errors are about 0.15 % of α and 0.6 % of
	// β, so 1 % and 5 % are several SEs wide yet still catch a wrong fit.
	const alpha, beta, noise = 2.5e-9, 3e-3, 1e-4
	rng := rand.New(rand.NewPCG(1, 2))
	var xs, ys []float64
	for range 200 {
		x := float64(1<<20 + rng.IntN(7<<20))
		xs = append(xs, x)
		ys = append(ys, alpha*x+beta+noise*rng.NormFloat64())
	}
	a, b, ok := Fit(xs, ys)
	if !ok || !near(a, alpha, 0.01*alpha) || !near(b, beta, 0.05*beta) {
		t.Errorf("Fit(200 noisy samples) = %g, %g, %v; want %g, %g within 1%%, 5%%", a, b, ok, alpha, beta)
	}
	p, ok := PredictSEM(xs, ys, 4<<20)
	want := alpha*(4<<20) + beta
	if !ok || !near(p.Mean, want, 3*p.SEM) || p.SEM <= 0 || p.SEM > noise {
		t.Errorf("PredictSEM(4 MiB) = %+v, %v; want mean %g within 3 SEM, 0 < SEM < %g", p, ok, want, noise)
	}
}

func TestFitExact(t *testing.T) {
	tests := []struct {
		xs, ys      []float64
		alpha, beta float64
		ok          bool
	}{
		{[]float64{1, 2}, []float64{3, 5}, 2, 1, true},
		{[]float64{0, 10, 20}, []float64{1, 1, 1}, 0, 1, true},
		{[]float64{4e6, 8e6, 2e6}, []float64{0.011, 0.021, 0.006}, 2.5e-9, 0.001, true},
		{[]float64{1}, []float64{3}, 0, 0, false},                                 // one point
		{[]float64{5, 5, 5}, []float64{1, 2, 3}, 0, 0, false},                     // no slope to identify
		{[]float64{1, 2}, []float64{1}, 0, 0, false},                              // lengths differ
		{[]float64{4e6, 4e6 + 1}, []float64{1, 2}, 0, 0, false},                   // a byte apart in megabytes
		{[]float64{-1, 1, 3}, []float64{-1, 1, 3}, 1, 0, true},                    // x̄ ≠ 0, exact line
		{[]float64{-1, 1}, []float64{2, 2}, 0, 2, true},                           // x̄ = 0
		{[]float64{}, []float64{}, 0, 0, false},                                   // empty
		{[]float64{1e3, 2e3, 3e3}, []float64{2e-6, 3e-6, 4e-6}, 1e-9, 1e-6, true}, // small numbers
	}
	for _, tt := range tests {
		a, b, ok := Fit(tt.xs, tt.ys)
		if ok != tt.ok || !near(a, tt.alpha, 1e-12*math.Max(1, math.Abs(tt.alpha))) || !near(b, tt.beta, 1e-12) {
			t.Errorf("Fit(%v, %v) = %g, %g, %v; want %g, %g, %v", tt.xs, tt.ys, a, b, ok, tt.alpha, tt.beta, tt.ok)
		}
	}
}

func TestPredictSEMByHand(t *testing.T) {
	// xs = 1..4, ys = 2.1 3.9 6.2 7.8:
	//   x̄ = 2.5, ȳ = 5, Σ(x−x̄)² = 5, Σ(x−x̄)(y−ȳ) = 9.7
	//   α = 1.94, β = 5 − 1.94·2.5 = 0.15
	//   residuals 0.01, −0.13, 0.23, −0.11 → SSE = 0.082, MSE = 0.082/2 = 0.041
	//   s = 2.5: mean 5,    SEM = √(0.041·(1/4 + 0))        = √0.01025 ≈ 0.1012423
	//   s = 5:   mean 9.85, SEM = √(0.041·(1/4 + 6.25/5))   = √0.0615  ≈ 0.2479919
	xs := []float64{1, 2, 3, 4}
	ys := []float64{2.1, 3.9, 6.2, 7.8}
	tests := []struct {
		s    float64
		want Pred
	}{
		{2.5, Pred{5, math.Sqrt(0.01025)}},
		{5, Pred{9.85, math.Sqrt(0.0615)}},
	}
	for _, tt := range tests {
		got, ok := PredictSEM(xs, ys, tt.s)
		if !ok || !near(got.Mean, tt.want.Mean, 1e-12) || !near(got.SEM, tt.want.SEM, 1e-12) {
			t.Errorf("PredictSEM(%v, %v, %v) = %+v, %v; want %+v", xs, ys, tt.s, got, ok, tt.want)
		}
	}
	// Two points fit exactly but leave no degree of freedom for the SEM.
	if got, ok := PredictSEM([]float64{1, 2}, []float64{1, 2}, 1); ok {
		t.Errorf("PredictSEM(2 points) = %+v, true; want ok = false", got)
	}
}

func TestProportionalFallback(t *testing.T) {
	// Every sample is 4 MB: the slope is not identifiable, so the profile
	// is the sample mean scaled by size. ȳ = 0.02, sample variance of
	// (0.019, 0.020, 0.021) = 1e-6, SEM of the mean = √(1e-6/3).
	xs := []float64{4e6, 4e6, 4e6}
	ys := []float64{0.019, 0.020, 0.021}
	r := regress(xs, ys)
	if r.kind != Proportional {
		t.Fatalf("regress(equal sizes).kind = %v; want proportional", r.kind)
	}
	sem := math.Sqrt(1e-6 / 3)
	tests := []struct {
		s    float64
		want Pred
	}{
		{4e6, Pred{0.02, sem}},
		{8e6, Pred{0.04, 2 * sem}},
	}
	for _, tt := range tests {
		got, ok := r.predict(tt.s)
		if !ok || !near(got.Mean, tt.want.Mean, 1e-15) || !near(got.SEM, tt.want.SEM, 1e-15) {
			t.Errorf("predict(%v) = %+v, %v; want %+v", tt.s, got, ok, tt.want)
		}
	}
	// Zero-byte samples: a constant.
	r = regress([]float64{0, 0, 0}, ys)
	if got, ok := r.predict(1e6); !ok || !near(got.Mean, 0.02, 1e-15) || !near(got.SEM, sem, 1e-15) {
		t.Errorf("predict(zero sizes, 1e6) = %+v, %v; want {0.02 %g}", got, ok, sem)
	}
}

func TestSuperiorSet(t *testing.T) {
	// PSLD Alg. 1 by hand on five PSs (seconds; bounds = mean ∓ 1.645·SEM):
	//
	//   PS  mean  SEM    lower     upper
	//   0   1.00  0.10   0.83550   1.16450
	//   1   1.20  0.20   0.87100   1.52900
	//   2   1.10  0.05   1.01775   1.18225
	//   3   1.50  0.50   0.67750   2.32250
	//   4   1.60  0.02   1.56710   1.63290
	//
	// By increasing upper bound: 0, 2, 1, 4, 3. threshold = ∞.
	//   PS0: lower 0.8355 < ∞        → add, threshold = 1.16450
	//   PS2: lower 1.01775 < 1.16450 → add, threshold = 1.18225
	//   PS1: lower 0.871 < 1.18225   → add, threshold = 1.52900
	//   PS4: lower 1.5671 ≥ 1.529    → break.
	// PS3's lower bound (0.6775) is below the threshold, but the loop never
	// reaches it: its upper bound is the worst, and Alg. 1 stops at the
	// first server it can rule out. Superior = {0, 2, 1}; with
	// ScaleThreshold 1/2, 3 ≥ 2.5, so no scale-out.
	fivePS := []Pred{{1.00, 0.10}, {1.20, 0.20}, {1.10, 0.05}, {1.50, 0.50}, {1.60, 0.02}}

	tests := []struct {
		name  string
		preds []Pred
		want  []int
	}{
		{"paper-style example", fivePS, []int{0, 2, 1}},
		{"none", nil, nil},
		{"one", []Pred{{3, 1}}, []int{0}},
		// One clear winner: 1.01645 < every other lower bound 1.98355.
		{"one clear winner", []Pred{{2, 0.01}, {2, 0.01}, {1, 0.01}, {2, 0.01}, {2, 0.01}}, []int{2}},
		// Overlapping intervals all chain in.
		{"all overlap", []Pred{{1, 0.5}, {1.1, 0.5}, {1.2, 0.5}}, []int{0, 1, 2}},
		// Exact ties with no spread: lower = upper = threshold → break
		// (Alg. 1 line 5 is ≥), the lower index wins the tie.
		{"tie without spread", []Pred{{1, 0}, {1, 0}}, []int{0}},
		// An unmeasurable server (infinite SEM) sorts last and is taken,
		// since nothing rules it out.
		{"infinite SEM", []Pred{{1, 0.1}, {5, math.Inf(1)}, {1.05, 0.1}}, []int{0, 2, 1}},
		{"NaN skipped", []Pred{{math.NaN(), 1}, {1, 0.1}}, []int{1}},
	}
	for _, tt := range tests {
		if got := SuperiorSet(tt.preds); !slices.Equal(got, tt.want) {
			t.Errorf("%s: SuperiorSet(%v) = %v; want %v", tt.name, tt.preds, got, tt.want)
		}
	}
}

func TestSuperiorSetMatchesArgminLoop(t *testing.T) {
	// The sort in SuperiorSet must equal Alg. 1's literal loop (argmin of
	// the upper bound over the remaining set each round).
	literal := func(preds []Pred) []int {
		remained := make([]bool, len(preds))
		for i := range remained {
			remained[i] = true
		}
		var sup []int
		threshold := math.Inf(1)
		for {
			r := -1
			for i, p := range preds {
				if remained[i] && (r < 0 || p.Upper() < preds[r].Upper()) {
					r = i
				}
			}
			if r < 0 || preds[r].Lower() >= threshold {
				return sup
			}
			threshold = preds[r].Upper()
			sup = append(sup, r)
			remained[r] = false
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		preds := make([]Pred, 1+rng.IntN(12))
		for i := range preds {
			preds[i] = Pred{Mean: float64(rng.IntN(20)) / 10, SEM: float64(rng.IntN(5)) / 20}
		}
		if got, want := SuperiorSet(preds), literal(preds); !slices.Equal(got, want) {
			t.Fatalf("SuperiorSet(%v) = %v; want %v (literal Alg. 1)", preds, got, want)
		}
	}
}

func TestSpeedVariance(t *testing.T) {
	tests := []struct {
		speeds []float64
		want   float64
	}{
		{nil, 0},
		{[]float64{5}, 0},
		{[]float64{4, 4}, 0},
		{[]float64{10, 5, 20}, 3},      // (20 − 5)/5
		{[]float64{100, 10}, 9},        // PSLD §2.3: best 10× the worst
		{[]float64{1.5, 1, 1.25}, 0.5}, // (1.5 − 1)/1
		{[]float64{0, 3}, math.Inf(1)}, // a server that moves nothing
	}
	for _, tt := range tests {
		if got := SpeedVariance(tt.speeds); got != tt.want {
			t.Errorf("SpeedVariance(%v) = %v; want %v", tt.speeds, got, tt.want)
		}
	}
}
