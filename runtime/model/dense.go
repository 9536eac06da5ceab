package model

import (
	"fmt"
	"math"

	"github.com/kelpie/kelpie/runtime/data"
)

// dense is a fully connected network with ReLU hidden layers and a softmax cross-entropy output;
// with no hidden layer it is softmax regression.
//
// Layer l maps sizes[l] inputs to sizes[l+1] outputs with a weight tensor of sizes[l] rows by
// sizes[l+1] columns (input-major) and a bias row. Input-major weights turn both the forward
// pass and the weight gradient into axpys over contiguous rows, one per non-zero input, which
// skips the ~80% of MNIST pixels that are 0 and the inactive ReLU units of hidden layers.
type dense struct {
	kind    string
	sizes   []int // in, hidden..., classes
	tensors []Tensor

	// Scratch, grown to the largest batch seen.
	act   [][]float32 // act[l] for l = 1..L: outputs of layer l-1 (logits at L); act[0] unused
	delta [][]float32 // delta[l]: gradient of the scaled loss w.r.t. act[l]'s pre-activations
	in    []csr       // in[l]: non-zero inputs of layer l, per sample
	cols  csc         // in[l] transposed, for the weight gradient
}

// csr lists the non-zero entries of a row-major matrix, row by row.
type csr struct {
	ptr []int32 // row s is idx[ptr[s]:ptr[s+1]]
	idx []int32 // column of each entry
	val []float32
}

// csc lists the entries of a csr by column.
type csc struct {
	ptr []int32 // column i is row[ptr[i]:ptr[i+1]]
	row []int32
	val []float32
}

// newDense builds the network with layer widths sizes and the tensors core/shape gave them.
func newDense(kind string, sizes []int, tensors []Tensor) *dense {
	L := len(sizes) - 1
	return &dense{kind: kind, sizes: sizes, tensors: tensors,
		act: make([][]float32, L+1), delta: make([][]float32, L+1), in: make([]csr, L)}
}

func (m *dense) Tensors() []Tensor { return m.tensors }

func (m *dense) NewParams() *Params { return newParams(m.tensors) }

func (m *dense) SparseKeys(*data.Batch, []uint64) []uint64 { return nil }

// InitDense uses He-normal weights (std √(2/in)) for ReLU layers and Glorot-uniform for the MLP's
// output layer. Softmax regression starts at zero: its loss is convex and zero is the usual
// start. Biases start at zero.
func (m *dense) InitDense(seed int64) [][]float32 {
	out := make([][]float32, len(m.tensors))
	L := len(m.sizes) - 1
	for l := range L {
		nin, nout := m.sizes[l], m.sizes[l+1]
		w := make([]float32, nin*nout)
		r := newRand(seed, 2*l)
		switch {
		case m.kind == KindSoftmax:
		case l < L-1:
			std := math.Sqrt(2 / float64(nin))
			for i := range w {
				w[i] = float32(r.NormFloat64() * std)
			}
		default:
			lim := math.Sqrt(6 / float64(nin+nout))
			for i := range w {
				w[i] = float32((2*r.Float64() - 1) * lim)
			}
		}
		out[2*l], out[2*l+1] = w, make([]float32, nout)
	}
	return out
}

// reserve grows the scratch for batches of n samples.
func (m *dense) reserve(n int) {
	for l := 1; l < len(m.sizes); l++ {
		m.act[l] = grow(m.act[l], n*m.sizes[l])
		m.delta[l] = grow(m.delta[l], n*m.sizes[l])
	}
}

func (m *dense) check(p *Params, b *data.Batch) {
	if b.Dim != m.sizes[0] || len(b.X) < b.N*b.Dim || len(b.Y) < b.N {
		panic(fmt.Sprintf("model: batch of N=%d Dim=%d (len X %d, len Y %d) for a model of %d inputs",
			b.N, b.Dim, len(b.X), len(b.Y), m.sizes[0]))
	}
	if len(p.Dense) != len(m.tensors) {
		panic(fmt.Sprintf("model: params have %d tensors, model %d", len(p.Dense), len(m.tensors)))
	}
	for i, t := range m.tensors {
		if len(p.Dense[i]) != t.Len() {
			panic(fmt.Sprintf("model: tensor %s has %d values, want %d", t.Name, len(p.Dense[i]), t.Len()))
		}
	}
}

// collect records the non-zero entries of the n×k row-major matrix x in c.
func (c *csr) collect(x []float32, n, k int) {
	c.ptr = grow(c.ptr, n+1)
	c.idx, c.val = grow(c.idx, n*k), grow(c.val, n*k)
	idx, val := c.idx, c.val
	e := 0
	for s := range n {
		c.ptr[s] = int32(e)
		// Write every entry and advance only past non-zeros: no hard-to-predict branch.
		for i, v := range x[s*k : (s+1)*k] {
			idx[e], val[e] = int32(i), v
			if v != 0 {
				e++
			}
		}
	}
	c.ptr[n] = int32(e)
	c.idx, c.val = idx[:e], val[:e]
}

// transpose fills t with c's entries grouped by column (k columns).
func (t *csc) transpose(c *csr, n, k int) {
	t.ptr = grow(t.ptr, k+1)
	clear(t.ptr)
	for _, i := range c.idx {
		t.ptr[i+1]++
	}
	for i := range k {
		t.ptr[i+1] += t.ptr[i]
	}
	nnz := len(c.idx)
	t.row, t.val = grow(t.row, nnz), grow(t.val, nnz)
	// Fill using ptr[i] as the insertion point of column i, then shift back.
	for s := range n {
		for e := c.ptr[s]; e < c.ptr[s+1]; e++ {
			i := c.idx[e]
			at := t.ptr[i]
			t.row[at], t.val[at] = int32(s), c.val[e]
			t.ptr[i]++
		}
	}
	copy(t.ptr[1:], t.ptr[:k])
	t.ptr[0] = 0
}

// forward computes the logits of the n samples x into act[L].
func (m *dense) forward(p *Params, x []float32, n int) {
	L := len(m.sizes) - 1
	for l := range L {
		nin, nout := m.sizes[l], m.sizes[l+1]
		w, bias := p.Dense[2*l], p.Dense[2*l+1]
		c := &m.in[l]
		c.collect(x, n, nin)
		out := m.act[l+1][:n*nout]
		for s := range n {
			y := out[s*nout : (s+1)*nout]
			copy(y, bias)
			idx, val := c.idx[c.ptr[s]:c.ptr[s+1]], c.val[c.ptr[s]:c.ptr[s+1]]
			k := 0
			for ; k+4 <= len(idx); k += 4 {
				i0, i1, i2, i3 := int(idx[k])*nout, int(idx[k+1])*nout, int(idx[k+2])*nout, int(idx[k+3])*nout
				axpy4(y, w[i0:i0+nout], w[i1:i1+nout], w[i2:i2+nout], w[i3:i3+nout], val[k], val[k+1], val[k+2], val[k+3])
			}
			for ; k < len(idx); k++ {
				i := int(idx[k]) * nout
				axpy(y, w[i:i+nout], val[k])
			}
			if l < L-1 {
				for j, v := range y {
					if v < 0 {
						y[j] = 0
					}
				}
			}
		}
		x = out
	}
}

// softmaxLoss turns logits z (one sample) into probabilities in place and returns
// -log p[y], computed as logsumexp(z) - z[y] in float64.
func softmaxLoss(z []float32, y int32) float64 {
	mx := z[0]
	for _, v := range z[1:] {
		mx = max(mx, v)
	}
	zy := float64(z[y] - mx)
	var sum float64
	for j, v := range z {
		e := math.Exp(float64(v - mx))
		z[j] = float32(e)
		sum += e
	}
	inv := float32(1 / sum)
	for j := range z {
		z[j] *= inv
	}
	return math.Log(sum) - zy
}

func (m *dense) Grad(p *Params, b *data.Batch, g *Params, scale float32) float64 {
	m.check(p, b)
	shapeGrad(g, m.tensors)
	g.Sparse.Keys, g.Sparse.Vals = g.Sparse.Keys[:0], g.Sparse.Vals[:0]
	n := b.N
	if n == 0 {
		for _, d := range g.Dense {
			clear(d)
		}
		return 0
	}
	m.reserve(n)
	m.forward(p, b.X, n)

	L := len(m.sizes) - 1
	k := m.sizes[L]
	var loss float64
	// Output: d(mean loss)/d(logits) = (softmax - onehot)/n, times scale.
	top := m.delta[L][:n*k]
	copy(top, m.act[L][:n*k])
	unit := scale / float32(n)
	for s := range n {
		d := top[s*k : (s+1)*k]
		loss += softmaxLoss(d, b.Y[s])
		for j := range d {
			d[j] *= unit
		}
		d[b.Y[s]] -= unit
	}

	for l := L - 1; l >= 0; l-- {
		nin, nout := m.sizes[l], m.sizes[l+1]
		dl := m.delta[l+1][:n*nout]
		w, gw, gb := p.Dense[2*l], g.Dense[2*l], g.Dense[2*l+1]

		clear(gb)
		for s := range n {
			add(gb, dl[s*nout:(s+1)*nout])
		}

		// gw[i,:] = Σ_s in[s,i] * dl[s,:], summed over the samples where input i is non-zero.
		// The first term sets the row, so gw needs no clearing.
		t := &m.cols
		t.transpose(&m.in[l], n, nin)
		for i := range nin {
			row, val := t.row[t.ptr[i]:t.ptr[i+1]], t.val[t.ptr[i]:t.ptr[i+1]]
			gwi := gw[i*nout : (i+1)*nout]
			var e int
			switch {
			case len(row) == 0:
				clear(gwi)
				continue
			case len(row) >= 4:
				r0, r1, r2, r3 := int(row[0])*nout, int(row[1])*nout, int(row[2])*nout, int(row[3])*nout
				mul4(gwi, dl[r0:r0+nout], dl[r1:r1+nout], dl[r2:r2+nout], dl[r3:r3+nout], val[0], val[1], val[2], val[3])
				e = 4
			default:
				r := int(row[0]) * nout
				mul(gwi, dl[r:r+nout], val[0])
				e = 1
			}
			for ; e+4 <= len(row); e += 4 {
				r0, r1, r2, r3 := int(row[e])*nout, int(row[e+1])*nout, int(row[e+2])*nout, int(row[e+3])*nout
				axpy4(gwi, dl[r0:r0+nout], dl[r1:r1+nout], dl[r2:r2+nout], dl[r3:r3+nout], val[e], val[e+1], val[e+2], val[e+3])
			}
			for ; e < len(row); e++ {
				r := int(row[e]) * nout
				axpy(gwi, dl[r:r+nout], val[e])
			}
		}

		if l == 0 {
			break
		}
		// Back through the ReLU: only active units (the non-zero inputs of layer l) get a gradient.
		prev := m.delta[l][:n*nin]
		clear(prev)
		c := &m.in[l]
		for s := range n {
			ds := dl[s*nout : (s+1)*nout]
			ps := prev[s*nin : (s+1)*nin]
			idx := c.idx[c.ptr[s]:c.ptr[s+1]]
			e := 0
			for ; e+4 <= len(idx); e += 4 {
				i0, i1, i2, i3 := int(idx[e]), int(idx[e+1]), int(idx[e+2]), int(idx[e+3])
				ps[i0], ps[i1], ps[i2], ps[i3] = dot4(ds, w[i0*nout:(i0+1)*nout], w[i1*nout:(i1+1)*nout], w[i2*nout:(i2+1)*nout], w[i3*nout:(i3+1)*nout])
			}
			for ; e < len(idx); e++ {
				i := int(idx[e])
				ps[i] = dot(w[i*nout:(i+1)*nout], ds)
			}
		}
	}
	return loss / float64(n)
}

// evalChunk bounds Evaluate's scratch: a large test batch is evaluated in pieces.
const evalChunk = 256

func (m *dense) Evaluate(p *Params, b *data.Batch) (loss, acc float64) {
	m.check(p, b)
	if b.N == 0 {
		return 0, 0
	}
	k := m.sizes[len(m.sizes)-1]
	d := m.sizes[0]
	var correct int
	for lo := 0; lo < b.N; lo += evalChunk {
		n := min(evalChunk, b.N-lo)
		m.reserve(n)
		m.forward(p, b.X[lo*d:(lo+n)*d], n)
		z := m.act[len(m.sizes)-1]
		for s := range n {
			zs := z[s*k : (s+1)*k]
			best := 0
			for j, v := range zs {
				if v > zs[best] {
					best = j
				}
			}
			y := b.Y[lo+s]
			if int32(best) == y {
				correct++
			}
			loss += softmaxLoss(zs, y)
		}
	}
	return loss / float64(b.N), float64(correct) / float64(b.N)
}
