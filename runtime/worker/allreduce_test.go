package worker

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/runtime/allreduce"
	"github.com/kelpie/kelpie/runtime/blocks"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/job"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/optim"
	"github.com/kelpie/kelpie/runtime/syncmodel"
)

// trainAllreduce trains c.workers workers that sum their gradients with the
// given exchange ("ring" or "rat") over real TCP connections, and returns
// them with their summaries.
func trainAllreduce(t *testing.T, c clusterConfig, kind string, topo allreduce.Topology, ds data.Dataset, plan job.Plan) ([]*Worker, []Summary) {
	t.Helper()
	n := c.workers
	m := c.newModel(t)
	total := 0
	for _, x := range m.Tensors() {
		total += x.Len()
	}
	total++ // the flag: a worker has data for the next iteration
	var p *allreduce.Plan
	switch kind {
	case "ring":
		p = allreduce.Ring(n, total, topo)
	case "rat":
		p = allreduce.RAT(n, total, topo, 0)
	default:
		t.Fatalf("unknown exchange %q", kind)
	}
	lis := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	xs := make([]*allreduce.Exchange, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			xs[i], errs[i] = allreduce.Connect(ctx, allreduce.Config{Self: i, Addrs: addrs, Listener: lis[i], Group: "test", Region: topo.RackRegion()})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: connect: %v", i, err)
		}
		t.Cleanup(xs[i].Close)
	}
	init := m.InitDense(c.seed)
	ws := make([]*Worker, n)
	for i := range ws {
		w, err := New(Config{Index: i, Model: c.newModel(t), Train: ds, Plan: plan, Sync: syncmodel.BSP, Start: time.Now(), Seed: c.seed,
			Allreduce: &Allreduce{Exchange: xs[i], Plan: p, Optim: c.optim, Init: init}})
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	sums := make([]Summary, n)
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sums[i], errs[i] = w.Run(ctx)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	return ws, sums
}

// TestAllreduceMatchesPS is the exchange modes' acceptance test: PS (real
// servers over gRPC), ring and RAT (real TCP between the workers) train the
// same model on the same data with the same seed, optimizer and
// learning-rate schedule, and end with the same parameters up to float
// summation order; ring and RAT workers all hold identical bits.
func TestAllreduceMatchesPS(t *testing.T) {
	ds := mnistSubset(t, 2048)
	topo := allreduce.Topology{{Rack: "r0"}, {Rack: "r0"}, {Rack: "r1"}, {Rack: "r1"}}
	local := []int{16, 16, 16, 16}
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 64, Seed: 3, Local: local, BatchesPerShard: 4}
	for _, opt := range []optim.Config{
		{Kind: "sgd", LR: 0.1},
		{Kind: "momentum", LR: 0.05, Momentum: 0.9, Decay: optim.DecayLinear, Final: 0.1, Steps: plan.Iterations()},
		{Kind: "adam", LR: 0.002, Decay: optim.DecayCosine, Final: 0.05, Steps: plan.Iterations()},
	} {
		t.Run(opt.Kind, func(t *testing.T) {
			c := clusterConfig{model: model.Config{Kind: "mlp", Hidden: []int{32}}, info: ds.Info(),
				servers: 2, workers: 4, blockBytes: 16 << 10, strategy: blocks.RoundRobin,
				sync: syncmodel.Config{Model: "bsp", Pull: "lazy"}, optim: opt, seed: 5}
			ps := finalParams(t, c, ds, local, 1)
			largest := maxDiff(t, ps, c.newModel(t).NewParams())
			for _, kind := range []string{"ring", "rat"} {
				ws, sums := trainAllreduce(t, c, kind, topo, ds, plan)
				if sums[0].Iterations != plan.Iterations() {
					t.Fatalf("%s: %d iterations; want %d", kind, sums[0].Iterations, plan.Iterations())
				}
				for i := 1; i < len(ws); i++ {
					if d := maxDiff(t, ws[0].Params(), ws[i].Params()); d != 0 {
						t.Errorf("%s: workers 0 and %d differ by %g; every worker must take the same step", kind, i, d)
					}
				}
				d := maxDiff(t, ps, ws[0].Params())
				t.Logf("%s %s: max |ps - %s| = %.3g (largest parameter %.3g)", opt.Kind, kind, kind, d, largest)
				if d > 1e-4 {
					t.Errorf("%s: parameters differ from PS by %g; want ≤ 1e-4", kind, d)
				}
			}
		})
	}
}

// TestAllreduceRefusesPSOnlyCommands: removing a worker or reassigning
// blocks has no meaning for an allreduce worker; it says so in the ack.
func TestAllreduceRefusesPSOnlyCommands(t *testing.T) {
	ds := mnistSubset(t, 256)
	c := clusterConfig{model: model.Config{Kind: "softmax"}, info: ds.Info(), workers: 2, optim: optim.Config{Kind: "sgd", LR: 0.1}, seed: 1}
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 32, Seed: 3, Local: []int{16, 16}, BatchesPerShard: 4}
	cmds := make(chan Command, 2)
	cmds <- Command{ID: "leave", Leave: true, At: 1}
	cmds <- Command{ID: "table", Table: &blocks.Table{Version: 9}, At: 1}
	var mu sync.Mutex
	acks := map[string]error{}
	m := c.newModel(t)
	total := 0
	for _, x := range m.Tensors() {
		total += x.Len()
	}
	r, err := newReducer(m, &Allreduce{Exchange: &allreduce.Exchange{}, Plan: allreduce.Ring(2, total+1, nil), Optim: c.optim, Init: m.InitDense(1)})
	if err != nil {
		t.Fatal(err)
	}
	w := &Worker{cfg: Config{Index: 0, Plan: plan, Commands: cmds, Ack: func(a Ack) {
		mu.Lock()
		defer mu.Unlock()
		acks[a.ID] = a.Err
	}}, ar: r, leaveAt: -1}
	w.applyCommands(1)
	if err := w.applyTables(1); err == nil {
		t.Error("applyTables in allreduce = nil; want an error")
	}
	for _, id := range []string{"leave", "table"} {
		if acks[id] == nil {
			t.Errorf("%s command acked without error in an allreduce job", id)
		}
	}
	if w.leaveAt != -1 {
		t.Errorf("leaveAt = %d after a refused leave", w.leaveAt)
	}
}
