package allreduce

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/core/topology"
	"github.com/kelpie/kelpie/runtime/netns"
)

// shapedGroup connects one Exchange per host of a netns cluster: each
// node listens on its host's address and dials from inside its host, so
// every byte between racks crosses the cluster's shaped uplinks.
func shapedGroup(t testing.TB, c *netns.Cluster, topo topology.Topology, hook func(node int) func(context.Context, int)) []*Exchange {
	t.Helper()
	n := len(c.Hosts)
	lis := make([]net.Listener, n)
	addrs := make([]string, n)
	for i, h := range c.Hosts {
		if err := c.Do(h.Name, func() (err error) {
			lis[i], err = net.Listen("tcp", h.Addr+":0")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		addrs[i] = lis[i].Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	xs := make([]*Exchange, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, h := range c.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dial := func(ctx context.Context, addr string) (conn net.Conn, err error) {
				err = c.Do(h.Name, func() (err error) {
					var d net.Dialer
					conn, err = d.DialContext(ctx, "tcp", addr)
					return err
				})
				return conn, err
			}
			cfg := Config{Self: i, Addrs: addrs, Listener: lis[i], Group: "shaped", Dial: dial, Region: topo.RackRegion()}
			if hook != nil {
				cfg.BeforeSend = hook(i)
			}
			xs[i], errs[i] = Connect(ctx, cfg)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		t.Cleanup(xs[i].Close)
	}
	return xs
}

// shapedCluster is RAT's oversubscribed setting at small scale: 2 racks of
// 4 hosts whose links run at 4× the cross-rack uplink (4:1).
func shapedCluster(t testing.TB) (*netns.Cluster, topology.Topology) {
	c := netns.ForTest(t, netns.Config{
		Racks:    [][]string{{"w0", "w1", "w2", "w3"}, {"w4", "w5", "w6", "w7"}},
		HostLink: "800mbit",
		Uplink:   "200mbit",
	})
	topo := make(topology.Topology, len(c.Hosts))
	for i, h := range c.Hosts {
		topo[i] = topology.Place{Rack: fmt.Sprintf("r%d", h.Rack)}
	}
	return c, topo
}

// TestShapedRacks runs PS, ring and RAT over the shaped cluster: every
// node ends with the sum, and the bytes the nodes count across racks are
// the plans' (RAT a quarter of PS's). It logs each mode's time per
// exchange for reading, not checking (the machine is shared).
func TestShapedRacks(t *testing.T) {
	if testing.Short() {
		t.Skip("network-namespace test")
	}
	c, topo := shapedCluster(t)
	xs := shapedGroup(t, c, topo, nil)
	const n = 256 << 10 // 1 MiB of float32 per node
	region := topo.RackRegion()
	cross := map[string]int64{}
	for _, p := range []*reduceplan.Plan{reduceplan.PS(8, n), reduceplan.Ring(8, n, topo), reduceplan.RAT(8, n, topo, 0)} {
		vecs := make([][]float32, 8)
		for i := range vecs {
			vecs[i] = make([]float32, n)
			for j := range vecs[i] {
				vecs[i][j] = float32(i + 1)
			}
		}
		before := make([]int64, 8)
		for i, x := range xs {
			before[i] = x.CrossBytes()
		}
		t0 := time.Now()
		for i, err := range runAll(context.Background(), xs, p, vecs) {
			if err != nil {
				t.Fatalf("%s: node %d: %v", p.Kind, i, err)
			}
		}
		took := time.Since(t0)
		for i := range vecs {
			for j, v := range vecs[i] {
				if v != 36 {
					t.Fatalf("%s: node %d element %d = %v; want 36", p.Kind, i, j, v)
				}
			}
		}
		for i, x := range xs {
			cross[p.Kind] += x.CrossBytes() - before[i]
		}
		if want := p.CrossBytes(region); cross[p.Kind] != want {
			t.Errorf("%s: %d bytes crossed the racks; the plan sends %d", p.Kind, cross[p.Kind], want)
		}
		t.Logf("%s: %v per exchange of %d KiB per node, %d KiB across racks (loaded machine)", p.Kind, took, 4*n>>10, cross[p.Kind]>>10)
	}
	if 4*cross["rat"] > cross["ps"] {
		t.Errorf("rat crossed %d bytes, more than a quarter of ps's %d", cross["rat"], cross["ps"])
	}
}

// BenchmarkShapedRacks times one exchange of 1 MiB per node in each mode
// on the 4:1 shaped cluster (RAT Fig. 4's setting, 2 racks × 4): run it on
// a quiet machine, as root, with
//
//	go test -run '^$' -bench ShapedRacks ./runtime/allreduce
func BenchmarkShapedRacks(b *testing.B) {
	c, topo := shapedCluster(b)
	xs := shapedGroup(b, c, topo, nil)
	const n = 256 << 10
	for _, p := range []*reduceplan.Plan{reduceplan.PS(8, n), reduceplan.Ring(8, n, topo), reduceplan.RAT(8, n, topo, 0)} {
		b.Run(p.Kind, func(b *testing.B) {
			vecs := make([][]float32, 8)
			for i := range vecs {
				vecs[i] = make([]float32, n)
			}
			b.SetBytes(4 * n)
			for b.Loop() {
				for i, err := range runAll(context.Background(), xs, p, vecs) {
					if err != nil {
						b.Fatalf("node %d: %v", i, err)
					}
				}
			}
		})
	}
}

// TestShapedRacksPausing is RAT Fig. 5's scenario on the shaped cluster:
// at any time 2 of the 8 nodes stop sending, a new pair every period.
// Every mode still sums correctly; each mode's slowdown against no pauses
// is logged for reading (ring's long dependency chain meets more pauses
// than PS's or RAT's), not checked: the machine is shared.
func TestShapedRacksPausing(t *testing.T) {
	if testing.Short() {
		t.Skip("network-namespace test")
	}
	c, topo := shapedCluster(t)
	var pauses atomic.Pointer[Pauses]
	xs := shapedGroup(t, c, topo, func(node int) func(context.Context, int) {
		return func(ctx context.Context, step int) {
			if p := pauses.Load(); p != nil {
				p.Hook(node, time.Now)(ctx, step)
			}
		}
	})
	const n, rounds = 64 << 10, 5
	for _, p := range []*reduceplan.Plan{reduceplan.PS(8, n), reduceplan.Ring(8, n, topo), reduceplan.RAT(8, n, topo, 0)} {
		// One exchange first, unmeasured (connections warm up).
		for i, err := range runAll(context.Background(), xs, p, make2(8, n)) {
			if err != nil {
				t.Fatalf("%s: node %d: %v", p.Kind, i, err)
			}
		}
		var took [2]time.Duration
		for k, paused := range []*Pauses{nil, {Nodes: 8, K: 2, Period: 30 * time.Millisecond, On: 30 * time.Millisecond, Seed: 1, Start: time.Now()}} {
			pauses.Store(paused)
			t0 := time.Now()
			for range rounds {
				vecs := make([][]float32, 8)
				for i := range vecs {
					vecs[i] = make([]float32, n)
					vecs[i][n-1] = 1
				}
				for i, err := range runAll(context.Background(), xs, p, vecs) {
					if err != nil {
						t.Fatalf("%s: node %d: %v", p.Kind, i, err)
					}
				}
				for i := range vecs {
					if vecs[i][n-1] != 8 {
						t.Fatalf("%s: node %d ends with %v; want 8", p.Kind, i, vecs[i][n-1])
					}
				}
			}
			took[k] = time.Since(t0) / rounds
		}
		pauses.Store(nil)
		t.Logf("%s: %v per exchange, %v with 2 of 8 nodes pausing: slowdown %.2fx (loaded machine)",
			p.Kind, took[0], took[1], float64(took[1])/float64(took[0]))
	}
}

func make2(rows, cols int) [][]float32 {
	out := make([][]float32, rows)
	for i := range out {
		out[i] = make([]float32, cols)
	}
	return out
}
