package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/model"
)

func serverStats(t *testing.T, cl *cluster) []*pspb.ServerStats {
	t.Helper()
	var out []*pspb.ServerStats
	for _, s := range cl.servers {
		st, err := s.Stats(context.Background(), &pspb.StatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, st)
	}
	return out
}

// TestSSPLazyFewerDPRs: with one slow worker under SSP(s=3), FluentPS's
// lazy pull buffer delays fewer pulls than the soft barrier, which answers
// a delayed pull after one V_train step and so blocks the fast workers
// again almost at once (FluentPS Fig. 3).
func TestSSPLazyFewerDPRs(t *testing.T) {
	ds := mnistSubset(t, 4096)
	slow := []straggler.Injection{{Node: "worker-3", Kind: straggler.Compute, Sleep: 4 * time.Millisecond, Intensity: 1, Probability: 1}}
	dprs := map[syncmodel.PullMode]int64{}
	for _, mode := range []syncmodel.PullMode{syncmodel.Lazy, syncmodel.SoftBarrier} {
		c := clusterConfig{model: model.Config{Kind: "softmax"}, info: ds.Info(), servers: 2, workers: 4,
			blockBytes: 16 << 10, strategy: blocks.RoundRobin,
			sync:  syncmodel.Config{Model: syncmodel.SSP, Staleness: 3, Pull: mode},
			optim: optim.Config{Kind: "sgd", LR: 0.1}, stragglers: slow, seed: 1}
		cl := startCluster(t, c)
		plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 64, Seed: 1, Local: []int{16, 16, 16, 16}, BatchesPerShard: 4}
		cl.train(t, c, ds, plan, nil)
		for _, st := range serverStats(t, cl) {
			dprs[mode] += st.Dprs
			if st.VTrain != plan.Iterations() {
				t.Errorf("%s: server V_train = %d; want %d", mode, st.VTrain, plan.Iterations())
			}
		}
		cl.stop()
	}
	t.Logf("DPRs with one slow worker, SSP s=3: lazy %d, soft barrier %d", dprs[syncmodel.Lazy], dprs[syncmodel.SoftBarrier])
	if dprs[syncmodel.Lazy] >= dprs[syncmodel.SoftBarrier] {
		t.Errorf("lazy DPRs %d ≥ soft-barrier DPRs %d", dprs[syncmodel.Lazy], dprs[syncmodel.SoftBarrier])
	}
	if dprs[syncmodel.Lazy] == 0 {
		t.Error("no DPRs at all: the straggler did not slow anyone down")
	}
}

// TestInjectedSlowness checks the lower bounds that injected slowness
// guarantees: a paused worker cannot finish before its pause ends, and a
// bandwidth-limited server cannot move bytes faster than its rate.
func TestInjectedSlowness(t *testing.T) {
	ds := mnistSubset(t, 1024)
	// The rate is low enough that the link, not the pause, sets the job's
	// length: both workers move about 1 MB each way.
	const rate = 1e6       // bytes/s
	const burst = 64 << 10 // the server's token bucket, each direction (server.linkBurst)
	inj := []straggler.Injection{
		{Node: "worker-1", Kind: straggler.Pause, Start: 0, End: 300 * time.Millisecond},
		{Node: "server-0", Kind: straggler.Bandwidth, Rate: rate},
	}
	c := clusterConfig{model: model.Config{Kind: "softmax"}, info: ds.Info(), servers: 1, workers: 2,
		blockBytes: 1 << 20, strategy: blocks.RoundRobin, sync: syncmodel.Config{Model: syncmodel.BSP, Pull: syncmodel.Lazy},
		optim: optim.Config{Kind: "sgd", LR: 0.1}, stragglers: inj, seed: 1}
	cl := startCluster(t, c)
	plan := job.Plan{N: ds.Len(), Epochs: 1, GlobalBatch: 64, Seed: 1, Local: []int{32, 32}, BatchesPerShard: 4}
	var mu sync.Mutex
	var pushed, pulled int64 // by both workers, through server-0's link
	start := time.Now()
	cl.train(t, c, ds, plan, func(cfg *Config) {
		cfg.Start = start
		cfg.Report = func(r Report) bool {
			mu.Lock()
			defer mu.Unlock()
			for _, x := range append(r.Comm, r.PullComm...) {
				pushed += x.Bytes - x.Pulled
				pulled += x.Pulled
			}
			return true
		}
	})
	el := time.Since(start)
	if el < 300*time.Millisecond {
		t.Errorf("job finished %v after start; worker-1 was paused for 300ms", el)
	}
	if pushed == 0 || pulled == 0 {
		t.Fatalf("no communication was reported (pushed %d B, pulled %d B)", pushed, pulled)
	}
	// A token bucket lets at most its burst plus rate × T through in any
	// window of length T, each direction on its own budget; everything the
	// workers reported had gone through by the time training returned.
	for _, d := range []struct {
		name  string
		bytes int64
	}{{"pushed", pushed}, {"pulled", pulled}} {
		if floor := time.Duration(float64(d.bytes-burst) / rate * float64(time.Second)); el < floor {
			t.Errorf("the workers %s %d bytes in %v; a %.0f B/s link with a %d-byte burst needs ≥ %v",
				d.name, d.bytes, el, rate, burst, floor)
		}
	}
}
