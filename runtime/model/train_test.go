package model

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/runtime/data"
)

var mnist struct {
	once        sync.Once
	train, test data.Dataset
	err         error
}

// loadMNIST loads MNIST once for all tests and benchmarks, skipping when it is not installed.
func loadMNIST(tb testing.TB) (train, test data.Dataset) {
	tb.Helper()
	mnist.once.Do(func() {
		dir, err := data.FindMNIST()
		if err != nil {
			mnist.err = err
			return
		}
		mnist.train, mnist.test, mnist.err = data.LoadMNIST(dir)
	})
	if mnist.err != nil {
		tb.Skip(mnist.err)
	}
	return mnist.train, mnist.test
}

// sgd trains m on ds with plain minibatch SGD over the given number of epochs.
func sgd(m Model, p *Params, ds data.Dataset, batch, epochs int, lr float32) {
	g := m.NewParams()
	var b data.Batch
	for e := range epochs {
		perm := data.Permutation(ds.Len(), 1, e)
		for lo := 0; lo+batch <= len(perm); lo += batch {
			ds.Fill(&b, perm[lo:lo+batch])
			m.Grad(p, &b, g, lr)
			for i, d := range g.Dense {
				for j, v := range d {
					p.Dense[i][j] -= v
				}
			}
			for u, k := range g.Sparse.Keys {
				row, _ := p.Sparse.Find(k)
				p.Sparse.Vals[row] -= g.Sparse.Vals[u]
			}
		}
	}
}

func all(ds data.Dataset) *data.Batch {
	idx := make([]int, ds.Len())
	for i := range idx {
		idx[i] = i
	}
	var b data.Batch
	ds.Fill(&b, idx)
	return &b
}

func TestTrainMNIST(t *testing.T) {
	train, test := loadMNIST(t)
	sub, _ := data.Slice(train, 0, 20000)
	tb := all(test)
	tests := []struct {
		cfg     Config
		epochs  int
		lr      float32
		minAcc  float64
		maxLoss float64
	}{
		{Config{Kind: KindSoftmax}, 2, 0.1, 0.88, 0.4},
		{Config{Kind: KindMLP, Hidden: []int{64}}, 2, 0.1, 0.92, 0.3},
	}
	for _, tt := range tests {
		m, err := New(tt.cfg, train.Info())
		if err != nil {
			t.Fatal(err)
		}
		p := &Params{Dense: m.InitDense(1)}
		loss0, acc0 := m.Evaluate(p, tb)
		start := time.Now()
		sgd(m, p, sub, 32, tt.epochs, tt.lr)
		loss, acc := m.Evaluate(p, tb)
		t.Logf("%s: test loss %.3f→%.3f, accuracy %.3f→%.3f after %d epoch(s) on %d samples in %v",
			tt.cfg.Kind, loss0, loss, acc0, acc, tt.epochs, sub.Len(), time.Since(start).Round(time.Millisecond))
		if acc < tt.minAcc || loss > tt.maxLoss {
			t.Errorf("%+v on MNIST: test loss %.3f, accuracy %.3f; want loss ≤ %v and accuracy ≥ %v",
				tt.cfg, loss, acc, tt.maxLoss, tt.minAcc)
		}
	}
}

func TestTrainSparseLR(t *testing.T) {
	const features = 1 << 12
	train, test, truth := data.SyntheticCTR(data.CTRConfig{Samples: 100000, TestSamples: 5000, Features: features, Fields: 8, Seed: 7})
	m, err := New(Config{Kind: KindSparseLR}, train.Info())
	if err != nil {
		t.Fatal(err)
	}
	// Hold the whole table, as a single server would.
	p := &Params{Dense: m.InitDense(1)}
	for k := range uint64(features) {
		p.Sparse.Keys = append(p.Sparse.Keys, k)
	}
	p.Sparse.Vals = make([]float32, features)

	tb := all(test)
	loss0, _ := m.Evaluate(p, tb)
	sgd(m, p, train, 64, 2, 4)
	loss, acc := m.Evaluate(p, tb)

	// The Bayes-optimal predictor: the truth itself.
	bestLoss, bestAcc := m.Evaluate(&Params{Dense: [][]float32{nil, {truth.B}}, Sparse: Sparse{Keys: p.Sparse.Keys, Vals: truth.W}}, tb)

	// Weights of ids seen often enough to be learnable should follow the truth.
	freq := make([]int, features)
	for _, k := range all(train).Keys {
		freq[k]++
	}
	var xs, ys []float64
	for k, f := range freq {
		if f >= 30 {
			xs = append(xs, float64(p.Sparse.Vals[k]))
			ys = append(ys, float64(truth.W[k]))
		}
	}
	corr := pearson(xs, ys)
	t.Logf("sparse-lr: test loss %.3f→%.3f (truth %.3f), accuracy %.3f (truth %.3f), weight correlation %.3f over %d ids, bias %.2f (truth %.2f)",
		loss0, loss, bestLoss, acc, bestAcc, corr, len(xs), p.Dense[1][0], truth.B)
	if corr < 0.8 {
		t.Errorf("correlation of learned and true weights = %.3f over %d ids; want ≥ 0.8", corr, len(xs))
	}
	// Plain SGD does not reach the truth in two epochs (rare ids see few updates), but it must
	// close most of the gap from the all-zero model.
	if gap := (loss - bestLoss) / (loss0 - bestLoss); gap > 0.3 || acc < bestAcc-0.05 {
		t.Errorf("test loss %.3f (%.0f%% of the gap to the truth's %.3f left), accuracy %.3f (truth %.3f); want ≤ 30%% left and accuracy within 0.05",
			loss, 100*gap, bestLoss, acc, bestAcc)
	}
}

func pearson(x, y []float64) float64 {
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= float64(len(x))
	my /= float64(len(y))
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	return sxy / math.Sqrt(sxx*syy)
}
