package worker

import (
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/runtime/model"
)

// addParams adds src to dst: dense tensors element by element, sparse rows
// (dim floats each, keys sorted) merged by key.
func addParams(dst, src *model.Params, dim int) {
	for i, d := range dst.Dense {
		optim.Accumulate(d, src.Dense[i])
	}
	if len(src.Sparse.Keys) == 0 {
		return
	}
	a, b := dst.Sparse, src.Sparse
	keys := make([]uint64, 0, len(a.Keys)+len(b.Keys))
	vals := make([]float32, 0, (len(a.Keys)+len(b.Keys))*dim)
	i, j := 0, 0
	for i < len(a.Keys) || j < len(b.Keys) {
		switch {
		case j == len(b.Keys) || (i < len(a.Keys) && a.Keys[i] < b.Keys[j]):
			keys = append(keys, a.Keys[i])
			vals = append(vals, a.Vals[i*dim:(i+1)*dim]...)
			i++
		case i == len(a.Keys) || b.Keys[j] < a.Keys[i]:
			keys = append(keys, b.Keys[j])
			vals = append(vals, b.Vals[j*dim:(j+1)*dim]...)
			j++
		default:
			keys = append(keys, a.Keys[i])
			n := len(vals)
			vals = append(vals, a.Vals[i*dim:(i+1)*dim]...)
			optim.Accumulate(vals[n:], b.Vals[j*dim:(j+1)*dim])
			i++
			j++
		}
	}
	dst.Sparse.Keys, dst.Sparse.Vals = keys, vals
}
