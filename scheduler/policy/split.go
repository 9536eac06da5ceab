package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Times in this file are measured exactly as the objective is: the time of
// b samples on a worker of throughput v is the float64 quotient b/v. Every
// cap and threshold is computed against that same quotient, so the split is
// optimal to the last bit against a brute-force search, not merely close.

// timeOf is the time a worker of throughput v (samples/s) takes for b
// samples. Zero samples take no time; samples on a worker with no
// throughput take forever.
func timeOf(b int64, v float64) float64 {
	if b == 0 {
		return 0
	}
	if !(v > 0) {
		return math.Inf(1)
	}
	return float64(b) / v
}

// capAt returns the largest b in [0, limit] with timeOf(b, v) ≤ t, for v > 0
// and t ≥ 0. Division by v is monotone and, for integers below 2^53,
// strictly increasing, so the estimate ⌊t·v⌋ needs at most a step or two of
// correction.
func capAt(t, v float64, limit int64) int64 {
	x := t * v
	var b int64
	switch {
	case x >= float64(limit):
		b = limit
	case x > 0:
		b = int64(x)
	}
	for b < limit && float64(b+1)/v <= t {
		b++
	}
	for b > 0 && float64(b)/v > t {
		b--
	}
	return b
}

// bisectTime returns the smallest float64 t in (lo, hi] with ok(t), given
// !ok(lo), ok(hi), 0 ≤ lo < hi and ok monotone. Non-negative floats order
// as their bit patterns do, so this is a binary search over at most 2^63
// values: 63 steps.
func bisectTime(lo, hi float64, ok func(float64) bool) float64 {
	l, h := math.Float64bits(lo), math.Float64bits(hi)
	for h-l > 1 {
		m := l + (h-l)/2
		if ok(math.Float64frombits(m)) {
			h = m
		} else {
			l = m
		}
	}
	return math.Float64frombits(h)
}

// MaxTime is the predicted BPT of a split, max_i sizes[i]/throughput[i]
// (AntDT's F(B_i) = B_i/v_i). A worker with a batch and no throughput makes
// it +Inf. It panics if the lengths differ.
func MaxTime(sizes []int, throughput []float64) float64 {
	if len(sizes) != len(throughput) {
		panic("policy: MaxTime: lengths differ")
	}
	var t float64
	for i, b := range sizes {
		t = math.Max(t, timeOf(int64(b), throughput[i]))
	}
	return t
}

// ErrInfeasible is returned when no split satisfies the bounds.
var ErrInfeasible = errors.New("no split within the bounds adds up to the global batch")

// MinMaxSplit solves AntDT-ND's Eq. 2–3 over the integers: batch sizes B_i
// with Σ B_i = global and minB[i] ≤ B_i ≤ maxB[i] that minimise the predicted
// BPT max_i B_i/v_i, v_i = throughput[i] in samples per second. A nil minB
// means 0 for all, a nil maxB means global for all. A worker with zero
// throughput gets its minimum, more only if the others cannot take the
// rest (it adds nothing to the predicted time only if it gets 0).
//
// Method. Let cap_i(T) = the largest B ≤ maxB[i] with B/v_i ≤ T. The
// optimum T* is the smallest T with Σ cap_i(T) ≥ global (and T* ≥
// max_i minB[i]/v_i); the Σ only changes at values k/v_i, and it is found by
// binary search over the float64 values themselves. At T* the excess
// Σ cap_i − global is smaller than the number of workers exactly at T*, so
// taking one sample from that many of them (slowest first: their time
// drops most) gives the split. When the minimum sizes alone set the time,
// the workers pinned at their minimum are fixed and the rest is split
// again, so the others are still balanced. O(n·64) time, O(n) space: about
// 2 ms for 10,000 workers.
//
// Worked example (the test's): B = 256, v = [400, 400, 400, 100]. The
// continuous optimum is T = 256/1300 ≈ 0.1969 s. At T = 79/400 = 0.1975 s
// the caps are ⌊0.1975·400⌋ = 79 three times and ⌊0.1975·100⌋ = 19: 256,
// enough; at the next smaller candidate 78/400 = 0.195 s they are 78·3 +
// 19 = 253, not enough. So the split is [79, 79, 79, 19] with predicted BPT
// 0.1975 s, against 64/100 = 0.64 s for the even split [64, 64, 64, 64].
func MinMaxSplit(global int, throughput []float64, minB, maxB []int) ([]int, error) {
	n := len(throughput)
	if minB != nil && len(minB) != n || maxB != nil && len(maxB) != n {
		return nil, fmt.Errorf("policy: split: %d throughputs, %d minimums, %d maximums", n, len(minB), len(maxB))
	}
	if global < 0 {
		return nil, fmt.Errorf("policy: split: negative global batch %d", global)
	}
	lo := make([]int64, n)
	hi := make([]int64, n)
	out := make([]int, n)
	var active []int
	rem := int64(global) // what the active workers must add up to
	var sumLo, sumHi int64
	for i, v := range throughput {
		lo[i], hi[i] = 0, int64(global)
		if minB != nil {
			lo[i] = int64(minB[i])
		}
		if maxB != nil {
			hi[i] = int64(maxB[i])
		}
		switch {
		case lo[i] < 0 || lo[i] > hi[i]:
			return nil, fmt.Errorf("policy: split: worker %d bounds [%d, %d]", i, lo[i], hi[i])
		case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
			return nil, fmt.Errorf("policy: split: worker %d throughput %v", i, v)
		case v == 0:
			out[i] = int(lo[i])
			rem -= lo[i]
		default:
			active = append(active, i)
			sumLo += lo[i]
			sumHi += hi[i]
		}
	}
	// Workers without throughput take samples only when the others are
	// full (the predicted time is then infinite whatever the split).
	for i, v := range throughput {
		if v == 0 && rem > sumHi {
			add := min(rem-sumHi, hi[i]-lo[i])
			out[i] += int(add)
			rem -= add
		}
	}
	if rem < sumLo || rem > sumHi {
		return nil, fmt.Errorf("policy: split of %d: %w", global, ErrInfeasible)
	}

	caps := make([]int64, n)
	for len(active) > 0 {
		// The minimums alone need tlo; at tlo every cap is ≥ its minimum.
		var tlo float64
		for _, i := range active {
			tlo = math.Max(tlo, timeOf(lo[i], throughput[i]))
		}
		var f int64
		for _, i := range active {
			caps[i] = capAt(tlo, throughput[i], hi[i])
			f += caps[i]
		}
		if f >= rem {
			// The minimums decide the time. Pin whoever cannot go above its
			// minimum at tlo (at least the workers that set tlo), cap the
			// others at tlo and balance them among themselves.
			if f == rem {
				for _, i := range active {
					out[i] = int(caps[i])
				}
				return out, nil
			}
			kept := active[:0]
			for _, i := range active {
				if caps[i] == lo[i] {
					out[i] = int(lo[i])
					rem -= lo[i]
				} else {
					hi[i] = caps[i]
					kept = append(kept, i)
				}
			}
			active = kept
			continue
		}

		var thi float64
		for _, i := range active {
			thi = math.Max(thi, timeOf(hi[i], throughput[i]))
		}
		enough := func(t float64) bool {
			var f int64
			for _, i := range active {
				if f += capAt(t, throughput[i], hi[i]); f >= rem {
					return true
				}
			}
			return false
		}
		t := bisectTime(tlo, thi, enough)
		f = 0
		var tight []int // workers exactly at t: one sample less puts them below it
		for _, i := range active {
			caps[i] = capAt(t, throughput[i], hi[i])
			f += caps[i]
			out[i] = int(caps[i])
			if caps[i] > lo[i] && timeOf(caps[i], throughput[i]) == t {
				tight = append(tight, i)
			}
		}
		excess := int(f - rem)
		if excess > len(tight) {
			// Cannot happen: at the float below t the caps fell short.
			return nil, fmt.Errorf("policy: split: excess %d over %d tight workers", excess, len(tight))
		}
		slices.SortStableFunc(tight, func(a, b int) int {
			return cmpFloat(throughput[a], throughput[b])
		})
		for _, i := range tight[:excess] {
			out[i]--
		}
		return out, nil
	}
	if rem != 0 {
		return nil, fmt.Errorf("policy: split of %d: %w", global, ErrInfeasible)
	}
	return out, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// accumSet is the set F_i of samples per iteration a worker can process
// under AntDT-DD's bounds: C·b with C in [cmin, cmax] accumulation steps of
// b in [bmin, bmax] samples.
type accumSet struct {
	bmin, bmax, cmin, cmax int64
}

// largestLE is the largest element ≤ y, or −1.
func (s accumSet) largestLE(y int64) int64 {
	best := int64(-1)
	for c := s.cmin; c <= s.cmax; c++ {
		b := min(s.bmax, y/c)
		if b >= s.bmin {
			best = max(best, c*b)
		}
	}
	return best
}

// smallestGE is the smallest element ≥ x, or −1.
func (s accumSet) smallestGE(x int64) int64 {
	best := int64(-1)
	for c := s.cmin; c <= s.cmax; c++ {
		b := max(s.bmin, (x+c-1)/c)
		if b <= s.bmax && (best < 0 || c*b < best) {
			best = c * b
		}
	}
	return best
}

// factor writes e (an element) as C·b with the fewest accumulation steps,
// so each step runs the largest micro-batch the device allows.
func (s accumSet) factor(e int64) (b, c int64) {
	for c := s.cmin; c <= s.cmax; c++ {
		if e%c == 0 && e/c >= s.bmin && e/c <= s.bmax {
			return e / c, c
		}
	}
	return 0, 0
}

// Accumulation solves AntDT-DD's Eq. 4: per worker a batch size B_i in
// [minBatch[i], maxBatch[i]] (the device's saturation point and memory
// limit) and an accumulation count C_i in [minAccum, maxAccum] with
// Σ C_i·B_i = global, minimising the time to the next synchronisation,
// max_i C_i·B_i / v_i. Each worker is its own device group (the paper's
// n_i = 1); throughputs must be positive.
//
// Method. Only E_i = C_i·B_i enters the objective, so this is a min-max
// split of the global batch over the sets F_i = {C·b} — which have gaps
// above maxBatch (with bounds [2, 3] and C ≤ 2, F = {2, 3, 4, 6}). The
// smallest T at which the largest elements of F_i under T·v_i add up to at
// least the global batch is a lower bound; usually taking samples back
// greedily (slowest worker first) lands exactly on the global batch there.
// When the gaps prevent that, a subset-sum over the F_i (bitsets of
// global+1 bits) decides feasibility and, if T must grow, a binary search
// over T finds the smallest feasible one. Each E_i is then written with the
// fewest accumulation steps, so every device runs its largest batch, which
// is the point of AntDT-DD (Fig. 9).
//
// Worked example (the test's): global 768, v = [400, 400, 200, 200]
// samples/s, batches in [32, 128], C in [1, 5]. Without accumulation the
// memory limits give at most 4·128 = 512 < 768. With it the lower bound
// is T = 768/1200 = 0.64 s: E = [256, 256, 128, 128], feasible, so the
// fast devices run 2 × 128 and the slow ones 1 × 128, all finishing in
// 0.64 s; just below 0.64 s the largest elements are 255 = 3·85 and 127,
// which add to 764 < 768.
func Accumulation(global int, throughput []float64, minBatch, maxBatch []int, minAccum, maxAccum int) (batch, accum []int, err error) {
	n := len(throughput)
	if len(minBatch) != n || len(maxBatch) != n {
		return nil, nil, fmt.Errorf("policy: accumulation: %d throughputs, %d minimums, %d maximums", n, len(minBatch), len(maxBatch))
	}
	if global < 0 {
		return nil, nil, fmt.Errorf("policy: accumulation: negative global batch %d", global)
	}
	if minAccum < 1 || minAccum > maxAccum {
		return nil, nil, fmt.Errorf("policy: accumulation: counts [%d, %d]", minAccum, maxAccum)
	}
	sets := make([]accumSet, n)
	var sumLo, sumHi int64
	var tlo, thi float64
	for i, v := range throughput {
		s := accumSet{int64(minBatch[i]), int64(maxBatch[i]), int64(minAccum), int64(maxAccum)}
		if s.bmin < 1 || s.bmin > s.bmax {
			return nil, nil, fmt.Errorf("policy: accumulation: worker %d batch bounds [%d, %d]", i, s.bmin, s.bmax)
		}
		if !(v > 0) || math.IsInf(v, 0) {
			return nil, nil, fmt.Errorf("policy: accumulation: worker %d throughput %v", i, v)
		}
		sets[i] = s
		sumLo += s.cmin * s.bmin
		sumHi += s.cmax * s.bmax
		tlo = math.Max(tlo, timeOf(s.cmin*s.bmin, v))
		thi = math.Max(thi, timeOf(s.cmax*s.bmax, v))
	}
	if int64(global) < sumLo || int64(global) > sumHi {
		return nil, nil, fmt.Errorf("policy: accumulation of %d: %w", global, ErrInfeasible)
	}
	B := int64(global)
	// capOf is the largest element of F_i that takes at most t.
	capOf := func(i int, t float64) int64 {
		return sets[i].largestLE(capAt(t, throughput[i], sets[i].cmax*sets[i].bmax))
	}
	enough := func(t float64) bool {
		var f int64
		for i := range sets {
			if f += capOf(i, t); f >= B {
				return true
			}
		}
		return false
	}
	t := tlo
	if !enough(t) {
		t = bisectTime(tlo, thi, enough)
	}

	e := make([]int64, n)
	if !greedyFill(B, t, throughput, sets, e, capOf) {
		dp := func(t float64) bool { return subsetSum(B, t, sets, capOf, nil) }
		if !dp(t) {
			if !dp(thi) {
				return nil, nil, fmt.Errorf("policy: accumulation of %d: %w", global, ErrInfeasible)
			}
			t = bisectTime(t, thi, dp)
		}
		subsetSum(B, t, sets, capOf, e)
	}
	batch = make([]int, n)
	accum = make([]int, n)
	for i, x := range e {
		b, c := sets[i].factor(x)
		batch[i], accum[i] = int(b), int(c)
	}
	return batch, accum, nil
}

// greedyFill starts every worker at its cap under t and gives back the
// excess, slowest-finishing worker first, each as far as its set allows.
// It reports whether the sum came out exact.
func greedyFill(B int64, t float64, v []float64, sets []accumSet, e []int64, capOf func(int, float64) int64) bool {
	order := make([]int, len(sets))
	var f int64
	for i := range sets {
		e[i] = capOf(i, t)
		f += e[i]
		order[i] = i
	}
	excess := f - B
	slices.SortStableFunc(order, func(a, b int) int {
		return cmpFloat(timeOf(e[b], v[b]), timeOf(e[a], v[a]))
	})
	for _, i := range order {
		if excess == 0 {
			break
		}
		x := sets[i].smallestGE(max(e[i]-excess, sets[i].cmin*sets[i].bmin))
		if x >= 0 && x < e[i] {
			excess -= e[i] - x
			e[i] = x
		}
	}
	return excess == 0
}

// subsetSum decides whether elements of F_i no larger than capOf(i, t) can
// add up to B, with one bitset of B+1 bits per prefix of workers. When e is
// not nil and the answer is yes, it writes a choice into e.
func subsetSum(B int64, t float64, sets []accumSet, capOf func(int, float64) int64, e []int64) bool {
	words := int(B/64) + 1
	n := len(sets)
	reach := make([][]uint64, n+1)
	reach[0] = make([]uint64, words)
	reach[0][0] = 1
	for i, s := range sets {
		prev, next := reach[i], make([]uint64, words)
		limit := capOf(i, t)
		for c := s.cmin; c <= s.cmax; c++ {
			for b := s.bmin; b <= s.bmax && c*b <= limit; b++ {
				orShifted(next, prev, c*b)
			}
		}
		reach[i+1] = next
	}
	if reach[n][B/64]>>(B%64)&1 == 0 {
		return false
	}
	if e == nil {
		return true
	}
	rest := B
	for i := n - 1; i >= 0; i-- {
		s, prev := sets[i], reach[i]
		limit := capOf(i, t)
		best := int64(-1)
		for c := s.cmin; c <= s.cmax; c++ {
			for b := s.bmin; b <= s.bmax && c*b <= limit; b++ {
				x := c * b
				if x <= rest && x > best && prev[(rest-x)/64]>>((rest-x)%64)&1 == 1 {
					best = x
				}
			}
		}
		e[i] = best
		rest -= best
	}
	return true
}

// orShifted sets dst |= src << k over the bitsets' length.
func orShifted(dst, src []uint64, k int64) {
	w, r := int(k/64), uint(k%64)
	for i := len(dst) - 1; i >= w; i-- {
		x := src[i-w] << r
		if r != 0 && i-w-1 >= 0 {
			x |= src[i-w-1] >> (64 - r)
		}
		dst[i] |= x
	}
}
