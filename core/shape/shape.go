// Package shape says which parameter tensors a model has — names, rows, columns, dense or
// sparse — from the model's configuration and the shape of its input data, without building the
// model or loading any data.
//
// Every process of a job must agree on the tensors: workers and servers build the model
// (runtime/model, which takes its tensors from here), while the scheduler only lays out and
// assigns parameter blocks (core/job, core/blocks). Keeping the shapes in this pure package
// lets the scheduler lay out blocks from a spec alone, without importing the model's math or the
// data loaders' file I/O. It imports nothing but fmt.
package shape

import "fmt"

// Tensor describes one parameter tensor. A dense tensor is Rows*Cols floats, row-major. A sparse
// tensor is an embedding table of Rows keys by Cols values, of which a batch touches a few rows.
type Tensor struct {
	Name       string
	Rows, Cols int
	Sparse     bool
}

// Len is the number of floats in the whole tensor.
func (t Tensor) Len() int { return t.Rows * t.Cols }

// Input describes the shape of a data set's samples.
type Input struct {
	Dim      int    // dense feature count per sample (784 for MNIST); 0 for sparse data
	Sparse   bool   // samples are sets of active feature ids in [0, Features)
	Features uint64 // size of the sparse id space (0 for dense data)
	Classes  int    // number of label classes (2 for CTR)
}

// Model kinds.
const (
	KindSoftmax  = "softmax"
	KindMLP      = "mlp"
	KindSparseLR = "sparse-lr"
)

const maxInt = int(^uint(0) >> 1)

// Of returns the tensors of a model of the given kind ("softmax", "mlp" or "sparse-lr") with
// the given hidden layer widths (the MLP's, at least one) over input of the given shape, or an
// error naming what does not fit.
//
// Softmax regression has a weight tensor "w" (Dim rows by Classes columns, input-major) and a
// bias "b"; the MLP has "fcL.w" and "fcL.b" per layer L; sparse-lr has a sparse weight table "w"
// (Features rows of 1) and a one-float bias "b".
func Of(kind string, hidden []int, in Input) ([]Tensor, error) {
	switch kind {
	case KindSoftmax, KindMLP:
		if in.Sparse || in.Dim <= 0 {
			return nil, fmt.Errorf("model: %s needs dense data, got %+v", kind, in)
		}
		if in.Classes < 2 {
			return nil, fmt.Errorf("model: %s needs at least 2 classes, got %d", kind, in.Classes)
		}
		if kind == KindSoftmax && len(hidden) > 0 {
			return nil, fmt.Errorf("model: softmax has no hidden layers, got %v (use mlp)", hidden)
		}
		if kind == KindMLP && len(hidden) == 0 {
			return nil, fmt.Errorf("model: mlp needs at least one hidden layer")
		}
		for _, h := range hidden {
			if h <= 0 {
				return nil, fmt.Errorf("model: hidden layer width %d must be positive", h)
			}
		}
		sizes := Layers(in, hidden)
		var out []Tensor
		for l := range len(sizes) - 1 {
			w, b := "w", "b"
			if kind == KindMLP {
				w, b = fmt.Sprintf("fc%d.w", l), fmt.Sprintf("fc%d.b", l)
			}
			out = append(out,
				Tensor{Name: w, Rows: sizes[l], Cols: sizes[l+1]},
				Tensor{Name: b, Rows: 1, Cols: sizes[l+1]})
		}
		return out, nil
	case KindSparseLR:
		if !in.Sparse || in.Features == 0 {
			return nil, fmt.Errorf("model: sparse-lr needs sparse data, got %+v", in)
		}
		if in.Classes != 2 {
			return nil, fmt.Errorf("model: sparse-lr is binary, got %d classes", in.Classes)
		}
		if in.Features > uint64(maxInt) {
			return nil, fmt.Errorf("model: %d features do not fit a tensor", in.Features)
		}
		return []Tensor{
			{Name: "w", Rows: int(in.Features), Cols: 1, Sparse: true},
			{Name: "b", Rows: 1, Cols: 1},
		}, nil
	}
	return nil, fmt.Errorf("model: unknown kind %q (want softmax, mlp or sparse-lr)", kind)
}

// Layers is the widths of a dense network's layers: the input, the hidden layers, the classes.
func Layers(in Input, hidden []int) []int {
	return append(append([]int{in.Dim}, hidden...), in.Classes)
}
