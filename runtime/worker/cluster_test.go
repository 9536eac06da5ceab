package worker

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/server"
)

// cluster is an in-process job: servers on 127.0.0.1 behind real gRPC, and
// workers as goroutines with their own connections.
type cluster struct {
	table   blocks.Table
	addrs   []string
	servers []*server.Server
	stop    func()
}

type clusterConfig struct {
	model      model.Config
	info       data.Info
	servers    int
	workers    int
	blockBytes int64
	strategy   blocks.Strategy
	sync       syncmodel.Config
	optim      optim.Config
	stragglers []straggler.Injection
	seed       int64
	members    []int  // the servers' barrier at the start (nil: every worker)
	transport  string // the workers' data plane (psclient.Transport*; "" is the default, tcp)
}

func (c clusterConfig) newModel(t *testing.T) model.Model {
	t.Helper()
	m, err := model.New(c.model, c.info)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func startCluster(t *testing.T, c clusterConfig) *cluster {
	t.Helper()
	m := c.newModel(t)
	var ts []blocks.Tensor
	for _, x := range m.Tensors() {
		ts = append(ts, blocks.Tensor{Name: x.Name, Rows: x.Rows, Cols: x.Cols, Sparse: x.Sparse})
	}
	bs, err := blocks.Layout(ts, c.blockBytes, c.servers, c.strategy)
	if err != nil {
		t.Fatal(err)
	}
	table, err := blocks.Assign(bs, c.servers, c.strategy, c.seed)
	if err != nil {
		t.Fatal(err)
	}
	init := m.InitDense(c.seed)
	cl := &cluster{table: table}
	var gss []func()
	workers := make([]int, c.workers)
	for i := range workers {
		workers[i] = i
	}
	if c.members != nil {
		workers = c.members
	}
	start := time.Now()
	for r := range c.servers {
		ps, err := server.New(server.Config{Name: "server", Sync: c.sync, Optim: c.optim, Workers: workers,
			Straggler: straggler.ForNode(c.stragglers, serverName(r)), Start: start, Seed: c.seed})
		if err != nil {
			t.Fatal(err)
		}
		ps.Install(table, r, func(b blocks.Block) []float32 { return job.InitBlock(init, b) })
		addr, stop := serve(t, ps)
		gss = append(gss, stop)
		cl.addrs = append(cl.addrs, addr)
		cl.servers = append(cl.servers, ps)
	}
	cl.stop = func() {
		for _, stop := range gss {
			stop()
		}
	}
	t.Cleanup(cl.stop)
	return cl
}

// serve serves ps on a loopback port as the role does: gRPC and the framed
// transport on one port, and a Unix socket.
func serve(t *testing.T, ps *server.Server) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := ps.Listen(lis, server.Framed{Unix: server.UnixPath("", "test")})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(psclient.ServerOptions()...)
	pspb.RegisterParameterServerServer(gs, ps)
	go gs.Serve(ep.GRPC())
	var once sync.Once
	return lis.Addr().String(), func() {
		once.Do(func() {
			gs.Stop()
			ep.Close()
		})
	}
}

func serverName(server int) string { return "server-" + string(rune('0'+server)) }

// train runs the workers to the end and returns them.
func (cl *cluster) train(t *testing.T, c clusterConfig, ds data.Dataset, plan job.Plan, edit func(*Config)) []*Worker {
	t.Helper()
	return cl.trainSummaries(t, c, ds, plan, edit, make([]Summary, c.workers))
}

// trainSummaries is train that also writes each worker's summary.
func (cl *cluster) trainSummaries(t *testing.T, c clusterConfig, ds data.Dataset, plan job.Plan, edit func(*Config), sums []Summary) []*Worker {
	t.Helper()
	ws := make([]*Worker, c.workers)
	for i := range ws {
		cfg := Config{Index: i, Model: c.newModel(t), Train: ds, Plan: plan, Table: cl.table, Addrs: cl.addrs,
			Sync: c.sync.Model, Start: time.Now(), Straggler: straggler.ForNode(c.stragglers, workerName(i)), Seed: c.seed,
			Conn: psclient.Options{Transport: c.transport}}
		if edit != nil {
			edit(&cfg)
		}
		w, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		ws[i] = w
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ws))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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
	return ws
}

func workerName(i int) string { return "worker-" + string(rune('0'+i)) }
