package policy

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMinMaxSplit(t *testing.T) {
	tests := []struct {
		name     string
		global   int
		v        []float64
		min, max []int
		want     []int
		wantT    float64
	}{
		// The worked example of the doc comment: even split 64 each would
		// take 64/100 = 0.64 s on the slow worker; the caps at 79/400 add
		// up to 79·3 + ⌊0.1975·100⌋ = 256 exactly, at 78/400 only 253.
		{"AntDT example", 256, []float64{400, 400, 400, 100}, nil, nil, []int{79, 79, 79, 19}, 79.0 / 400},
		{"equal workers", 256, []float64{100, 100, 100, 100}, nil, nil, []int{64, 64, 64, 64}, 0.64},
		// 10 over v = 1, 2: T* = 7/2 = 3.5 gives caps 3 + 7 = 10.
		{"two workers", 10, []float64{1, 2}, nil, nil, []int{3, 7}, 3.5},
		// Caps at T = 4/1 add to 4 + 8 = 12 > 11: one sample comes off a
		// worker exactly at 4 s — the slow one, whose time drops to 3 s.
		{"excess taken from the slowest tight worker", 11, []float64{1, 2}, nil, nil, []int{3, 8}, 4},
		// The fast worker may take at most 100: the rest goes to the slow.
		{"max bound", 256, []float64{400, 100}, nil, []int{100, 256}, []int{100, 156}, 1.56},
		// The slow worker must take 40 (time 0.4 s); the others share 216
		// under that time: 0.4·400 = 160 each would be too much, so they
		// are balanced among themselves: 108 each (0.27 s).
		{"min bound sets the time", 256, []float64{400, 400, 100}, []int{0, 0, 40}, nil, []int{108, 108, 40}, 0.4},
		{"zero throughput keeps its minimum", 100, []float64{0, 50, 50}, []int{10, 0, 0}, nil, []int{10, 45, 45}, math.Inf(1)},
		{"zero throughput with minimum 0", 100, []float64{0, 50, 50}, nil, nil, []int{0, 50, 50}, 1},
		{"nothing to split", 0, []float64{3, 4}, nil, nil, []int{0, 0}, 0},
		{"one worker", 17, []float64{3}, nil, nil, []int{17}, 17.0 / 3},
		{"no workers, no batch", 0, nil, nil, nil, []int{}, 0},
	}
	for _, tt := range tests {
		got, err := MinMaxSplit(tt.global, tt.v, tt.min, tt.max)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: MinMaxSplit(%d, %v, %v, %v) = %v, %v; want %v", tt.name, tt.global, tt.v, tt.min, tt.max, got, err, tt.want)
			continue
		}
		if mt := MaxTime(got, tt.v); mt != tt.wantT {
			t.Errorf("%s: MaxTime(%v) = %v; want %v", tt.name, got, mt, tt.wantT)
		}
	}
}

func TestMinMaxSplitErrors(t *testing.T) {
	tests := []struct {
		name     string
		global   int
		v        []float64
		min, max []int
	}{
		{"above the maximums", 10, []float64{1, 1}, nil, []int{4, 5}},
		{"below the minimums", 3, []float64{1, 1}, []int{2, 2}, nil},
		{"zero-throughput minimum too big", 3, []float64{0, 1}, []int{4, 0}, nil},
		{"min above max", 3, []float64{1, 1}, []int{3, 0}, []int{2, 3}},
		{"negative throughput", 3, []float64{-1, 1}, nil, nil},
		{"NaN throughput", 3, []float64{math.NaN(), 1}, nil, nil},
		{"length mismatch", 3, []float64{1, 1}, []int{0}, nil},
		{"negative batch", -1, []float64{1}, nil, nil},
		{"no workers", 5, nil, nil, nil},
	}
	for _, tt := range tests {
		if got, err := MinMaxSplit(tt.global, tt.v, tt.min, tt.max); err == nil {
			t.Errorf("%s: MinMaxSplit(%d, %v, %v, %v) = %v; want an error", tt.name, tt.global, tt.v, tt.min, tt.max, got)
		}
	}
	_, err := MinMaxSplit(10, []float64{1}, nil, []int{5})
	if !errors.Is(err, ErrInfeasible) {
		t.Errorf("MinMaxSplit over the bounds: error %v; want ErrInfeasible", err)
	}
}

// bruteSplit returns the least max time over every integer split within
// the bounds, and whether there is one.
func bruteSplit(global int, v []float64, lo, hi []int) (float64, bool) {
	best, found := math.Inf(1), false
	cur := make([]int, len(v))
	var rec func(i, left int)
	rec = func(i, left int) {
		if i == len(v) {
			if left == 0 {
				t := MaxTime(cur, v)
				if !found || t < best {
					best, found = t, true
				}
			}
			return
		}
		for b := lo[i]; b <= hi[i] && b <= left; b++ {
			cur[i] = b
			rec(i+1, left-b)
		}
	}
	rec(0, global)
	return best, found
}

// TestMinMaxSplitBrute checks the split against an exhaustive search on
// small random cases: same optimum (to the bit), bounds and sum respected.
func TestMinMaxSplitBrute(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < 3000; k++ {
		n := 1 + r.IntN(4)
		global := r.IntN(25)
		v := make([]float64, n)
		lo := make([]int, n)
		hi := make([]int, n)
		for i := range v {
			switch r.IntN(4) {
			case 0:
				v[i] = float64(1 + r.IntN(5)) // integers: many exact ties
			case 1:
				v[i] = 0.1 * float64(1+r.IntN(30))
			default:
				v[i] = 0.05 + 10*r.Float64()
			}
			if r.IntN(10) == 0 {
				v[i] = 0
			}
			lo[i] = r.IntN(4)
			hi[i] = lo[i] + r.IntN(15)
		}
		want, feasible := bruteSplit(global, v, lo, hi)
		got, err := MinMaxSplit(global, v, lo, hi)
		if !feasible {
			if err == nil {
				t.Fatalf("MinMaxSplit(%d, %v, %v, %v) = %v; want an error (no split exists)", global, v, lo, hi, got)
			}
			continue
		}
		if err != nil {
			t.Fatalf("MinMaxSplit(%d, %v, %v, %v): %v; want max time %v", global, v, lo, hi, err, want)
		}
		sum := 0
		for i, b := range got {
			sum += b
			if b < lo[i] || b > hi[i] {
				t.Fatalf("MinMaxSplit(%d, %v, %v, %v) = %v: worker %d out of bounds", global, v, lo, hi, got, i)
			}
		}
		if sum != global {
			t.Fatalf("MinMaxSplit(%d, %v, %v, %v) = %v: sum %d", global, v, lo, hi, got, sum)
		}
		if mt := MaxTime(got, v); mt != want {
			t.Fatalf("MinMaxSplit(%d, %v, %v, %v) = %v with max time %v; want %v", global, v, lo, hi, got, mt, want)
		}
	}
}

func TestAccumulation(t *testing.T) {
	tests := []struct {
		name         string
		global       int
		v            []float64
		minB, maxB   []int
		minC, maxC   int
		wantB, wantC []int
		wantT        float64
	}{
		// The worked example of the doc comment (AntDT Fig. 9): the fast
		// devices accumulate two full batches, the slow ones run one.
		{"AntDT-DD example", 768, []float64{400, 400, 200, 200}, []int{32, 32, 32, 32}, []int{128, 128, 128, 128}, 1, 5,
			[]int{128, 128, 128, 128}, []int{2, 2, 1, 1}, 0.64},
		// Everything fits without accumulation: it is the plain min-max split.
		{"no accumulation needed", 256, []float64{400, 400, 400, 100}, []int{1, 1, 1, 1}, []int{256, 256, 256, 256}, 1, 5,
			[]int{79, 79, 79, 19}, []int{1, 1, 1, 1}, 79.0 / 400},
		// With accumulation fixed at 2, only even sizes per worker exist.
		{"fixed accumulation", 20, []float64{1, 1}, []int{1, 1}, []int{10, 10}, 2, 2,
			[]int{5, 5}, []int{2, 2}, 10},
		// F = {2, 3, 4, 6} for both: the caps at T = 4 are 4 + 4 = 8 ≥ 7;
		// giving one back turns the first 4 into a 3 (1 × 3) and leaves the
		// second at 4 = 2 × 2 (3 is the memory limit). Time 4/1 = 4.
		{"gaps", 7, []float64{1, 1}, []int{2, 2}, []int{3, 3}, 1, 2,
			[]int{3, 2}, []int{1, 2}, 4},
		// F = {16,18,24,27,32,36}, {6,9,12}, {10,15,20} (v = 2, 2, 1). At
		// the lower bound T = 20 the caps are 36 + 12 + 20 = 68 ≥ 62, and
		// giving 6 back greedily, slowest-finishing worker first, turns 20
		// into 15 and then cannot take the last 1 (36 → 32 and 12 → 9 give
		// back too much): stuck at 63. The subset-sum finds 36 + 6 + 20.
		{"greedy stuck, subset-sum", 62, []float64{2, 2, 1}, []int{8, 3, 5}, []int{9, 3, 5}, 2, 4,
			[]int{9, 3, 5}, []int{4, 2, 4}, 20},
	}
	for _, tt := range tests {
		b, c, err := Accumulation(tt.global, tt.v, tt.minB, tt.maxB, tt.minC, tt.maxC)
		if err != nil || !slices.Equal(b, tt.wantB) || !slices.Equal(c, tt.wantC) {
			t.Errorf("%s: Accumulation(%d, %v, %v, %v, %d, %d) = %v, %v, %v; want %v, %v", tt.name,
				tt.global, tt.v, tt.minB, tt.maxB, tt.minC, tt.maxC, b, c, err, tt.wantB, tt.wantC)
			continue
		}
		if mt := accumTime(b, c, tt.v); mt != tt.wantT {
			t.Errorf("%s: time %v; want %v", tt.name, mt, tt.wantT)
		}
	}
	// 768 without accumulation does not fit in 4 × 128.
	if _, _, err := Accumulation(768, []float64{400, 400, 200, 200}, []int{32, 32, 32, 32}, []int{128, 128, 128, 128}, 1, 1); !errors.Is(err, ErrInfeasible) {
		t.Errorf("Accumulation(768, ..., C ≤ 1): error %v; want ErrInfeasible", err)
	}
	// One worker of batch 6 with C ≤ 2 makes 6 or 12: 7 lies between the
	// bounds 6 and 12 but is not in the set.
	if b, c, err := Accumulation(7, []float64{1}, []int{6}, []int{6}, 1, 2); !errors.Is(err, ErrInfeasible) {
		t.Errorf("Accumulation(7, one worker of batch 6, C ≤ 2) = %v, %v, %v; want ErrInfeasible", b, c, err)
	}
}

func accumTime(b, c []int, v []float64) float64 {
	e := make([]int, len(b))
	for i := range b {
		e[i] = b[i] * c[i]
	}
	return MaxTime(e, v)
}

// TestAccumulationBrute compares Accumulation with an exhaustive search over
// every (B_i, C_i) on small cases, gaps included.
func TestAccumulationBrute(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for k := 0; k < 2000; k++ {
		n := 1 + r.IntN(3)
		global := r.IntN(80)
		v := make([]float64, n)
		lo := make([]int, n)
		hi := make([]int, n)
		for i := range v {
			v[i] = float64(1 + r.IntN(4))
			if r.IntN(2) == 0 {
				v[i] = 0.3 + 5*r.Float64()
			}
			lo[i] = 1 + r.IntN(8)
			hi[i] = lo[i] + r.IntN(4)
		}
		cmin := 1 + r.IntN(3)
		cmax := cmin + r.IntN(4)
		// Brute force over E_i ∈ F_i.
		best, found := math.Inf(1), false
		e := make([]int, n)
		var rec func(i, left int)
		rec = func(i, left int) {
			if i == n {
				if left == 0 {
					if t := MaxTime(e, v); !found || t < best {
						best, found = t, true
					}
				}
				return
			}
			seen := map[int]bool{}
			for c := cmin; c <= cmax; c++ {
				for b := lo[i]; b <= hi[i]; b++ {
					if x := b * c; x <= left && !seen[x] {
						seen[x] = true
						e[i] = x
						rec(i+1, left-x)
					}
				}
			}
		}
		rec(0, global)
		b, c, err := Accumulation(global, v, lo, hi, cmin, cmax)
		if !found {
			if err == nil {
				t.Fatalf("Accumulation(%d, %v, %v, %v, %d, %d) = %v, %v; want an error", global, v, lo, hi, cmin, cmax, b, c)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Accumulation(%d, %v, %v, %v, %d, %d): %v; want time %v", global, v, lo, hi, cmin, cmax, err, best)
		}
		sum := 0
		for i := range b {
			sum += b[i] * c[i]
			if b[i] < lo[i] || b[i] > hi[i] || c[i] < cmin || c[i] > cmax {
				t.Fatalf("Accumulation(%d, %v, %v, %v, %d, %d) = %v, %v: worker %d out of bounds", global, v, lo, hi, cmin, cmax, b, c, i)
			}
		}
		if sum != global {
			t.Fatalf("Accumulation(%d, %v, %v, %v, %d, %d) = %v, %v: Σ C·B = %d", global, v, lo, hi, cmin, cmax, b, c, sum)
		}
		if mt := accumTime(b, c, v); mt != best {
			t.Fatalf("Accumulation(%d, %v, %v, %v, %d, %d) = %v, %v: time %v; want %v", global, v, lo, hi, cmin, cmax, b, c, mt, best)
		}
	}
}

func BenchmarkMinMaxSplit(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 10000
	v := make([]float64, n)
	for i := range v {
		v[i] = 200 + 400*r.Float64()
		if i%10 == 0 {
			v[i] /= 4 // a tenth of the workers straggle
		}
	}
	min := make([]int, n)
	max := make([]int, n)
	for i := range min {
		min[i], max[i] = 1, 1024
	}
	global := 256 * n
	b.ReportAllocs()
	for b.Loop() {
		if _, err := MinMaxSplit(global, v, min, max); err != nil {
			b.Fatal(err)
		}
	}
}
