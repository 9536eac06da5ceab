package monitor

import (
	"math"
	"sort"
)

// Z90 is the one-sided normal quantile PSLD uses for its 90 % confidence
// bounds: Pred_lower/upper = Pred_mean ∓ 1.645·Pred_SEM (§4.2).
const Z90 = 1.645

// Pred is a server's predicted communication time at one parameter size:
// the mean prediction and its standard error, both in seconds.
type Pred struct {
	Mean, SEM float64
}

// Lower is PSLD's Pred_lower = Mean − 1.645·SEM.
func (p Pred) Lower() float64 { return p.Mean - Z90*p.SEM }

// Upper is PSLD's Pred_upper = Mean + 1.645·SEM.
func (p Pred) Upper() float64 { return p.Mean + Z90*p.SEM }

// FitKind says which model a server's profile was fitted with.
type FitKind int

const (
	// NoFit: too few samples in the window to predict anything.
	NoFit FitKind = iota
	// Linear: the least-squares line Pred(s) = α·s + β (PSLD §4.1).
	Linear
	// Proportional: every sample had (nearly) the same size, so the slope
	// cannot be identified; the profile is time ∝ bytes through the origin
	// (α = ȳ/x̄, β = 0), or a constant ȳ when the sizes are all zero. At the
	// sampled size it predicts the sample mean, which is all the data says.
	Proportional
)

func (k FitKind) String() string {
	switch k {
	case NoFit:
		return "none"
	case Linear:
		return "linear"
	case Proportional:
		return "proportional"
	}
	return "FitKind(?)"
}

// minFitSamples is the least number of samples with a defined SEM: the
// residual variance of a line has n−2 degrees of freedom.
const minFitSamples = 3

// regression is the summary of one least-squares fit, computed in centred
// passes so sizes of megabytes do not lose precision to cancellation.
type regression struct {
	n          int
	xbar, ybar float64
	sxx, syy   float64
	alpha      float64 // seconds per byte
	beta       float64 // seconds
	mse        float64 // residual variance, SSE/(n−2); NaN when n < 3
	kind       FitKind
}

// degenerate reports whether the sizes are too alike to identify a slope:
// all equal, or spread by less than a millionth of their mean (a byte in a
// megabyte), where a fitted slope would be noise.
func degenerate(n int, xbar, sxx float64) bool {
	tol := 1e-6 * xbar
	return sxx <= float64(n)*tol*tol
}

// regress fits ys ≈ alpha·xs + beta. xs and ys must have the same length.
// With fewer than minFitSamples points the kind is NoFit; with degenerate
// sizes it falls back to Proportional.
func regress(xs, ys []float64) regression {
	r := regression{n: len(xs), mse: math.NaN()}
	if r.n == 0 {
		return r
	}
	for i := range xs {
		r.xbar += xs[i]
		r.ybar += ys[i]
	}
	r.xbar /= float64(r.n)
	r.ybar /= float64(r.n)
	var sxy float64
	for i := range xs {
		dx, dy := xs[i]-r.xbar, ys[i]-r.ybar
		r.sxx += dx * dx
		sxy += dx * dy
		r.syy += dy * dy
	}
	if degenerate(r.n, r.xbar, r.sxx) {
		if r.xbar > 0 {
			r.alpha = r.ybar / r.xbar
		} else {
			r.beta = r.ybar
		}
		if r.n >= minFitSamples {
			r.kind = Proportional
		}
		return r
	}
	r.alpha = sxy / r.sxx
	r.beta = r.ybar - r.alpha*r.xbar
	if r.n >= minFitSamples {
		var sse float64
		for i := range xs {
			e := ys[i] - (r.alpha*xs[i] + r.beta)
			sse += e * e
		}
		r.mse = sse / float64(r.n-2)
		r.kind = Linear
	}
	return r
}

// predict evaluates the profile at size s. ok is false for NoFit.
func (r regression) predict(s float64) (Pred, bool) {
	switch r.kind {
	case Linear:
		d := s - r.xbar
		return Pred{
			Mean: r.alpha*s + r.beta,
			SEM:  math.Sqrt(r.mse * (1/float64(r.n) + d*d/r.sxx)),
		}, true
	case Proportional:
		// The mean of the samples scaled to s; its standard error scales
		// with it.
		sem := math.Sqrt(r.syy / float64(r.n-1) / float64(r.n))
		if r.xbar > 0 {
			return Pred{Mean: r.alpha * s, SEM: sem * s / r.xbar}, true
		}
		return Pred{Mean: r.beta, SEM: sem}, true
	}
	return Pred{}, false
}

// Fit returns the least-squares line ys ≈ alpha·xs + beta (PSLD's
// Pred(r,s) = α_r·s + β_r with xs in bytes and ys in seconds). ok is false
// when the slices differ in length, hold fewer than two points, or the xs
// are all (nearly) equal, so that no slope can be identified.
func Fit(xs, ys []float64) (alpha, beta float64, ok bool) {
	if len(xs) != len(ys) || len(xs) < 2 {
		return 0, 0, false
	}
	r := regress(xs, ys)
	if degenerate(r.n, r.xbar, r.sxx) {
		return 0, 0, false
	}
	return r.alpha, r.beta, true
}

// PredictSEM fits xs, ys as Fit does and returns the prediction at size s
// with the standard error of that mean prediction,
//
//	SEM = sqrt(MSE · (1/n + (s − x̄)² / Σ(x − x̄)²)),  MSE = SSE/(n−2),
//
// PSLD's Pred_mean(r,s) and Pred_SEM(r,s). ok is false when Fit would fail
// or there are fewer than three points (the SEM needs n−2 > 0).
func PredictSEM(xs, ys []float64, s float64) (p Pred, ok bool) {
	if len(xs) != len(ys) {
		return Pred{}, false
	}
	r := regress(xs, ys)
	if r.kind != Linear {
		return Pred{}, false
	}
	return r.predict(s)
}

// SuperiorSet is PSLD Algorithm 1, lines 3–10: starting with an infinite
// threshold, repeatedly take the remaining server with the smallest upper
// bound; stop when its lower bound is at or above the threshold, otherwise
// add it and make its upper bound the new threshold. The result holds the
// indices into preds in the order they were added (best upper bound first).
// Ties in the upper bound go to the lower index. Entries whose bounds are
// NaN are never chosen. Lines 11–12 (scale-out) are the caller's: compare
// len(result) with ScaleThreshold·len(preds).
func SuperiorSet(preds []Pred) (superior []int) {
	order := make([]int, 0, len(preds))
	for i, p := range preds {
		if !math.IsNaN(p.Lower()) && !math.IsNaN(p.Upper()) {
			order = append(order, i)
		}
	}
	// Taking the argmin of the remaining set each round is the same as
	// walking the servers in increasing order of their upper bound.
	sort.SliceStable(order, func(a, b int) bool {
		return preds[order[a]].Upper() < preds[order[b]].Upper()
	})
	threshold := math.Inf(1)
	for _, r := range order {
		if preds[r].Lower() >= threshold {
			break
		}
		threshold = preds[r].Upper()
		superior = append(superior, r)
	}
	return superior
}

// SpeedVariance is PSLD's PS speed variation (Speed_best − Speed_worst) /
// Speed_worst (§2.3; the straggler check of §4 compares it with a
// threshold, 1 in the paper). Fewer than two speeds give 0; a worst speed
// at or below zero gives +Inf.
func SpeedVariance(speeds []float64) float64 {
	if len(speeds) < 2 {
		return 0
	}
	best, worst := speeds[0], speeds[0]
	for _, v := range speeds[1:] {
		best = math.Max(best, v)
		worst = math.Min(worst, v)
	}
	if worst <= 0 {
		return math.Inf(1)
	}
	return (best - worst) / worst
}

// straggles is AntDT-ND's comparison T̄_i ≥ λ·T̄ with T̄ = sum/n, written
// as n·T̄_i ≥ λ·sum so that a value exactly on the boundary is not lost to
// the rounding of a division.
func straggles(ti float64, n int, sum, lambda float64) bool {
	return float64(n)*ti >= lambda*sum
}
