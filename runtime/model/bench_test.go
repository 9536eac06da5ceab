package model

import (
	"testing"

	"github.com/kelpie/kelpie/runtime/data"
)

// benchGrad measures Grad on consecutive MNIST batches and reports samples/s.
func benchGrad(b *testing.B, cfg Config, batch int) {
	train, _ := loadMNIST(b)
	m, err := New(cfg, train.Info())
	if err != nil {
		b.Fatal(err)
	}
	p := &Params{Dense: m.InitDense(1)}
	g := m.NewParams()
	perm := data.Permutation(train.Len(), 1, 0)
	const nb = 64
	batches := make([]data.Batch, nb)
	for i := range batches {
		train.Fill(&batches[i], perm[i*batch:(i+1)*batch])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.Grad(p, &batches[i%nb], g, 0.1)
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "samples/s")
}

func BenchmarkGradMLP(b *testing.B)     { benchGrad(b, Config{Kind: KindMLP, Hidden: []int{128}}, 64) }
func BenchmarkGradSoftmax(b *testing.B) { benchGrad(b, Config{Kind: KindSoftmax}, 64) }

func BenchmarkGradSparseLR(b *testing.B) {
	const batch = 256
	train, _, _ := data.SyntheticCTR(data.CTRConfig{Samples: 64 * batch, TestSamples: 1, Features: 1 << 20, Fields: 8, Seed: 1})
	m, _ := New(Config{Kind: KindSparseLR}, train.Info())
	batches := make([]data.Batch, 64)
	var keys []uint64
	for i := range batches {
		idx := make([]int, batch)
		for j := range idx {
			idx[j] = i*batch + j
		}
		train.Fill(&batches[i], idx)
		keys = append(keys, batches[i].Keys...)
	}
	// p holds the rows of all batches, as a worker's pulled cache might.
	p := &Params{Dense: m.InitDense(1)}
	p.Sparse.Keys = m.SparseKeys(&data.Batch{N: 1, Keys: keys, Offsets: []int{0, len(keys)}}, nil)
	p.Sparse.Vals = make([]float32, len(p.Sparse.Keys))
	g := m.NewParams()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.Grad(p, &batches[i%len(batches)], g, 0.1)
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "samples/s")
}
