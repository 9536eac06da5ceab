package shape

import (
	"slices"
	"testing"
)

func TestOf(t *testing.T) {
	mnist := Input{Dim: 784, Classes: 10}
	ctr := Input{Sparse: true, Features: 1000, Classes: 2}
	dense := func(name string, rows, cols int) Tensor { return Tensor{Name: name, Rows: rows, Cols: cols} }
	tests := []struct {
		kind    string
		hidden  []int
		in      Input
		tensors []Tensor // nil: want an error
	}{
		{"softmax", nil, mnist, []Tensor{dense("w", 784, 10), dense("b", 1, 10)}},
		{"mlp", []int{128}, mnist,
			[]Tensor{dense("fc0.w", 784, 128), dense("fc0.b", 1, 128), dense("fc1.w", 128, 10), dense("fc1.b", 1, 10)}},
		{"mlp", []int{8, 5}, Input{Dim: 6, Classes: 3},
			[]Tensor{dense("fc0.w", 6, 8), dense("fc0.b", 1, 8), dense("fc1.w", 8, 5), dense("fc1.b", 1, 5),
				dense("fc2.w", 5, 3), dense("fc2.b", 1, 3)}},
		{"sparse-lr", nil, ctr, []Tensor{{Name: "w", Rows: 1000, Cols: 1, Sparse: true}, dense("b", 1, 1)}},
		{"mlp", nil, mnist, nil},
		{"mlp", []int{0}, mnist, nil},
		{"softmax", []int{3}, mnist, nil},
		{"softmax", nil, ctr, nil},
		{"softmax", nil, Input{Dim: 4, Classes: 1}, nil},
		{"sparse-lr", nil, mnist, nil},
		{"sparse-lr", nil, Input{Sparse: true, Features: 10, Classes: 3}, nil},
		{"cnn", nil, mnist, nil},
	}
	for _, tt := range tests {
		got, err := Of(tt.kind, tt.hidden, tt.in)
		if tt.tensors == nil {
			if err == nil {
				t.Errorf("Of(%q, %v, %+v) = %v; want an error", tt.kind, tt.hidden, tt.in, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("Of(%q, %v, %+v) error = %v", tt.kind, tt.hidden, tt.in, err)
			continue
		}
		if !slices.Equal(got, tt.tensors) {
			t.Errorf("Of(%q, %v, %+v) = %v; want %v", tt.kind, tt.hidden, tt.in, got, tt.tensors)
		}
	}
}
