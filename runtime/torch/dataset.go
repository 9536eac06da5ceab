package torch

import "github.com/kelpie/kelpie/runtime/data"

// Set is one of the script's data sets as the worker sees it: n samples,
// of which a batch carries only the indices (the child reads the samples).
type Set struct {
	Name string // train | test
	N    int
}

var _ data.Dataset = Set{}

// Len is the number of samples.
func (s Set) Len() int { return s.N }

// Info is empty: the shape of the samples is the script's business.
func (s Set) Info() data.Info { return data.Info{} }

// Fill records which samples the batch holds.
func (s Set) Fill(b *data.Batch, idx []int) {
	b.N, b.Dim, b.Set = len(idx), 0, s.Name
	b.Index = append(b.Index[:0], idx...)
	b.X, b.Keys, b.Offsets = nil, nil, nil
	if cap(b.Y) < len(idx) {
		b.Y = make([]int32, len(idx)) // unused, but sliced with the batch
	}
	b.Y = b.Y[:len(idx)]
}
