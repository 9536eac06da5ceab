package data

import (
	"math"
	"slices"
	"testing"
)

func TestPermutation(t *testing.T) {
	for _, n := range []int{0, 1, 2, 10, 1000} {
		p := Permutation(n, 7, 3)
		sorted := slices.Clone(p)
		slices.Sort(sorted)
		for i, v := range sorted {
			if v != i {
				t.Fatalf("Permutation(%d, 7, 3) = %v is not a permutation", n, p)
			}
		}
		if again := Permutation(n, 7, 3); !slices.Equal(p, again) {
			t.Errorf("Permutation(%d, 7, 3) = %v then %v; want the same order", n, p, again)
		}
	}
	a, b, c := Permutation(1000, 7, 0), Permutation(1000, 7, 1), Permutation(1000, 8, 0)
	if slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("Permutation(1000, 7|8, 0|1) gave equal orders for different epochs or seeds")
	}
	// A shuffle leaves few elements in place (expected 1).
	fixed := 0
	for i, v := range a {
		if i == v {
			fixed++
		}
	}
	if fixed > 10 {
		t.Errorf("Permutation(1000, 7, 0) leaves %d elements in place; want about 1", fixed)
	}
}

func TestSyntheticCTR(t *testing.T) {
	cfg := CTRConfig{Samples: 20000, TestSamples: 5000, Features: 1 << 12, Fields: 4, Seed: 42}
	train, test, truth := SyntheticCTR(cfg)
	if train.Len() != 20000 || test.Len() != 5000 {
		t.Fatalf("SyntheticCTR lengths = %d, %d; want 20000, 5000", train.Len(), test.Len())
	}
	if got, want := train.Info(), (Info{Sparse: true, Features: 1 << 12, Classes: 2}); got != want {
		t.Errorf("Info() = %+v; want %+v", got, want)
	}
	if len(truth.W) != 1<<12 {
		t.Fatalf("len(truth.W) = %d; want %d", len(truth.W), 1<<12)
	}

	all := func(d Dataset) *Batch {
		idx := make([]int, d.Len())
		for i := range idx {
			idx[i] = i
		}
		var b Batch
		d.Fill(&b, idx)
		return &b
	}
	b := all(train)
	if len(b.Offsets) != b.N+1 || b.Offsets[b.N] != len(b.Keys) || len(b.Keys) != 4*b.N || len(b.X) != 0 {
		t.Fatalf("Fill layout: N=%d len(Keys)=%d len(Offsets)=%d; want 4 keys per sample", b.N, len(b.Keys), len(b.Offsets))
	}
	// One id per field, each in its field's range; hot ids much more frequent than the median.
	freq := make([]int, 1<<12)
	var clicks int
	var logLik, baseLL float64 // truth's log-likelihood vs a constant predictor
	for i := range b.N {
		ids := b.Keys[b.Offsets[i]:b.Offsets[i+1]]
		z := float64(truth.B)
		for f, id := range ids {
			if lo, hi := uint64(f)<<10, uint64(f+1)<<10; id < lo || id >= hi {
				t.Fatalf("sample %d field %d id %d outside [%d,%d)", i, f, id, lo, hi)
			}
			freq[id]++
			z += float64(truth.W[id])
		}
		p := 1 / (1 + math.Exp(-z))
		if b.Y[i] == 1 {
			clicks++
			logLik += math.Log(p)
		} else {
			logLik += math.Log(1 - p)
		}
	}
	rate := float64(clicks) / float64(b.N)
	for _, y := range b.Y {
		if y == 1 {
			baseLL += math.Log(rate)
		} else {
			baseLL += math.Log(1 - rate)
		}
	}
	if rate < 0.2 || rate > 0.6 {
		t.Errorf("click rate = %.3f; want within [0.2, 0.6]", rate)
	}
	if logLik <= baseLL+0.05*float64(b.N) {
		t.Errorf("labels do not follow the truth: log-likelihood %.0f vs constant %.0f", logLik, baseLL)
	}
	field0 := slices.Clone(freq[:1024])
	slices.Sort(field0)
	if top, median := field0[1023], field0[512]; top < 50*max(median, 1) {
		t.Errorf("field 0: most frequent id seen %d times, median %d; want a Zipf-like skew", top, median)
	}

	// Same seed → same data; the test stream differs from the training stream.
	train2, _, truth2 := SyntheticCTR(cfg)
	b2 := all(train2)
	if !slices.Equal(b.Keys, b2.Keys) || !slices.Equal(b.Y, b2.Y) || !slices.Equal(truth.W, truth2.W) {
		t.Errorf("SyntheticCTR(%+v) is not deterministic", cfg)
	}
	bt := all(test)
	if slices.Equal(bt.Keys, b.Keys[:len(bt.Keys)]) {
		t.Errorf("test samples repeat the training samples")
	}
	cfg.Seed = 43
	_, _, truth3 := SyntheticCTR(cfg)
	if slices.Equal(truth.W, truth3.W) {
		t.Errorf("SyntheticCTR seeds 42 and 43 gave the same truth")
	}
}

func TestCTRConfig(t *testing.T) {
	if got, want := (CTRConfig{}).WithDefaults(), (CTRConfig{Samples: 100000, TestSamples: 10000, Features: 1 << 20, Fields: 8}); got != want {
		t.Errorf("CTRConfig{}.WithDefaults() = %+v; want %+v", got, want)
	}
	bad := []CTRConfig{
		{Samples: -1},
		{Features: 3, Fields: 4},
		{Features: MaxCTRFeatures + 1},
		{Fields: -2},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("CTRConfig%+v.Validate() = nil; want an error", c)
		}
	}
	// The smallest valid space: one id per field.
	train, _, _ := SyntheticCTR(CTRConfig{Samples: 10, TestSamples: 1, Features: 3, Fields: 3, Seed: 1})
	var b Batch
	train.Fill(&b, []int{0, 9})
	if want := []uint64{0, 1, 2, 0, 1, 2}; !slices.Equal(b.Keys, want) {
		t.Errorf("Keys with one id per field = %v; want %v", b.Keys, want)
	}
}

func TestSliceAndFillAllocs(t *testing.T) {
	train, _, _ := SyntheticCTR(CTRConfig{Samples: 100, TestSamples: 1, Features: 64, Fields: 2, Seed: 1})
	sub, err := Slice(train, 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	var a, b Batch
	train.Fill(&a, []int{15})
	sub.Fill(&b, []int{5})
	if sub.Len() != 10 || !slices.Equal(a.Keys, b.Keys) || a.Y[0] != b.Y[0] {
		t.Errorf("Slice(10,20) sample 5 = %v/%d; want sample 15 = %v/%d", b.Keys, b.Y[0], a.Keys, a.Y[0])
	}
	if _, err := Slice(train, 5, 101); err == nil {
		t.Errorf("Slice(train, 5, 101) error = nil; want out of range")
	}
	idx := []int{1, 2, 3, 4}
	if n := testing.AllocsPerRun(10, func() { train.Fill(&a, idx) }); n != 0 {
		t.Errorf("ctr Fill allocates %v times per call; want 0", n)
	}

	dir := t.TempDir()
	writeMNIST(t, dir, 8, 2, 2, true)
	mtrain, _, err := LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	msub, err := Slice(mtrain, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	mtrain.Fill(&a, []int{6})
	msub.Fill(&b, []int{2})
	if !slices.Equal(a.X, b.X) || a.Y[0] != b.Y[0] {
		t.Errorf("mnist Slice(4,8) sample 2 = %v/%d; want sample 6 = %v/%d", b.X, b.Y[0], a.X, a.Y[0])
	}
	mtrain.Fill(&a, idx)
	if n := testing.AllocsPerRun(10, func() { mtrain.Fill(&a, idx) }); n != 0 {
		t.Errorf("mnist Fill allocates %v times per call; want 0", n)
	}
}
