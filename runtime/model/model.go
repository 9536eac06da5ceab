// Package model holds the models kelpie's workers train: softmax regression and a ReLU MLP for
// dense data (MNIST), and wide sparse logistic regression for CTR data. Parameters live in flat
// float32 tensors so the parameter server can split them into blocks; a sparse tensor is an
// embedding table whose rows are pulled and pushed by key.
//
// Models are plain math: no I/O, no goroutines. A Model keeps scratch buffers sized for the
// largest batch it has seen, so one instance must be used by one goroutine at a time; steady
// state Grad and Evaluate calls do not allocate.
package model

import (
	"math/rand/v2"
	"slices"

	"github.com/kelpie/kelpie/core/shape"
	"github.com/kelpie/kelpie/runtime/data"
)

// Tensor describes one parameter tensor (core/shape computes them, so the scheduler can lay
// out blocks without this package).
type Tensor = shape.Tensor

// Sparse is a set of rows of a sparse tensor. Keys are sorted and unique; row i is
// Vals[i*Cols:(i+1)*Cols].
type Sparse struct {
	Keys []uint64
	Vals []float32
}

// Find returns the row index of key, and whether it is present.
func (s *Sparse) Find(key uint64) (int, bool) {
	return slices.BinarySearch(s.Keys, key)
}

// Params holds values (or gradients) for every tensor of a model: Dense[i] for tensor i (nil for
// the sparse tensor) and the sparse tensor's rows, if the model has one. A model has at most one
// sparse tensor.
type Params struct {
	Dense  [][]float32
	Sparse Sparse
}

// Clone returns a deep copy of p.
func (p *Params) Clone() *Params {
	q := &Params{Dense: make([][]float32, len(p.Dense))}
	for i, d := range p.Dense {
		if d != nil {
			q.Dense[i] = slices.Clone(d)
		}
	}
	q.Sparse.Keys = slices.Clone(p.Sparse.Keys)
	q.Sparse.Vals = slices.Clone(p.Sparse.Vals)
	return q
}

// Config selects a model. Kind is "softmax", "mlp" or "sparse-lr"; Hidden lists the MLP's hidden
// layer widths (at least one).
type Config struct {
	Kind   string
	Hidden []int
}

// Model kinds.
const (
	KindSoftmax  = shape.KindSoftmax
	KindMLP      = shape.KindMLP
	KindSparseLR = shape.KindSparseLR
)

// Model computes losses and gradients of one model over flat parameters.
type Model interface {
	Tensors() []Tensor
	// InitDense returns the initial values of the dense tensors (nil for the sparse one, whose
	// rows start at zero). The same seed gives the same values.
	InitDense(seed int64) [][]float32
	// NewParams returns zeroed Params with every dense tensor allocated.
	NewParams() *Params
	// SparseKeys returns the sorted unique keys of the sparse tensor that batch b touches,
	// reusing dst's storage; nil for models without a sparse tensor.
	SparseKeys(b *data.Batch, dst []uint64) []uint64
	// Grad returns the mean loss over the batch at p and writes scale * d(mean loss)/d(params)
	// into g: g.Dense is overwritten and g.Sparse is set to the batch's SparseKeys with their
	// row gradients. p.Sparse must hold at least those keys.
	Grad(p *Params, b *data.Batch, g *Params, scale float32) (loss float64)
	// Evaluate returns the mean loss and the accuracy over the batch (for CTR, of predicting a
	// click when the probability is above 0.5).
	Evaluate(p *Params, b *data.Batch) (loss, acc float64)
}

// Shared is a Model whose parameters and gradients live in memory it owns —
// a torch model's shared memory, which its Python child computes on
// (runtime/torch). A worker trains on those instead of allocating its own:
// it pulls straight into params and pushes straight from grad.
type Shared interface {
	Model
	Shared() (params, grad *Params)
}

// New builds the model c describes for data of the given shape.
func New(c Config, info data.Info) (Model, error) {
	ts, err := shape.Of(c.Kind, c.Hidden, info)
	if err != nil {
		return nil, err
	}
	if c.Kind == KindSparseLR {
		return &sparseLR{tensors: ts}, nil
	}
	return newDense(c.Kind, shape.Layers(info, c.Hidden), ts), nil
}

// newRand returns the generator for tensor i's initial values.
func newRand(seed int64, i int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), uint64(i)+0x696e6974)) // "init"
}

// newParams allocates zeroed dense tensors for ts.
func newParams(ts []Tensor) *Params {
	p := &Params{Dense: make([][]float32, len(ts))}
	for i, t := range ts {
		if !t.Sparse {
			p.Dense[i] = make([]float32, t.Len())
		}
	}
	return p
}

// shapeGrad makes g's dense tensors match ts, allocating only when they do not.
func shapeGrad(g *Params, ts []Tensor) {
	if len(g.Dense) != len(ts) {
		g.Dense = make([][]float32, len(ts))
	}
	for i, t := range ts {
		switch {
		case t.Sparse:
			g.Dense[i] = nil
		case len(g.Dense[i]) != t.Len():
			g.Dense[i] = make([]float32, t.Len())
		}
	}
}

// grow returns s with length n, reusing its storage when it is large enough.
func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}
