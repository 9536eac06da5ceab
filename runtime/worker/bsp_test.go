package worker

import (
	"math"
	"sync"
	"testing"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/psclient"
)

func mnistSubset(t *testing.T, n int) data.Dataset {
	t.Helper()
	dir, err := data.FindMNIST()
	if err != nil {
		t.Skipf("MNIST not available: %v", err)
	}
	train, _, err := data.LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := data.Slice(train, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// finalParams trains with the given worker count and batch split and
// returns worker 0's final view of the parameters (pulled after the last
// iteration, so every worker's last gradient is in).
func finalParams(t *testing.T, c clusterConfig, ds data.Dataset, local []int, epochs int) *model.Params {
	t.Helper()
	cl := startCluster(t, c)
	gb := 0
	for _, b := range local {
		gb += b
	}
	plan := job.Plan{N: ds.Len(), Epochs: epochs, GlobalBatch: gb, Seed: 3, Local: local, BatchesPerShard: 4}
	ws := cl.train(t, c, ds, plan, nil)
	if _, _, err := ws[0].Evaluate(ds, -1); err != nil {
		t.Fatal(err)
	}
	return ws[0].Params()
}

func maxDiff(t *testing.T, a, b *model.Params) float64 {
	t.Helper()
	var d float64
	for i := range a.Dense {
		if len(a.Dense[i]) != len(b.Dense[i]) {
			t.Fatalf("tensor %d: lengths %d and %d", i, len(a.Dense[i]), len(b.Dense[i]))
		}
		for j := range a.Dense[i] {
			d = math.Max(d, math.Abs(float64(a.Dense[i][j]-b.Dense[i][j])))
		}
	}
	return d
}

// TestBSPEquivalence: N workers under BSP whose local batches make up the
// global batch produce the same parameters as one worker training on the
// whole global batch (the gradient is a sum over samples; only the float
// summation order differs).
func TestBSPEquivalence(t *testing.T) {
	ds := mnistSubset(t, 2048)
	bsp := syncmodel.Config{Model: "bsp", Pull: "lazy"}
	for _, tc := range []struct {
		name     string
		opt      optim.Config
		servers  int
		local    []int
		strategy blocks.Strategy
		// The many-worker run's data plane (the one-worker reference runs
		// over the default).
		transport string
	}{
		{"sgd 2 servers 4 equal workers", optim.Config{Kind: "sgd", LR: 0.1}, 2, []int{16, 16, 16, 16}, blocks.RoundRobin, psclient.TransportGRPC},
		{"momentum 3 servers uneven workers", optim.Config{Kind: "momentum", LR: 0.05, Momentum: 0.9}, 3, []int{40, 8, 16}, blocks.SizeBalanced, psclient.TransportTCP},
		{"adam 2 servers split blocks", optim.Config{Kind: "adam", LR: 0.001}, 2, []int{32, 32}, blocks.MXNet, psclient.TransportUnix},
	} {
		t.Run(tc.name+" over "+tc.transport, func(t *testing.T) {
			c := clusterConfig{model: model.Config{Kind: "mlp", Hidden: []int{32}}, info: ds.Info(),
				servers: tc.servers, workers: len(tc.local), blockBytes: 64 << 10, strategy: tc.strategy,
				sync: bsp, optim: tc.opt, seed: 5, transport: tc.transport}
			many := finalParams(t, c, ds, tc.local, 1)
			gb := 0
			for _, b := range tc.local {
				gb += b
			}
			c.workers, c.transport = 1, ""
			one := finalParams(t, c, ds, []int{gb}, 1)
			d := maxDiff(t, many, one)
			t.Logf("max |w_N - w_1| = %g", d)
			if d > 1e-4 {
				t.Errorf("max |w_N - w_1| = %g; want ≤ 1e-4", d)
			}
			// And training moved the parameters at all.
			init := c.newModel(t).InitDense(c.seed)
			moved := 0.0
			for i := range init {
				for j := range init[i] {
					moved = math.Max(moved, math.Abs(float64(init[i][j]-one.Dense[i][j])))
				}
			}
			if moved < 1e-3 {
				t.Errorf("parameters moved at most %g from their initial values", moved)
			}
		})
	}
}

// TestBSPEquivalenceAcrossBatchChange: changing the local batch sizes at an
// iteration boundary (ADJUST_BS, same global batch, applied by every worker
// at the same iteration) keeps BSP equal to one worker with the global batch.
func TestBSPEquivalenceAcrossBatchChange(t *testing.T) {
	ds := mnistSubset(t, 1024)
	c := clusterConfig{model: model.Config{Kind: "softmax"}, info: ds.Info(), servers: 2, workers: 2,
		blockBytes: 8 << 10, strategy: blocks.RoundRobin, sync: syncmodel.Config{Model: "bsp", Pull: "lazy"},
		optim: optim.Config{Kind: "momentum", LR: 0.05, Momentum: 0.9}, seed: 9}
	cl := startCluster(t, c)
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 64, Seed: 3, Local: []int{32, 32}, BatchesPerShard: 4}
	var mu sync.Mutex
	var acks []Ack
	ws := cl.train(t, c, ds, plan, func(cfg *Config) {
		ch := make(chan Command, 1)
		ch <- Command{ID: "a1", Local: []int{56, 8}, At: 5}
		cfg.Commands = ch
		cfg.Ack = func(a Ack) { mu.Lock(); acks = append(acks, a); mu.Unlock() }
	})
	if _, _, err := ws[0].Evaluate(ds, -1); err != nil {
		t.Fatal(err)
	}
	if len(acks) != 2 {
		t.Fatalf("acks = %v; want one per worker", acks)
	}
	for _, a := range acks {
		if a.Err != nil || a.Applied != 5 {
			t.Errorf("ack %+v; want applied at 5 without error", a)
		}
	}
	c.workers = 1
	one := finalParams(t, c, ds, []int{64}, 1)
	if d := maxDiff(t, ws[0].Params(), one); d > 1e-4 {
		t.Errorf("max |w_split - w_1| = %g; want ≤ 1e-4", d)
	}
}

// TestBSPEquivalenceWithAccumulation: a split with gradient-accumulation
// counts (AntDT-DD: worker i computes Accum[i] micro-batches) gives the
// same parameters as one worker with the global batch.
func TestBSPEquivalenceWithAccumulation(t *testing.T) {
	ds := mnistSubset(t, 1024)
	c := clusterConfig{model: model.Config{Kind: "mlp", Hidden: []int{16}}, info: ds.Info(), servers: 2, workers: 2,
		blockBytes: 8 << 10, strategy: blocks.RoundRobin, sync: syncmodel.Config{Model: "bsp", Pull: "lazy"},
		optim: optim.Config{Kind: "momentum", LR: 0.05, Momentum: 0.9}, seed: 9}
	cl := startCluster(t, c)
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 64, Seed: 3, Local: []int{32, 32}, BatchesPerShard: 4}
	ws := cl.train(t, c, ds, plan, func(cfg *Config) {
		ch := make(chan Command, 1)
		ch <- Command{ID: "dd", Local: []int{56, 8}, Accum: []int{7, 3}, At: 4}
		cfg.Commands = ch
	})
	if ws[0].accum != 7 || ws[1].accum != 3 {
		t.Fatalf("accumulation counts %d, %d; want 7, 3", ws[0].accum, ws[1].accum)
	}
	if _, _, err := ws[0].Evaluate(ds, -1); err != nil {
		t.Fatal(err)
	}
	c.workers = 1
	one := finalParams(t, c, ds, []int{64}, 1)
	if d := maxDiff(t, ws[0].Params(), one); d > 1e-4 {
		t.Errorf("max |w_accum - w_1| = %g; want ≤ 1e-4", d)
	}
}

// TestBSPEquivalenceAcrossWorkerChanges: a worker that is not in the
// servers' barrier joins it while the job runs and takes a share of the
// global batch from iteration 6; another leaves at iteration 10, its
// share going to the others. Under BSP the parameters stay those of one
// worker with the global batch: nothing is lost or counted twice.
func TestBSPEquivalenceAcrossWorkerChanges(t *testing.T) {
	ds := mnistSubset(t, 1024)
	c := clusterConfig{model: model.Config{Kind: "softmax"}, info: ds.Info(), servers: 2, workers: 3,
		blockBytes: 8 << 10, strategy: blocks.RoundRobin, sync: syncmodel.Config{Model: "bsp", Pull: "lazy"},
		optim: optim.Config{Kind: "momentum", LR: 0.05, Momentum: 0.9}, seed: 9, members: []int{0, 1}}
	cl := startCluster(t, c)
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 64, Seed: 3, Local: []int{32, 32}, BatchesPerShard: 4}
	var sums [3]Summary
	ws := cl.trainSummaries(t, c, ds, plan, func(cfg *Config) {
		ch := make(chan Command, 2)
		ch <- Command{ID: "add", Local: []int{32, 16, 16}, At: 6}
		ch <- Command{ID: "remove", Local: []int{48, 0, 16}, At: 10, Leave: cfg.Index == 1}
		cfg.Commands = ch
	}, sums[:])
	if !sums[1].Left || sums[0].Left || sums[2].Left {
		t.Errorf("left = %v, %v, %v; want only worker 1", sums[0].Left, sums[1].Left, sums[2].Left)
	}
	if sums[1].Iterations != 10 {
		t.Errorf("worker 1 ran %d iterations; want 10 (it leaves at 10)", sums[1].Iterations)
	}
	if got, want := sums[0].Samples+sums[1].Samples+sums[2].Samples, int64(ds.Len()); got != want {
		t.Errorf("samples trained = %d; want %d (each once)", got, want)
	}
	if _, _, err := ws[0].Evaluate(ds, -1); err != nil {
		t.Fatal(err)
	}
	c.workers, c.members = 1, nil
	one := finalParams(t, c, ds, []int{64}, 1)
	if d := maxDiff(t, ws[0].Params(), one); d > 1e-4 {
		t.Errorf("max |w_changes - w_1| = %g; want ≤ 1e-4", d)
	}
}
