// Package data provides the training data of kelpie's parameter-server runtime: a real MNIST
// loader (IDX files, gzip'd), a synthetic click-through (CTR) generator with a known ground-truth
// model for wide sparse logistic regression, and the Batch type workers fill and hand to a model.
//
// Datasets are immutable once built: Fill only reads them, so one Dataset may be shared by the
// workers of one process. Everything random is derived from an explicit seed.
package data

import (
	"fmt"
	"math/rand/v2"

	"github.com/kelpie/kelpie/core/shape"
)

// Info describes the shape of a dataset's samples (core/shape defines it, so the shapes of a
// model's tensors can be computed without this package's loaders).
type Info = shape.Input

// Batch holds N samples laid out for a model. Its slices are reused by Fill.
type Batch struct {
	N   int
	Dim int
	X   []float32 // dense: N*Dim, row-major (nil for sparse)
	// Keys holds the active feature ids of all samples, concatenated (sparse only);
	// sample i's ids are Keys[Offsets[i]:Offsets[i+1]] and Offsets has N+1 entries.
	Keys    []uint64
	Offsets []int
	Y       []int32 // class label per sample (0/1 for CTR)
	// Index and Set name the samples of a dataset whose samples live
	// elsewhere (a torch script's train_set or test_set, runtime/torch):
	// their indices in that set, and which set.
	Index []int
	Set   string
}

// Dataset is a fixed, indexable set of samples.
type Dataset interface {
	Len() int
	Info() Info
	// Fill gathers the samples idx into b, reusing b's slices so that steady-state calls do not
	// allocate. Fill does not modify the dataset and is safe to call from several goroutines
	// with distinct batches.
	Fill(b *Batch, idx []int)
}

// slicer is implemented by the datasets of this package, which can expose a contiguous range of
// samples without copying.
type slicer interface {
	slice(lo, hi int) Dataset
}

// Slice returns the samples [lo, hi) of d as a dataset sharing d's storage. It is how a worker
// trains on part of MNIST, or a test on a small subset. d must come from this package.
func Slice(d Dataset, lo, hi int) (Dataset, error) {
	if lo < 0 || hi < lo || hi > d.Len() {
		return nil, fmt.Errorf("data: slice [%d,%d) out of range [0,%d)", lo, hi, d.Len())
	}
	s, ok := d.(slicer)
	if !ok {
		return nil, fmt.Errorf("data: dataset %T cannot be sliced", d)
	}
	return s.slice(lo, hi), nil
}

// Permutation returns a deterministic shuffle of [0, n) for the given seed and epoch: the same
// (seed, epoch) always gives the same order, and different epochs give independent orders.
func Permutation(n int, seed int64, epoch int) []int {
	r := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15^uint64(epoch)))
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	// Fisher–Yates, written out so the order depends only on the PCG stream.
	for i := n - 1; i > 0; i-- {
		j := int(r.Uint64N(uint64(i + 1)))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// resize returns s with length n, reusing its storage when it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n)
}

// Slice sets dst to samples [from, to) of b (a micro-batch, for gradient
// accumulation). Dense features and labels share b's memory; the sparse
// offsets are rebased into dst's own slice.
func (b *Batch) Slice(dst *Batch, from, to int) {
	dst.N, dst.Dim = to-from, b.Dim
	dst.Y = b.Y[from:to]
	dst.X, dst.Keys = nil, nil
	dst.Offsets = dst.Offsets[:0]
	dst.Set, dst.Index = b.Set, nil
	if b.Index != nil {
		dst.Index = b.Index[from:to]
	}
	if b.X != nil {
		dst.X = b.X[from*b.Dim : to*b.Dim]
	}
	if b.Offsets != nil {
		base := b.Offsets[from]
		dst.Keys = b.Keys[base:b.Offsets[to]]
		for _, o := range b.Offsets[from : to+1] {
			dst.Offsets = append(dst.Offsets, o-base)
		}
	}
}
