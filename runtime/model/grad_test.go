package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kelpie/kelpie/runtime/data"
)

// refDenseLoss is a plain float64 implementation of the dense models' mean loss, written
// independently of the optimized code (output-major loops, no sparsity tricks).
func refDenseLoss(sizes []int, w [][]float64, x []float32, y []int32, n int) float64 {
	L := len(sizes) - 1
	var loss float64
	for s := range n {
		a := make([]float64, sizes[0])
		for i := range a {
			a[i] = float64(x[s*sizes[0]+i])
		}
		for l := range L {
			nin, nout := sizes[l], sizes[l+1]
			z := make([]float64, nout)
			for j := range nout {
				z[j] = w[2*l+1][j]
				for i := range nin {
					z[j] += a[i] * w[2*l][i*nout+j]
				}
				if l < L-1 {
					z[j] = math.Max(z[j], 0)
				}
			}
			a = z
		}
		var sum float64
		for _, v := range a {
			sum += math.Exp(v)
		}
		loss += math.Log(sum) - a[y[s]]
	}
	return loss / float64(n)
}

// refSparseLoss is the float64 reference for sparse-lr; w maps key to weight.
func refSparseLoss(w map[uint64]float64, bias float64, b *data.Batch) float64 {
	var loss float64
	for s := range b.N {
		z := bias
		for _, k := range b.Keys[b.Offsets[s]:b.Offsets[s+1]] {
			z += w[k]
		}
		p := 1 / (1 + math.Exp(-z))
		if b.Y[s] == 1 {
			loss -= math.Log(p)
		} else {
			loss -= math.Log(1 - p)
		}
	}
	return loss / float64(b.N)
}

func to64(ps [][]float32) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = make([]float64, len(p))
		for j, v := range p {
			out[i][j] = float64(v)
		}
	}
	return out
}

// agree reports whether an analytic gradient matches a numerical one.
func agree(got, want float64) bool {
	return math.Abs(got-want) <= 1e-4+2e-3*math.Abs(want)
}

// randomDense returns a batch of n samples of dim features with about a third zeros (so the
// sparse paths run) and labels in [0, classes).
func randomDense(r *rand.Rand, n, dim, classes int) *data.Batch {
	b := &data.Batch{N: n, Dim: dim, X: make([]float32, n*dim), Y: make([]int32, n)}
	for i := range b.X {
		if r.IntN(3) > 0 {
			b.X[i] = float32(r.NormFloat64())
		}
	}
	for i := range b.Y {
		b.Y[i] = int32(r.IntN(classes))
	}
	return b
}

func TestGradDense(t *testing.T) {
	tests := []struct {
		cfg  Config
		info data.Info
	}{
		{Config{Kind: KindSoftmax}, data.Info{Dim: 7, Classes: 4}},
		{Config{Kind: KindMLP, Hidden: []int{6}}, data.Info{Dim: 9, Classes: 3}},
		{Config{Kind: KindMLP, Hidden: []int{8, 5}}, data.Info{Dim: 6, Classes: 3}},
		{Config{Kind: KindMLP, Hidden: []int{3, 7, 4}}, data.Info{Dim: 5, Classes: 10}},
	}
	for ti, tt := range tests {
		r := rand.New(rand.NewPCG(uint64(ti), 1))
		m, err := New(tt.cfg, tt.info)
		if err != nil {
			t.Fatal(err)
		}
		p := m.NewParams()
		p.Dense = m.InitDense(int64(ti))
		for _, d := range p.Dense { // random values everywhere, including biases and softmax weights
			for j := range d {
				d[j] += float32(0.3 * r.NormFloat64())
			}
		}
		b := randomDense(r, 11, tt.info.Dim, tt.info.Classes)
		sizes := append(append([]int{tt.info.Dim}, tt.cfg.Hidden...), tt.info.Classes)

		g := m.NewParams()
		const scale = 2.5
		loss := m.Grad(p, b, g, scale)
		w := to64(p.Dense)
		if ref := refDenseLoss(sizes, w, b.X, b.Y, b.N); math.Abs(loss-ref) > 1e-5*math.Max(1, ref) {
			t.Errorf("%+v: Grad loss = %v; reference %v", tt.cfg, loss, ref)
		}
		if el, _ := m.Evaluate(p, b); math.Abs(el-loss) > 1e-6 {
			t.Errorf("%+v: Evaluate loss = %v; Grad loss %v", tt.cfg, el, loss)
		}
		const eps = 1e-5
		for ti, tensor := range m.Tensors() {
			for j := range w[ti] {
				orig := w[ti][j]
				w[ti][j] = orig + eps
				hi := refDenseLoss(sizes, w, b.X, b.Y, b.N)
				w[ti][j] = orig - eps
				lo := refDenseLoss(sizes, w, b.X, b.Y, b.N)
				w[ti][j] = orig
				num := scale * (hi - lo) / (2 * eps)
				if got := float64(g.Dense[ti][j]); !agree(got, num) {
					t.Errorf("%+v: d loss/d %s[%d] = %v; numerical %v", tt.cfg, tensor.Name, j, got, num)
				}
			}
		}
	}
}

func TestGradSparseLR(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, err := New(Config{Kind: KindSparseLR}, data.Info{Sparse: true, Features: 50, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	// 9 samples of 1..5 ids in [0,50), with repeats across samples and within one sample.
	b := &data.Batch{Offsets: []int{0}}
	for s := range 9 {
		for range 1 + r.IntN(5) {
			b.Keys = append(b.Keys, uint64(r.IntN(50)))
		}
		if s == 4 {
			b.Keys = append(b.Keys, b.Keys[len(b.Keys)-1])
		}
		b.Offsets = append(b.Offsets, len(b.Keys))
		b.Y = append(b.Y, int32(r.IntN(2)))
	}
	b.N = 9

	keys := m.SparseKeys(b, nil)
	want := slices.Clone(b.Keys)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("SparseKeys = %v; want %v", keys, want)
	}

	// p holds every key the batch uses plus others, as a server reply may.
	p := m.NewParams()
	p.Dense = m.InitDense(1)
	p.Dense[1][0] = 0.3
	w := map[uint64]float64{}
	for k := uint64(0); k < 60; k += 1 + uint64(r.IntN(2)) {
		if !slices.Contains(keys, k) && r.IntN(2) == 0 {
			continue
		}
		v := float32(r.NormFloat64())
		p.Sparse.Keys = append(p.Sparse.Keys, k)
		p.Sparse.Vals = append(p.Sparse.Vals, v)
		w[k] = float64(v)
	}
	for _, k := range keys {
		if _, ok := w[k]; !ok {
			p.Sparse.Keys = append(p.Sparse.Keys, k)
			p.Sparse.Vals = append(p.Sparse.Vals, 0)
			w[k] = 0
		}
	}
	order := make([]int, len(p.Sparse.Keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(p.Sparse.Keys[a]) - int(p.Sparse.Keys[b]) })
	sk, sv := make([]uint64, len(order)), make([]float32, len(order))
	for i, o := range order {
		sk[i], sv[i] = p.Sparse.Keys[o], p.Sparse.Vals[o]
	}
	p.Sparse = Sparse{Keys: sk, Vals: sv}

	g := m.NewParams()
	const scale = 0.5
	loss := m.Grad(p, b, g, scale)
	bias := float64(p.Dense[1][0])
	if ref := refSparseLoss(w, bias, b); math.Abs(loss-ref) > 1e-6 {
		t.Errorf("Grad loss = %v; reference %v", loss, ref)
	}
	if !slices.Equal(g.Sparse.Keys, keys) || len(g.Sparse.Vals) != len(keys) {
		t.Fatalf("gradient keys = %v (%d values); want %v", g.Sparse.Keys, len(g.Sparse.Vals), keys)
	}
	if g.Dense[0] != nil {
		t.Errorf("gradient Dense[0] = %v; want nil for the sparse tensor", g.Dense[0])
	}
	const eps = 1e-6
	for i, k := range keys {
		orig := w[k]
		w[k] = orig + eps
		hi := refSparseLoss(w, bias, b)
		w[k] = orig - eps
		lo := refSparseLoss(w, bias, b)
		w[k] = orig
		if num := scale * (hi - lo) / (2 * eps); !agree(float64(g.Sparse.Vals[i]), num) {
			t.Errorf("d loss/d w[%d] = %v; numerical %v", k, g.Sparse.Vals[i], num)
		}
	}
	num := scale * (refSparseLoss(w, bias+eps, b) - refSparseLoss(w, bias-eps, b)) / (2 * eps)
	if !agree(float64(g.Dense[1][0]), num) {
		t.Errorf("d loss/d b = %v; numerical %v", g.Dense[1][0], num)
	}
}

func TestInitDense(t *testing.T) {
	m, _ := New(Config{Kind: KindMLP, Hidden: []int{256, 64}}, data.Info{Dim: 784, Classes: 10})
	a, b, c := m.InitDense(1), m.InitDense(1), m.InitDense(2)
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			t.Errorf("InitDense(1) tensor %d differs between calls", i)
		}
	}
	if slices.Equal(a[0], c[0]) {
		t.Errorf("InitDense(1) and InitDense(2) agree on tensor 0")
	}
	// He init: hidden weights have variance 2/fan-in; biases start at zero.
	for l, fanIn := range []int{784, 256} {
		var ss float64
		for _, v := range a[2*l] {
			ss += float64(v) * float64(v)
		}
		if got, want := ss/float64(len(a[2*l])), 2/float64(fanIn); math.Abs(got-want) > 0.05*want {
			t.Errorf("layer %d weight variance = %v; want %v (He)", l, got, want)
		}
		if slices.ContainsFunc(a[2*l+1], func(v float32) bool { return v != 0 }) {
			t.Errorf("layer %d biases are not zero", l)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	m, _ := New(Config{Kind: KindMLP, Hidden: []int{32}}, data.Info{Dim: 50, Classes: 10})
	p := &Params{Dense: m.InitDense(1)}
	g := m.NewParams()
	b := randomDense(r, 16, 50, 10)
	m.Grad(p, b, g, 1)
	if n := testing.AllocsPerRun(20, func() { m.Grad(p, b, g, 1) }); n != 0 {
		t.Errorf("mlp Grad allocates %v times per call; want 0", n)
	}
	if n := testing.AllocsPerRun(20, func() { m.Evaluate(p, b) }); n != 0 {
		t.Errorf("mlp Evaluate allocates %v times per call; want 0", n)
	}

	train, _, _ := data.SyntheticCTR(data.CTRConfig{Samples: 64, TestSamples: 1, Features: 1000, Fields: 4, Seed: 1})
	sm, _ := New(Config{Kind: KindSparseLR}, train.Info())
	var sb data.Batch
	train.Fill(&sb, []int{1, 5, 9, 20, 33, 40})
	sp := &Params{Dense: sm.InitDense(1)}
	for k := range uint64(1000) {
		sp.Sparse.Keys = append(sp.Sparse.Keys, k)
		sp.Sparse.Vals = append(sp.Sparse.Vals, 0.01)
	}
	sg := sm.NewParams()
	sm.Grad(sp, &sb, sg, 1)
	if n := testing.AllocsPerRun(20, func() { sm.Grad(sp, &sb, sg, 1) }); n != 0 {
		t.Errorf("sparse-lr Grad allocates %v times per call; want 0", n)
	}
}

func TestEmptyBatch(t *testing.T) {
	m, _ := New(Config{Kind: KindSoftmax}, data.Info{Dim: 3, Classes: 2})
	p := &Params{Dense: m.InitDense(1)}
	g := m.NewParams()
	g.Dense[0][0] = 5
	if loss := m.Grad(p, &data.Batch{Dim: 3}, g, 1); loss != 0 || g.Dense[0][0] != 0 {
		t.Errorf("Grad(empty) = %v with gradient %v; want 0 and zeroed gradients", loss, g.Dense[0][0])
	}
	sm, _ := New(Config{Kind: KindSparseLR}, data.Info{Sparse: true, Features: 5, Classes: 2})
	sp := &Params{Dense: sm.InitDense(1)}
	if loss := sm.Grad(sp, &data.Batch{}, sm.NewParams(), 1); loss != 0 {
		t.Errorf("sparse Grad(empty) = %v; want 0", loss)
	}
}
