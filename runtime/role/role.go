// Package role runs one node's role of a job as a process: a parameter
// server or a worker. The role registers with the job's coordinator, learns
// the spec, its index and the block table, and then serves or trains until
// the job ends. The agent (or `kelpie run`) starts these processes.
package role

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/blocks"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/job"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/server"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/runtime/straggler"
	"github.com/kelpie/kelpie/runtime/worker"
)

// Options locate a role within its job.
type Options struct {
	Coordinator string // host:port of the coordinator's gRPC service
	Job         string
	Node        string // server-0, worker-3, ...
	Listen      string // servers: address to listen on (default 127.0.0.1:0)
	Log         *slog.Logger
	// SnapshotDir is where a server keeps its periodic snapshot
	// (cluster.snapshot_interval) and, restarted, restores it from.
	SnapshotDir string
	// Relaunched says the agent restarted this role by a KILL_RESTART,
	// which models moving the node to a fresh host.
	Relaunched bool
	// Agent is the local channel to the node's agent, when one supervises
	// this process: reports and acks go out on it, actions come in. Without
	// it the role reports to the coordinator directly.
	Agent *AgentChannel
}

func (o *Options) log() *slog.Logger {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", o.Node)
	}
	return o.Log
}

func dialCoordinator(addr string) (kelpiepb.CoordinatorClient, *grpc.ClientConn, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return nil, nil, fmt.Errorf("dial coordinator %s: %v", addr, err)
	}
	return kelpiepb.NewCoordinatorClient(cc), cc, nil
}

type registered struct {
	spec *spec.Spec
	resp *kelpiepb.RegisterResponse
}

func register(ctx context.Context, c kelpiepb.CoordinatorClient, o Options, role kelpiepb.Role, addr string) (registered, error) {
	resp, err := c.Register(ctx, &kelpiepb.RegisterRequest{Job: o.Job, Node: o.Node, Role: role, Addr: addr, Pid: int32(os.Getpid())})
	if err != nil {
		return registered{}, fmt.Errorf("register %s with the coordinator: %v", o.Node, err)
	}
	s, err := spec.Parse(o.Job+".yaml", []byte(resp.SpecYaml))
	if err != nil {
		return registered{}, fmt.Errorf("the coordinator's spec does not parse: %v", err)
	}
	return registered{spec: s, resp: resp}, nil
}

// ready waits for the whole job to be ready and returns the complete block
// table's wire form and the job's start.
func ready(ctx context.Context, c kelpiepb.CoordinatorClient, o Options) (*kelpiepb.ReadyResponse, time.Time, error) {
	r, err := c.Ready(ctx, &kelpiepb.ReadyRequest{Job: o.Job, Node: o.Node})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s waiting for the job to start: %v", o.Node, err)
	}
	return r, time.Unix(0, r.StartUnixNano), nil
}

// RunServer serves one parameter server until the coordinator shuts it down
// or ctx ends.
func RunServer(ctx context.Context, o Options) error {
	log := o.log()
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("server %s: listen: %v", o.Node, err)
	}
	defer lis.Close()
	coord, cc, err := dialCoordinator(o.Coordinator)
	if err != nil {
		return err
	}
	defer cc.Close()
	reg, err := register(ctx, coord, o, kelpiepb.Role_ROLE_SERVER, lis.Addr().String())
	if err != nil {
		return err
	}
	s := reg.spec
	m, err := job.NewModel(s)
	if err != nil {
		return err
	}
	rowDim := 1
	for _, t := range m.Tensors() {
		if t.Sparse {
			rowDim = t.Cols
		}
	}
	table := job.TableFrom(reg.resp.Assignment)
	members := seq(s.Cluster.Workers)
	if len(reg.resp.Workers) > 0 {
		// Workers were added or removed since the job started.
		members = members[:0]
		for _, w := range reg.resp.Workers {
			members = append(members, int(w))
		}
	}
	ps, err := server.New(server.Config{
		Name: o.Node, Sync: job.SyncConfig(s), Optim: job.OptimConfig(s), Workers: members, RowDim: rowDim,
		Straggler: straggler.ForNode(job.Injections(s), o.Node), Seed: s.Data.Seed + int64(reg.resp.Index),
		SnapshotPath: snapshotPath(o),
	})
	if err != nil {
		return err
	}
	me := int(reg.resp.Index)
	snapPath := ps.SnapshotPath()
	if snap, err := server.LoadSnapshots(o.SnapshotDir); o.SnapshotDir != "" && err == nil {
		// A restart: come back from the last snapshot.
		if err := ps.Restore(table, me, snap); err != nil {
			return err
		}
		log.Warn("restored from snapshot", "blocks", len(table.OnServer(me)),
			"age", time.Since(time.Unix(0, snap.UnixNano)).Round(time.Millisecond))
	} else {
		init := m.InitDense(s.Data.Seed)
		ps.Install(table, me, func(b blocks.Block) []float32 { return job.InitBlock(init, b) })
	}
	gs := grpc.NewServer(psclient.ServerOptions()...)
	kelpiepb.RegisterParameterServerServer(gs, ps)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	_, start, err := ready(ctx, coord, o)
	if err != nil {
		gs.Stop()
		return err
	}
	ps.SetStart(start)
	log.Info("serving", "addr", lis.Addr().String(), "blocks", len(table.OnServer(int(reg.resp.Index))))
	if snapPath != "" && s.Cluster.SnapshotInterval > 0 {
		go func() {
			t := time.NewTicker(s.Cluster.SnapshotInterval)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					if err := ps.SaveSnapshot(snapPath); err != nil {
						log.Warn("snapshot failed", "err", err)
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	select {
	case reason := <-ps.ShutdownRequested():
		log.Info("shutdown requested", "reason", reason)
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("server %s: %v", o.Node, err)
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		gs.Stop()
	}
	return nil
}

func snapshotPath(o Options) string {
	if o.SnapshotDir == "" {
		return ""
	}
	return filepath.Join(o.SnapshotDir, o.Node+".snap")
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func progressReport(o Options, r worker.Report) *kelpiepb.ProgressReport {
	pr := &kelpiepb.ProgressReport{Job: o.Job, Node: o.Node, Iteration: r.Iteration, Samples: r.Samples,
		BatchSize: int32(r.BatchSize), Loss: r.Loss, ComputeSeconds: r.Compute.Seconds()}
	for _, b := range r.BPT {
		pr.BptSeconds = append(pr.BptSeconds, b.Seconds())
	}
	for _, b := range r.Wait {
		pr.WaitSeconds = append(pr.WaitSeconds, b.Seconds())
	}
	for _, c := range r.Comm {
		pr.Comm = append(pr.Comm, &kelpiepb.CommSample{Server: int32(c.Server), Bytes: c.Bytes, Seconds: c.Seconds})
	}
	return pr
}

// LoadData loads the job's training and test sets.
func LoadData(s *spec.Spec) (train, test data.Dataset, err error) {
	switch s.Data.Kind {
	case "synthetic-ctr":
		train, test, _ = data.SyntheticCTR(data.CTRConfig{Samples: s.Data.Samples, TestSamples: s.Data.TestSamples,
			Features: s.Data.Features, Fields: s.Data.Fields, Seed: s.Data.Seed})
		return train, test, nil
	default:
		dir, err := data.FindMNIST()
		if err != nil {
			return nil, nil, err
		}
		return data.LoadMNIST(dir)
	}
}

// RunWorker trains one worker's share of the job and, if asked, evaluates
// the final model.
func RunWorker(ctx context.Context, o Options) error {
	log := o.log()
	coord, cc, err := dialCoordinator(o.Coordinator)
	if err != nil {
		return err
	}
	defer cc.Close()
	reg, err := register(ctx, coord, o, kelpiepb.Role_ROLE_WORKER, "")
	if err != nil {
		return err
	}
	s := reg.spec
	train, test, err := LoadData(s)
	if err != nil {
		return fmt.Errorf("worker %s: %v", o.Node, err)
	}
	m, err := job.NewModel(s)
	if err != nil {
		return err
	}
	plan := job.NewPlan(s, train.Len())
	for _, sp := range reg.resp.Splits {
		local := make([]int, len(sp.Local))
		for i, b := range sp.Local {
			local[i] = int(b)
		}
		if plan, err = plan.WithSplit(sp.From, local); err != nil {
			return fmt.Errorf("worker %s: batch split from the coordinator: %v", o.Node, err)
		}
	}
	idx := int(reg.resp.Index)
	sched := straggler.ForNode(job.Injections(s), o.Node)
	if o.Relaunched {
		// A KILL_RESTART relaunches the node on a fresh host: the injected
		// contention stays behind unless it follows restarts.
		sched = sched.AfterRestart()
	}
	rd, start, err := ready(ctx, coord, o)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reports := make(chan worker.Report, 16)
	reporterDone := make(chan struct{})
	go func() {
		defer close(reporterDone)
		for r := range reports {
			pr := progressReport(o, r)
			if o.Agent != nil {
				if err := o.Agent.Send(&kelpiepb.RoleMessage{Body: &kelpiepb.RoleMessage_Report{Report: pr}}); err != nil {
					log.Warn("report to agent failed", "err", err)
				}
				continue
			}
			ack, err := coord.Progress(ctx, pr)
			if err != nil {
				log.Warn("progress report failed", "err", err)
				continue
			}
			if ack.Stop {
				log.Warn("coordinator stopped the job", "reason", ack.Reason)
				cancel()
			}
		}
	}()
	commands := make(chan worker.Command, 16)
	if reg.resp.NextAssignment != nil {
		// A table change is under way: follow it from its iteration.
		t := job.TableFrom(reg.resp.NextAssignment)
		commands <- worker.Command{ID: reg.resp.NextAction, At: reg.resp.NextAt, Table: &t, Addrs: reg.resp.NextAssignment.Servers}
	}
	var ackFn func(worker.Ack)
	if o.Agent != nil {
		go o.Agent.receive(ctx, log, o.Node, commands)
		ackFn = func(a worker.Ack) {
			m := &kelpiepb.ActionAck{ActionId: a.ID, Applied: a.Err == nil, AppliedIteration: a.Applied}
			if a.Err != nil {
				m.Error = a.Err.Error()
			}
			if err := o.Agent.Send(&kelpiepb.RoleMessage{Body: &kelpiepb.RoleMessage_Ack{Ack: m}}); err != nil {
				log.Warn("ack to agent failed", "err", err)
			}
		}
	}
	w, err := worker.New(worker.Config{
		Index: idx, Model: m, Train: train, Test: test, Plan: plan,
		Table: job.TableFrom(rd.Assignment),
		Addrs: rd.Assignment.Servers, Sync: job.SyncConfig(s).Model, Start: start,
		Straggler: sched, Seed: s.Data.Seed,
		Report: func(r worker.Report) bool {
			select {
			case reports <- r:
			case <-ctx.Done():
			}
			return ctx.Err() == nil
		},
		Commands: commands,
		Ack:      ackFn,
		Source: &worker.ShardSource{
			Fetch: func() (*kelpiepb.ShardInfo, error) {
				r, err := coord.FetchShard(ctx, &kelpiepb.FetchShardRequest{Job: o.Job, Node: o.Node})
				if err != nil {
					return nil, err
				}
				return r.Shard, nil
			},
			Return: func(ids []int64) error {
				_, err := coord.ReportShard(ctx, &kelpiepb.ReportShardRequest{Job: o.Job, Node: o.Node, Ids: ids, Release: true})
				return err
			},
			Report: func(ids []int64) error {
				r, err := coord.ReportShard(ctx, &kelpiepb.ReportShardRequest{Job: o.Job, Node: o.Node, Ids: ids})
				if err != nil {
					return err
				}
				for _, msg := range r.Refused {
					log.Warn("shard report refused", "reason", msg)
				}
				return nil
			},
		},
	})
	if err != nil {
		close(reports)
		return err
	}
	defer w.Close()
	log.Info("training", "iterations", plan.Iterations(), "batch", plan.LocalOf(0, idx))
	sum, err := w.Run(ctx)
	close(reports)
	<-reporterDone
	if err != nil {
		return err
	}
	if sum.Left {
		log.Info("removed from the job", "iterations", sum.Iterations, "samples", sum.Samples)
	}
	done, err := coord.Done(ctx, &kelpiepb.DoneRequest{Job: o.Job, Node: o.Node, Iterations: sum.Iterations, Samples: sum.Samples,
		Left: sum.Left})
	if err != nil {
		return fmt.Errorf("worker %s: done: %v", o.Node, err)
	}
	if !done.Evaluate {
		return nil
	}
	// Every worker has finished and left the barriers: the servers hold
	// the final parameters.
	loss, acc, err := w.Evaluate(test, -1)
	if err != nil {
		return err
	}
	log.Info("evaluated", "test_loss", loss, "test_accuracy", acc)
	_, err = coord.Result(ctx, &kelpiepb.ResultRequest{Job: o.Job, Node: o.Node, TestLoss: loss, TestAccuracy: acc,
		TestSamples: int64(test.Len())})
	return err
}
