package worker

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/core/topology"
	"github.com/kelpie/kelpie/runtime/allreduce"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/model"
)

// arNet is the workers' address book (what the coordinator is to real
// workers): a restarted worker gets a new listener and address.
type arNet struct {
	mu    sync.Mutex
	addrs map[int]string
	topo  topology.Topology
}

func newARNet(topo topology.Topology) *arNet { return &arNet{addrs: map[int]string{}, topo: topo} }

// listen opens worker w's listener and records its address.
func (n *arNet) listen(t *testing.T, w int) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	n.mu.Lock()
	n.addrs[w] = l.Addr().String()
	n.mu.Unlock()
	return l
}

func (n *arNet) group(kind string, w int, lis net.Listener) *allreduce.Group {
	return allreduce.NewGroup(allreduce.GroupConfig{Self: w, Job: "test", Listener: lis, Kind: kind,
		Resolve: func(ctx context.Context, w int) (string, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.addrs[w], nil
		},
		Place: func(w int) topology.Place {
			if w < len(n.topo) {
				return n.topo[w]
			}
			return topology.Place{}
		}})
}

// newARWorker makes worker w of an allreduce job.
func newARWorker(t *testing.T, c clusterConfig, n *arNet, kind string, w int, ds data.Dataset, plan job.Plan, members []int, await bool, cmds <-chan Command) (*Worker, *allreduce.Group, net.Listener) {
	t.Helper()
	lis := n.listen(t, w)
	g := n.group(kind, w, lis)
	m := c.newModel(t)
	wk, err := New(Config{Index: w, Model: m, Train: ds, Plan: plan, Sync: syncmodel.BSP, Start: time.Now(), Seed: c.seed, Commands: cmds,
		Allreduce: &Allreduce{Group: g, Members: members, Await: await, Optim: c.optim, Init: m.InitDense(c.seed), RegroupTimeout: 20 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return wk, g, lis
}

// trainAllreduce trains c.workers workers that sum their gradients with the
// given exchange ("ring" or "rat") over real TCP connections, and returns
// them with their summaries.
func trainAllreduce(t *testing.T, c clusterConfig, kind string, topo topology.Topology, ds data.Dataset, plan job.Plan) ([]*Worker, []Summary) {
	t.Helper()
	n := newARNet(topo)
	members := make([]int, c.workers)
	for i := range members {
		members[i] = i
	}
	ws := make([]*Worker, c.workers)
	for i := range ws {
		ws[i], _, _ = newARWorker(t, c, n, kind, i, ds, plan, members, false, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sums := make([]Summary, len(ws))
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
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
	topo := topology.Topology{{Rack: "r0"}, {Rack: "r0"}, {Rack: "r1"}, {Rack: "r1"}}
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

// TestAllreduceRefusesTables: reassigning blocks has no meaning for an
// allreduce worker; it says so in the ack.
func TestAllreduceRefusesTables(t *testing.T) {
	ds := mnistSubset(t, 256)
	c := clusterConfig{model: model.Config{Kind: "softmax"}, info: ds.Info(), workers: 2, optim: optim.Config{Kind: "sgd", LR: 0.1}, seed: 1}
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 32, Seed: 3, Local: []int{16, 16}, BatchesPerShard: 4}
	cmds := make(chan Command, 2)
	cmds <- Command{ID: "table", Table: &blocks.Table{Version: 9}, At: 1}
	var mu sync.Mutex
	acks := map[string]error{}
	m := c.newModel(t)
	r, err := newReducer(m, &Allreduce{Group: allreduce.NewGroup(allreduce.GroupConfig{}), Members: []int{0, 1}, Optim: c.optim, Init: m.InitDense(1)})
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
	if acks["table"] == nil {
		t.Error("table command acked without error in an allreduce job")
	}
}

// TestAllreduceMembership changes an allreduce group three ways while it
// trains, in ring and RAT mode: worker-4 is added at iteration 10 (it
// waits for the split that takes it in, joins, and copies the state),
// worker-1 is removed at iteration 25 (the others take its share), and
// worker-2 is killed after iteration 40 and started afresh (the others'
// exchange breaks; they form the group again with the new process, which
// takes the state of the member furthest on). Every worker left trains
// to the plan's end and holds exactly the same parameters, which still
// learned.
func TestAllreduceMembership(t *testing.T) {
	ds := mnistSubset(t, 2048)
	topo := topology.Topology{{Rack: "r0"}, {Rack: "r0"}, {Rack: "r1"}, {Rack: "r1"}, {Rack: "r1"}}
	c := clusterConfig{model: model.Config{Kind: "mlp", Hidden: []int{16}}, info: ds.Info(), workers: 4,
		optim: optim.Config{Kind: "momentum", LR: 0.05, Momentum: 0.9}, seed: 5}
	base := job.Plan{N: ds.Len(), Epochs: 2, GlobalBatch: 64, Seed: 3, Local: []int{16, 16, 16, 16}, BatchesPerShard: 4}
	add := Command{ID: "add", At: 10, Local: []int{16, 16, 16, 8, 8}}
	remove := Command{ID: "remove", At: 25, Local: []int{16, 0, 24, 12, 12}}
	full, err := base.WithSplit(add.At, add.Local)
	if err == nil {
		full, err = full.WithSplit(remove.At, remove.Local)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ring", "rat"} {
		t.Run(kind, func(t *testing.T) {
			n := newARNet(topo)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			type run struct {
				w    *Worker
				sum  Summary
				err  error
				done chan struct{}
			}
			start := func(w *Worker, ctx context.Context) *run {
				r := &run{w: w, done: make(chan struct{})}
				go func() {
					defer close(r.done)
					r.sum, r.err = w.Run(ctx)
				}()
				return r
			}
			runs := make([]*run, 5)
			var dead *allreduce.Group
			var deadLis net.Listener
			for i := range 5 {
				cmds := make(chan Command, 4)
				cmds <- add
				leave := remove
				leave.Leave = i == 1
				cmds <- leave
				w, g, lis := newARWorker(t, c, n, kind, i, ds, base, []int{0, 1, 2, 3}, i == 4, cmds)
				wctx := ctx
				if i == 2 {
					// worker-2 dies once it has reported iteration 40.
					var kill context.CancelFunc
					wctx, kill = context.WithCancel(ctx)
					w.cfg.Report = func(r Report) bool {
						if r.Iteration >= 40 {
							kill()
							return false
						}
						return true
					}
					dead, deadLis = g, lis
				}
				runs[i] = start(w, wctx)
			}
			// The process is gone: its connections and listener close. A
			// new worker-2 starts on a new address, with the splits it would
			// get from the coordinator and the members they leave.
			<-runs[2].done
			if runs[2].err == nil {
				t.Fatal("worker-2 finished before it was killed")
			}
			dead.Close()
			deadLis.Close()
			w2, _, _ := newARWorker(t, c, n, kind, 2, ds, full, positive(full.LocalAt(1<<40)), false, make(chan Command))
			runs[2] = start(w2, ctx)
			for _, r := range runs {
				<-r.done
			}
			failed := false
			for i, r := range runs {
				if r.err != nil {
					t.Errorf("worker-%d: %v", i, r.err)
					failed = true
				}
			}
			if failed {
				t.FailNow()
			}
			if !runs[1].sum.Left {
				t.Error("worker-1 did not leave")
			}
			last := full.Iterations()
			for _, i := range []int{0, 2, 3, 4} {
				w := runs[i].w
				if w.ar.done != last-1 {
					t.Errorf("worker-%d's last iteration %d; want %d", i, w.ar.done, last-1)
				}
				if d := maxDiff(t, runs[0].w.Params(), w.Params()); d != 0 {
					t.Errorf("workers 0 and %d differ by %g", i, d)
				}
			}
			if got := runs[4].sum.Iterations; got != last-add.At {
				t.Errorf("worker-4 trained %d iterations; want %d (from iteration %d)", got, last-add.At, add.At)
			}
			if got := runs[1].sum.Iterations; got != remove.At {
				t.Errorf("worker-1 trained %d iterations; want %d (until iteration %d)", got, remove.At, remove.At)
			}
			_, acc, err := runs[0].w.Evaluate(ds, -1)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: accuracy %.3f on the training subset after the changes", kind, acc)
			if acc < 0.7 {
				t.Errorf("accuracy %.3f; the group stopped learning", acc)
			}
		})
	}
}
