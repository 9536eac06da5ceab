package worker

import (
	"slices"
	"sync"
	"testing"

	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/model"
)

// preparing records the batches a worker prepares and computes.
type preparing struct {
	model.Model
	mu       sync.Mutex
	prepared [][]int
	computed [][]int
}

func (p *preparing) Prepare(b *data.Batch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prepared = append(p.prepared, slices.Clone(b.Index))
}

func (p *preparing) Grad(params *model.Params, b *data.Batch, g *model.Params, scale float32) float64 {
	p.mu.Lock()
	p.computed = append(p.computed, slices.Clone(b.Index))
	p.mu.Unlock()
	return p.Model.Grad(params, b, g, scale)
}

// TestPrepareNextBatch: a model that can prepare batches (a torch model's
// child collates them) is handed each next batch before the exchange of
// the current one, and the step then computes exactly that batch.
func TestPrepareNextBatch(t *testing.T) {
	ds := mnistSubset(t, 512)
	c := clusterConfig{model: model.Config{Kind: "softmax"}, info: ds.Info(), servers: 1, workers: 2, blockBytes: 1 << 16,
		sync: syncmodel.Config{Model: "bsp", Pull: "lazy"}, optim: optim.Config{Kind: "sgd", LR: 0.1}, seed: 1}
	cl := startCluster(t, c)
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 64, Seed: 3, Local: []int{32, 32}}
	var p *preparing
	cl.train(t, c, ds, plan, func(cfg *Config) {
		if cfg.Index == 0 {
			p = &preparing{Model: cfg.Model}
			cfg.Model = p
		}
	})
	if int64(len(p.computed)) != plan.Iterations() || len(p.prepared) != len(p.computed)-1 {
		t.Fatalf("%d steps, %d batches prepared; want %d and one fewer (the first is filled before the loop)",
			len(p.computed), len(p.prepared), plan.Iterations())
	}
	for i, idx := range p.prepared {
		if !slices.Equal(idx, p.computed[i+1]) {
			t.Fatalf("step %d computed %v, prepared %v", i+1, p.computed[i+1], idx)
		}
	}
}
