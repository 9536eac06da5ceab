package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/kelpie/kelpie/runtime/data"
)

// sparseLR is wide logistic regression: P(click) = sigmoid(Σ w[id] + b) over a sample's active
// ids. Tensor 0 is the weight table (Features rows of 1), pulled by key; tensor 1 the bias.
type sparseLR struct {
	tensors []Tensor

	// Scratch, reused across calls.
	uniq []uint64 // the batch's sorted unique keys
	row  []int    // row[u]: index of uniq[u] in p.Sparse
	pos  []int32  // pos[e]: index in uniq of the batch's e-th key
	z    []float32
}

func (m *sparseLR) Tensors() []Tensor { return m.tensors }

func (m *sparseLR) NewParams() *Params { return newParams(m.tensors) }

// InitDense starts the bias at zero; weight rows start at zero on the servers.
func (m *sparseLR) InitDense(int64) [][]float32 { return [][]float32{nil, {0}} }

func (m *sparseLR) SparseKeys(b *data.Batch, dst []uint64) []uint64 {
	if b.N == 0 {
		return dst[:0]
	}
	dst = append(dst[:0], b.Keys[:b.Offsets[b.N]]...)
	slices.Sort(dst)
	return slices.Compact(dst)
}

func (m *sparseLR) check(p *Params, b *data.Batch) {
	if b.N > 0 && (len(b.Offsets) != b.N+1 || len(b.Y) < b.N || b.Offsets[b.N] > len(b.Keys)) {
		panic(fmt.Sprintf("model: sparse batch of N=%d has %d offsets, %d labels, %d keys",
			b.N, len(b.Offsets), len(b.Y), len(b.Keys)))
	}
	if len(p.Dense) != 2 || len(p.Dense[1]) != 1 || len(p.Sparse.Vals) != len(p.Sparse.Keys) {
		panic(fmt.Sprintf("model: sparse-lr params have %d dense tensors, %d keys and %d values",
			len(p.Dense), len(p.Sparse.Keys), len(p.Sparse.Vals)))
	}
}

// lookup maps the batch's keys to rows of p.Sparse: m.uniq, m.row and m.pos. Both key lists are
// sorted, so each search starts where the previous one ended.
func (m *sparseLR) lookup(p *Params, b *data.Batch) {
	m.uniq = m.SparseKeys(b, m.uniq)
	m.row = grow(m.row, len(m.uniq))
	have := p.Sparse.Keys
	base := 0
	for u, k := range m.uniq {
		i, ok := slices.BinarySearch(have[base:], k)
		if !ok {
			panic(fmt.Sprintf("model: sparse-lr params lack key %d the batch uses", k))
		}
		base += i
		m.row[u] = base
	}
	if b.N == 0 {
		return
	}
	keys := b.Keys[:b.Offsets[b.N]]
	m.pos = grow(m.pos, len(keys))
	for e, k := range keys {
		u, _ := slices.BinarySearch(m.uniq, k)
		m.pos[e] = int32(u)
	}
}

// logits fills m.z with each sample's logit; lookup must have run.
func (m *sparseLR) logits(p *Params, b *data.Batch) {
	m.z = grow(m.z, b.N)
	w, bias := p.Sparse.Vals, p.Dense[1][0]
	for s := range b.N {
		z := bias
		for _, u := range m.pos[b.Offsets[s]:b.Offsets[s+1]] {
			z += w[m.row[u]]
		}
		m.z[s] = z
	}
}

// logLoss is the binary cross-entropy of logit z for label y, stable for large |z|:
// log(1+e^z) - y*z.
func logLoss(z float64, y int32) float64 {
	return max(z, 0) - float64(y)*z + math.Log1p(math.Exp(-math.Abs(z)))
}

func sigmoid(z float64) float64 {
	if z >= 0 {
		return 1 / (1 + math.Exp(-z))
	}
	e := math.Exp(z)
	return e / (1 + e)
}

func (m *sparseLR) Grad(p *Params, b *data.Batch, g *Params, scale float32) float64 {
	m.check(p, b)
	shapeGrad(g, m.tensors)
	m.lookup(p, b)
	g.Sparse.Keys = append(g.Sparse.Keys[:0], m.uniq...)
	g.Sparse.Vals = grow(g.Sparse.Vals, len(m.uniq))
	clear(g.Sparse.Vals)
	g.Dense[1][0] = 0
	if b.N == 0 {
		return 0
	}
	m.logits(p, b)
	unit := float64(scale) / float64(b.N)
	var loss, gb float64
	for s := range b.N {
		z := float64(m.z[s])
		loss += logLoss(z, b.Y[s])
		d := float32((sigmoid(z) - float64(b.Y[s])) * unit)
		gb += float64(d)
		for _, u := range m.pos[b.Offsets[s]:b.Offsets[s+1]] {
			g.Sparse.Vals[u] += d
		}
	}
	g.Dense[1][0] = float32(gb)
	return loss / float64(b.N)
}

func (m *sparseLR) Evaluate(p *Params, b *data.Batch) (loss, acc float64) {
	m.check(p, b)
	if b.N == 0 {
		return 0, 0
	}
	m.lookup(p, b)
	m.logits(p, b)
	var correct int
	for s := range b.N {
		z := float64(m.z[s])
		loss += logLoss(z, b.Y[s])
		if (z > 0) == (b.Y[s] == 1) {
			correct++
		}
	}
	return loss / float64(b.N), float64(correct) / float64(b.N)
}
