package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/server"
)

// addServer starts one more server that holds no block yet.
func (cl *cluster) addServer(t *testing.T, c clusterConfig) {
	t.Helper()
	workers := make([]int, c.workers)
	for i := range workers {
		workers[i] = i
	}
	ps, err := server.New(server.Config{Name: "new", Sync: c.sync, Optim: c.optim, Workers: workers, Seed: c.seed})
	if err != nil {
		t.Fatal(err)
	}
	ps.Install(cl.table, len(cl.servers), nil)
	addr, stop := serve(t, ps)
	t.Cleanup(stop)
	cl.addrs = append(cl.addrs, addr)
	cl.servers = append(cl.servers, ps)
}

// retable moves every server to table t from iteration at; addrs has ""
// for removed servers.
func (cl *cluster) retable(t *testing.T, tab blocks.Table, addrs []string, at int64) {
	t.Helper()
	a := job.Assignment(tab, addrs, nil)
	for i, s := range cl.servers {
		if _, err := s.Retable(context.Background(), &pspb.RetableRequest{Assignment: a, SwitchIteration: at, Me: int32(i)}); err != nil {
			t.Fatalf("retable server %d: %v", i, err)
		}
	}
}

// TestHotServerChanges: add a server, then remove one, while BSP training
// runs; blocks migrate between servers at agreed iterations. No update is
// lost or applied twice: the final parameters equal those of one worker
// training without any change, optimizer state included.
func TestHotServerChanges(t *testing.T) {
	for _, opt := range []optim.Config{{Kind: "momentum", LR: 0.05, Momentum: 0.9}, {Kind: "adam", LR: 0.002}} {
		t.Run(opt.Kind, func(t *testing.T) { hotServerChanges(t, opt) })
	}
}

func hotServerChanges(t *testing.T, opt optim.Config) {
	ds := mnistSubset(t, 2048)
	c := clusterConfig{model: model.Config{Kind: "mlp", Hidden: []int{32}}, info: ds.Info(), servers: 2, workers: 3,
		blockBytes: 16 << 10, strategy: blocks.RoundRobin, sync: syncmodel.Config{Model: "bsp", Pull: "lazy"},
		optim: opt, seed: 4}
	cl := startCluster(t, c)
	addrs1 := append([]string(nil), cl.addrs...)
	cl.addServer(t, c)
	// v2: three servers, round-robin; v3: server 0 removed.
	t2, _ := blocks.Assign(cl.table.Blocks, 3, blocks.RoundRobin, 1)
	t2.Version = 2
	addrs2 := append([]string(nil), cl.addrs...)
	t3 := t2
	t3.Version = 3
	t3.ServerOf = make([]int, len(t2.ServerOf))
	for i := range t3.ServerOf {
		t3.ServerOf[i] = 1 + i%2
	}
	addrs3 := append([]string{""}, cl.addrs[1:]...)
	if len(cl.table.Blocks) < 4 {
		t.Fatalf("want several blocks to move, have %d", len(cl.table.Blocks))
	}

	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 48, Seed: 3, Local: []int{16, 16, 16}, BatchesPerShard: 4}
	cl.retable(t, t2, addrs2, 7)
	var mu sync.Mutex
	acks := map[string]int{}
	var chans []chan Command
	ws := cl.train(t, c, ds, plan, func(cfg *Config) {
		cfg.Addrs = addrs1
		ch := make(chan Command, 2)
		ch <- Command{ID: "add", At: 7, Table: &t2, Addrs: addrs2}
		chans = append(chans, ch)
		cfg.Commands = ch
		cfg.Ack = func(a Ack) {
			mu.Lock()
			defer mu.Unlock()
			if a.Err != nil {
				t.Errorf("ack %+v", a)
			}
			acks[a.ID]++
		}
		if cfg.Index == 2 {
			// The second change is sent while training runs, once the
			// first is applied everywhere and its blocks have arrived:
			// servers first, then workers, as the scheduler does.
			go func() {
				for {
					mu.Lock()
					n := acks["add"]
					mu.Unlock()
					if n == 3 {
						break
					}
					time.Sleep(time.Millisecond)
				}
				for settled := false; !settled; time.Sleep(time.Millisecond) {
					settled = true
					for _, s := range cl.servers {
						st, _ := s.Stats(context.Background(), &pspb.StatsRequest{})
						settled = settled && st.InTransit == 0 && st.Outgoing == 0
					}
				}
				cl.retable(t, t3, addrs3, 30)
				for _, ch := range chans {
					ch <- Command{ID: "remove", At: 30, Table: &t3, Addrs: addrs3}
				}
			}()
		}
	})
	if acks["add"] != 3 || acks["remove"] != 3 {
		t.Fatalf("acks = %v; want both changes applied by the 3 workers", acks)
	}
	st0, _ := cl.servers[0].Stats(context.Background(), &pspb.StatsRequest{})
	if len(st0.Blocks) != 0 || st0.MigratedOut == 0 {
		t.Errorf("removed server still holds %v (moved out %d)", st0.Blocks, st0.MigratedOut)
	}
	var in int64
	for _, s := range cl.servers {
		st, _ := s.Stats(context.Background(), &pspb.StatsRequest{})
		in += st.MigratedIn
		t.Logf("%s: blocks %v in %d out %d paused %.4fs", st.Name, st.Blocks, st.MigratedIn, st.MigratedOut, st.PausedSeconds)
	}
	if in == 0 {
		t.Error("no block migrated")
	}
	if _, _, err := ws[0].Evaluate(ds, -1); err != nil {
		t.Fatal(err)
	}
	c.workers = 1
	one := finalParams(t, c, ds, []int{48}, 1)
	for _, b := range cl.table.Blocks {
		var d float64
		for j := b.Offset; j < b.Offset+b.Length; j++ {
			x := float64(ws[0].Params().Dense[b.Tensor][j] - one.Dense[b.Tensor][j])
			if x < 0 {
				x = -x
			}
			d = max(d, x)
		}
		if d > 1e-4 {
			t.Logf("block %d (tensor %d) v1 server %d v2 server %d differs by %g", b.ID, b.Tensor, cl.table.ServerOf[b.ID], t2.ServerOf[b.ID], d)
		}
	}
	if d := maxDiff(t, ws[0].Params(), one); d > 1e-4 {
		t.Errorf("max |w_elastic - w_1| = %g; want ≤ 1e-4", d)
	}
}

// TestLateTableCommand: the servers switch tables at iteration 5 but the
// workers' commands arrive only after the workers have reached it. The
// servers refuse the stale pushes whole (Aborted); each worker waits for
// its command, switches and sends iteration 5 again. Nothing is lost or
// counted twice: BSP stays equal to one worker.
func TestLateTableCommand(t *testing.T) {
	ds := mnistSubset(t, 1024)
	c := clusterConfig{model: model.Config{Kind: "softmax"}, info: ds.Info(), servers: 2, workers: 2,
		blockBytes: 4 << 10, strategy: blocks.RoundRobin, sync: syncmodel.Config{Model: "bsp", Pull: "lazy"},
		optim: optim.Config{Kind: "momentum", LR: 0.05, Momentum: 0.9}, seed: 9}
	cl := startCluster(t, c)
	t2 := cl.table
	t2.Version = 2
	t2.ServerOf = make([]int, len(cl.table.ServerOf))
	for i, r := range cl.table.ServerOf {
		t2.ServerOf[i] = 1 - r // every block moves
	}
	addrs := append([]string(nil), cl.addrs...)
	cl.retable(t, t2, addrs, 5)
	var chans []chan Command
	var mu sync.Mutex
	var acks []Ack
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 64, Seed: 3, Local: []int{32, 32}, BatchesPerShard: 4}
	go func() {
		// Deliver the commands once both workers are stuck at iteration 5.
		for {
			st, _ := cl.servers[0].Stats(context.Background(), &pspb.StatsRequest{})
			if st.VTrain >= 5 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		for _, ch := range chans {
			ch <- Command{ID: "late", At: 5, Table: &t2, Addrs: addrs}
		}
	}()
	ws := cl.train(t, c, ds, plan, func(cfg *Config) {
		ch := make(chan Command, 1)
		mu.Lock()
		chans = append(chans, ch)
		mu.Unlock()
		cfg.Commands = ch
		cfg.Ack = func(a Ack) { mu.Lock(); acks = append(acks, a); mu.Unlock() }
	})
	if len(acks) != 2 {
		t.Fatalf("acks = %+v; want one per worker", acks)
	}
	for _, a := range acks {
		if a.Err != nil || a.Applied != 5 {
			t.Errorf("ack %+v; want applied at 5", a)
		}
	}
	if _, _, err := ws[0].Evaluate(ds, -1); err != nil {
		t.Fatal(err)
	}
	c.workers = 1
	one := finalParams(t, c, ds, []int{64}, 1)
	if d := maxDiff(t, ws[0].Params(), one); d > 1e-4 {
		t.Errorf("max |w_late - w_1| = %g; want ≤ 1e-4", d)
	}
}
