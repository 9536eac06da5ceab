// Package role runs one node's role of a job as a process: a parameter
// server or a worker. The role registers with the job's coordinator, learns
// the spec, its index and the block table, and then serves or trains until
// the job ends. The agent (or `kelpie run`) starts these processes.
package role

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/diverge"
	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/replicas"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/server"
	"github.com/kelpie/kelpie/runtime/torch"
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
	// Relaunched says the agent restarted this role by a KILL_RESTART (in
	// place: the host's injections stay, the process's own are gone), or
	// the scheduler relaunched the node on another host (Host).
	Relaunched bool
	// Host is the simulated host the role runs on (cluster.spare_hosts):
	// it carries that host's injections and its own that follow it
	// (straggler.OnHost) rather than all of its own. Empty, or not one of
	// the job's simulated hosts: the node's own host.
	Host string
	// Agent is the local channel to the node's agent, which supervises
	// this process: reports, counters and acks go out on it, actions come
	// in. A worker needs it (its progress reaches the scheduler on its
	// agent's stream only); a server without it serves but reports nothing.
	Agent *AgentChannel
	// DataSecret is the job's data-plane secret: every framed connection
	// between its workers and servers proves it (framing.SharedSecret).
	// Empty: the environment's KELPIE_DATA_PLANE_SECRET, if set (how a
	// supervising agent hands it over without a command line); otherwise
	// the job has none.
	DataSecret []byte
	// RetryFor is how long calls to the coordinator are retried while the
	// scheduler is away (default DefaultRetryFor). Meanwhile a server
	// serves and a worker trains on the shard it holds, keeping the shard
	// reports it could not send for later.
	RetryFor time.Duration
	// retry overrides the retrier (tests inject a clock and a timer).
	retry *retrier
}

// schedule is the node's injections where it runs: on one of the job's
// simulated hosts (cluster.spare_hosts) that host's and the node's own
// that follow it (straggler.OnHost); otherwise its own, without the
// process's own once its agent relaunched it.
func (o *Options) schedule(s *spec.Spec) straggler.Schedule {
	all := job.Injections(s)
	if s.SimulatedHost(o.Host) {
		return straggler.OnHost(all, o.Node, o.Host, o.Relaunched)
	}
	sched := straggler.ForNode(all, o.Node)
	if o.Relaunched {
		sched = sched.AfterRestartInPlace()
	}
	return sched
}

func (o *Options) retrier() retrier {
	if o.retry != nil {
		return *o.retry
	}
	return retrier{For: o.RetryFor, Log: o.log()}
}

// dataCredentials are the credentials of the role's framed connections.
func (o *Options) dataCredentials() framing.Credentials {
	if len(o.DataSecret) == 0 {
		o.DataSecret = []byte(os.Getenv(DataSecretEnv))
	}
	if len(o.DataSecret) == 0 {
		// The job's secret from this node's credentials ($KELPIE_CERT).
		return framing.SharedSecret(identity.ProcessJobSecret())
	}
	return framing.SharedSecret(o.DataSecret)
}

// ErrNoAgent is a worker started without its agent's channel (kelpie role
// worker run by hand): start it through `kelpie agent --role worker`, which
// hands it the channel on --report-fd and --command-fd.
var ErrNoAgent = errors.New("a worker reports through its node's agent: start it with `kelpie agent --role worker` (which passes --report-fd and --command-fd), not on its own")

// DataSecretEnv is the environment variable a role reads its job's
// data-plane secret from when Options.DataSecret is empty.
const DataSecretEnv = "KELPIE_DATA_PLANE_SECRET"

func (o *Options) log() *slog.Logger {
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", o.Node)
	}
	return o.Log
}

func dialCoordinator(addr string) (coordinatorpb.CoordinatorClient, *grpc.ClientConn, error) {
	creds, err := identity.ProcessDialOption(identity.IsScheduler)
	if err != nil {
		return nil, nil, err
	}
	target, opts := replicas.Target(addr)
	cc, err := grpc.NewClient(target, append(opts, creds,
		// Back within seconds of a scheduler outage (gRPC's default
		// reconnect backoff grows to 2 minutes).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))...)
	if err != nil {
		return nil, nil, fmt.Errorf("dial coordinator %s: %v", addr, err)
	}
	return coordinatorpb.NewCoordinatorClient(cc), cc, nil
}

type registered struct {
	spec *spec.Spec
	resp *coordinatorpb.RegisterResponse
}

func register(ctx context.Context, c coordinatorpb.CoordinatorClient, o Options, role coordinatorpb.Role, addr string) (registered, error) {
	req := &coordinatorpb.RegisterRequest{Job: o.Job, Node: o.Node, Role: role, Addr: addr, Pid: int32(os.Getpid())}
	resp, err := retry(ctx, o.retrier(), "register", func(ctx context.Context) (*coordinatorpb.RegisterResponse, error) {
		return c.Register(ctx, req)
	})
	if err != nil {
		return registered{}, fmt.Errorf("register %s with the coordinator: %v", o.Node, err)
	}
	s, err := spec.ParseLimits(o.Job+".yaml", []byte(resp.SpecYaml), spec.Unlimited())
	if err != nil {
		return registered{}, fmt.Errorf("the coordinator's spec does not parse: %v", err)
	}
	return registered{spec: s, resp: resp}, nil
}

// ready waits for the whole job to be ready and returns the complete block
// table's wire form and the job's start.
func ready(ctx context.Context, c coordinatorpb.CoordinatorClient, o Options) (*coordinatorpb.ReadyResponse, time.Time, error) {
	r, err := retry(ctx, o.retrier(), "ready", func(ctx context.Context) (*coordinatorpb.ReadyResponse, error) {
		return c.Ready(ctx, &coordinatorpb.ReadyRequest{Job: o.Job, Node: o.Node})
	})
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
	reg, err := register(ctx, coord, o, coordinatorpb.Role_ROLE_SERVER, lis.Addr().String())
	if err != nil {
		return err
	}
	s := reg.spec
	ts, err := job.Tensors(s)
	if err != nil {
		return err
	}
	rowDim := 1
	for _, t := range ts {
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
		Straggler: o.schedule(s), Seed: s.Data.Seed + int64(reg.resp.Index),
		SnapshotPath: snapshotPath(o),
		Logf:         func(format string, a ...any) { log.Warn(fmt.Sprintf(format, a...)) },
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
		init, err := initialValues(s)
		if err != nil {
			return err
		}
		ps.Install(table, me, func(b blocks.Block) []float32 { return job.InitBlock(init, b) })
	}
	trust, err := identity.ProcessServerOptions(identity.ServerPolicy, func(r identity.Refusal) {
		log.Warn("refused", "method", r.Method, "from", r.Addr, "who", r.ID.String(), "code", r.Code, "reason", r.Reason, "suppressed", r.Suppressed)
		if o.Agent != nil {
			// To the scheduler's audit log and metrics, through the agent.
			if err := o.Agent.Send(&agentpb.RoleMessage{Body: &agentpb.RoleMessage_Refusal{Refusal: r.Proto()}}); err != nil {
				log.Warn("refusal to agent failed", "err", err)
			}
		}
	})
	if err != nil {
		return err
	}
	// The framed data plane shares the gRPC port; workers on this host
	// move to its Unix socket. Its connections prove the job's secret.
	creds := o.dataCredentials()
	if o.SnapshotDir != "" {
		// The Unix socket lives here: the directory must exist, and only
		// this user may reach into it.
		if err := os.MkdirAll(o.SnapshotDir, 0o700); err != nil {
			return fmt.Errorf("server %s: snapshot dir: %v", o.Node, err)
		}
	}
	framed := server.Framed{Credentials: creds, Unix: server.UnixPath(o.SnapshotDir, o.Node)}
	if s.Cluster.DataPlaneEncryption == spec.EncryptionOn {
		if framed.TLS, _, err = identity.ProcessFramedTLS(); err != nil {
			return err
		}
	}
	ep, err := ps.Listen(lis, framed)
	if err != nil {
		// Workers stay on TCP.
		log.Warn("no unix socket for the data plane", "err", err)
		framed.Unix = ""
		if ep, err = ps.Listen(lis, framed); err != nil {
			return err
		}
	}
	defer ep.Close()
	// The node plane's limits, with messages bounded by what this job's
	// model needs rather than psclient.MaxMessage: a worker of the job
	// cannot make the server buffer more than a push of the whole model.
	lim := identity.DefaultLimits()
	lim.MaxRecvBytes = messageBound(ts)
	gs := grpc.NewServer(append(append(psclient.ServerOptions(), lim.ServerOptions()...), trust...)...)
	pspb.RegisterParameterServerServer(gs, ps)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ep.GRPC()) }()
	_, start, err := ready(ctx, coord, o)
	if err != nil {
		gs.Stop()
		return err
	}
	ps.SetStart(start)
	if o.Agent != nil {
		o.Agent.setProber(&prober{sched: o.schedule(s), start: start})
	}
	stopContention, err := contention(o, o.schedule(s), start, log)
	if err != nil {
		gs.Stop()
		return err
	}
	defer stopContention()
	log.Info("serving", "addr", lis.Addr().String(), "blocks", len(table.OnServer(int(reg.resp.Index))))
	statsDone := make(chan struct{})
	defer close(statsDone)
	if o.Agent != nil {
		// The scheduler's commands (SET_SYNC, RETABLE, SHUTDOWN,
		// CHECKPOINT) come
		// through the agent too.
		go o.Agent.serveServer(ctx, log, ps, me)
	}
	if o.Agent != nil {
		// The server's counters reach the scheduler through its agent only.
		go func() {
			t := time.NewTicker(statsInterval)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					if err := sendStats(ps, o.Agent); err != nil {
						log.Warn("stats to agent failed", "err", err)
					}
				case <-statsDone:
					return
				case <-ctx.Done():
					return
				}
			}
		}()
	}
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
		if o.Agent != nil {
			// The final counters, for the job's result.
			if err := sendStats(ps, o.Agent); err != nil {
				log.Warn("final stats to agent failed", "err", err)
			}
		}
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

// statsInterval is how often a server sends its counters to its agent.
const statsInterval = 250 * time.Millisecond

// sendStats sends the server's counters to its agent.
func sendStats(ps *server.Server, a *AgentChannel) error {
	st, err := ps.Stats(context.Background(), &pspb.StatsRequest{})
	if err != nil {
		return err
	}
	return a.Send(&agentpb.RoleMessage{Body: &agentpb.RoleMessage_Stats{Stats: st}})
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

func progressReport(o Options, r worker.Report) *coordinatorpb.ProgressReport {
	pr := &coordinatorpb.ProgressReport{Job: o.Job, Node: o.Node, Iteration: r.Iteration, Samples: r.Samples,
		BatchSize: int32(r.BatchSize), Loss: r.Loss, ComputeSeconds: r.Compute.Seconds()}
	for _, b := range r.BPT {
		pr.BptSeconds = append(pr.BptSeconds, b.Seconds())
	}
	for _, b := range r.Wait {
		pr.WaitSeconds = append(pr.WaitSeconds, b.Seconds())
	}
	for _, c := range r.Comm {
		pr.Comm = append(pr.Comm, &coordinatorpb.CommSample{Server: int32(c.Server), Bytes: c.Bytes, Seconds: c.Seconds})
	}
	if sp := r.Split; sp.Iterations > 0 {
		pr.Split = &coordinatorpb.TimeSplit{Iterations: int32(sp.Iterations), ComputeS: sp.Compute.Seconds(), DataS: sp.Data.Seconds(),
			PushS: sp.Push.Seconds(), PullS: sp.Pull.Seconds(), WaitS: sp.Wait.Seconds(), OtherS: sp.Other.Seconds()}
	}
	return pr
}

// LoadData loads the job's training and test sets.
func LoadData(s *spec.Spec) (train, test data.Dataset, err error) {
	switch s.Data.Kind {
	case spec.DataTorch:
		// The script's sets, which the worker's Python child reads.
		return torch.Set{Name: "train", N: s.Data.Samples}, torch.Set{Name: "test", N: s.Data.TestSamples}, nil
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

// progressSender writes a worker's progress reports to its agent as the
// worker makes them, on the training goroutine: a report is in the agent's
// pipe when the worker goes on (worker.Finisher: the samples of a shard are
// reported before the shard is reported DONE; a report still queued in this
// process when it is killed would be lost), and no goroutine is woken per
// report.
type progressSender struct {
	o       Options
	s       *spec.Spec
	ar      *worker.Allreduce
	log     *slog.Logger
	psCross int64       // PS bytes across regions reported so far
	arTally regionTally // allreduce bytes by region pair reported so far
}

func (p *progressSender) send(r worker.Report) {
	pairs := regionPairsComm(p.s, p.o.Node, slices.Concat(r.Comm, r.PullComm))
	for _, b := range pairs {
		p.psCross += b
	}
	pr := progressReport(p.o, r)
	if p.ar != nil {
		pr.RegionBytes = p.arTally.delta(p.ar.Group.Bytes())
	} else {
		pr.RegionBytes = regionBytesPB(pairs)
	}
	if err := p.o.Agent.Send(&agentpb.RoleMessage{Body: &agentpb.RoleMessage_Report{Report: pr}}); err != nil {
		p.log.Warn("report to agent failed", "err", err)
	}
}

// RunWorker trains one worker's share of the job and, if asked, evaluates
// the final model. It needs its agent's channel (o.Agent): a worker's
// progress and acks reach the scheduler on its agent's stream only.
func RunWorker(ctx context.Context, o Options) error {
	if o.Agent == nil {
		return ErrNoAgent
	}
	log := o.log()
	coord, cc, err := dialCoordinator(o.Coordinator)
	if err != nil {
		return err
	}
	defer cc.Close()
	// An allreduce worker listens for its peers before it registers, so
	// that the coordinator can tell the others where it is. Which mode
	// the job is in is only known from the spec registration returns, so
	// every worker opens the listener and a PS worker closes it at once.
	peerLis, err := peerListener(o)
	if err != nil {
		return err
	}
	defer peerLis.Close()
	reg, err := register(ctx, coord, o, coordinatorpb.Role_ROLE_WORKER, peerLis.Addr().String())
	if err != nil {
		return err
	}
	s := reg.spec
	if !isAllreduce(s) {
		peerLis.Close()
	}
	train, test, err := LoadData(s)
	if err != nil {
		return fmt.Errorf("worker %s: %v", o.Node, err)
	}
	// The worker's agent outlives its restarts: a torch worker's Python
	// child is forked by a zygote that lives as long as the agent, so a
	// restart skips importing torch and loading the script's data.
	modelStart := time.Now()
	m, err := newModel(s, os.Getppid())
	if err != nil {
		return fmt.Errorf("worker %s: %v", o.Node, err)
	}
	if tm, ok := m.(*torch.Model); ok {
		log.Info("torch child ready", "pid", tm.Pid(), "zygote", tm.Zygote(), "in", time.Since(modelStart).Round(time.Millisecond))
	}
	if c, ok := m.(io.Closer); ok {
		// A torch model's Python child ends with the worker.
		defer c.Close()
	}
	if tm, ok := m.(*torch.Model); ok {
		// kelpie job stacks shows the child's Python frames too.
		SetExtraStacks(tm.Stacks)
		defer SetExtraStacks(nil)
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
	// A KILL_RESTART relaunches the role where it was (its agent restarts
	// it in place): the slowness of its host stays with it, the process's
	// own (cured_by_restart) is gone. With spare hosts the scheduler may
	// relaunch it on another simulated host, which leaves the old host's
	// behind (schedule).
	sched := o.schedule(s)
	rd, start, err := ready(ctx, coord, o)
	if err != nil {
		return err
	}
	o.Agent.setProber(&prober{sched: sched, start: start, dial: probeDialOptions()})
	var also []int
	if tm, ok := m.(*torch.Model); ok {
		also = append(also, tm.Pid()) // its compute is the worker's
	}
	stopContention, err := contention(o, sched, start, log, also...)
	if err != nil {
		return err
	}
	defer stopContention()
	var ar *worker.Allreduce
	if isAllreduce(s) {
		if ar, err = newAllreduce(o, s, m, idx, peerLis, coord, rd.Peers, plan, sched, start); err != nil {
			return err
		}
		defer ar.Group.Close()
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := &progressSender{o: o, s: s, ar: ar, log: log}
	commands := make(chan worker.Command, 16)
	if reg.resp.NextAssignment != nil {
		// A table change is under way: follow it from its iteration.
		t := job.TableFrom(reg.resp.NextAssignment)
		commands <- worker.Command{ID: reg.resp.NextAction, At: reg.resp.NextAt, Table: &t, Addrs: reg.resp.NextAssignment.Servers}
	}
	go o.Agent.receive(ctx, log, o.Node, commands)
	ackFn := func(a worker.Ack) {
		m := &agentpb.ActionAck{ActionId: a.ID, Applied: a.Err == nil, AppliedIteration: a.Applied}
		if a.Err != nil {
			m.Error = a.Err.Error()
		}
		if err := o.Agent.Send(&agentpb.RoleMessage{Body: &agentpb.RoleMessage_Ack{Ack: m}}); err != nil {
			log.Warn("ack to agent failed", "err", err)
		}
	}
	rt := o.retrier()
	source := &worker.ShardSource{}
	*source = worker.ShardSource{
		Fetch: func() (*coordinatorpb.ShardInfo, error) {
			// Without a shard there is nothing to train: wait for the
			// scheduler. Every attempt says what this worker holds, so
			// that a shard whose delivery was lost (an attempt recorded
			// whose answer never came) is delivered again.
			req := &coordinatorpb.FetchShardRequest{Job: o.Job, Node: o.Node, Held: source.Held(), HeldKnown: true}
			r, err := retry(ctx, rt, "fetch shard", func(ctx context.Context) (*coordinatorpb.FetchShardResponse, error) {
				return coord.FetchShard(ctx, req)
			})
			if err != nil {
				return nil, err
			}
			return r.Shard, nil
		},
		Return: func(ids []int64) error {
			_, err := retry(ctx, rt, "return shards", func(ctx context.Context) (*coordinatorpb.ReportShardResponse, error) {
				return coord.ReportShard(ctx, &coordinatorpb.ReportShardRequest{Job: o.Job, Node: o.Node, Ids: ids, Release: true})
			})
			return err
		},
		Report: func(ids []int64) error {
			r, err := coord.ReportShard(ctx, &coordinatorpb.ReportShardRequest{Job: o.Job, Node: o.Node, Ids: ids})
			if retryable(err) {
				// Kept and sent with the next report: training goes on.
				return fmt.Errorf("%w: %w", worker.ErrUnavailable, err)
			}
			if err != nil {
				return err
			}
			for _, msg := range r.Refused {
				log.Warn("shard report refused", "reason", msg)
			}
			return nil
		},
	}
	conn := psclient.Options{Transport: s.Cluster.Transport, PreferUnix: true, Credentials: o.dataCredentials()}
	if s.Cluster.DataPlaneEncryption == spec.EncryptionOn && ar == nil {
		if _, conn.TLS, err = identity.ProcessFramedTLS(); err != nil {
			return err
		}
	}
	w, err := worker.New(worker.Config{
		Index: idx, Model: m, Train: train, Test: test, Plan: plan,
		Table: job.TableFrom(rd.Assignment),
		Addrs: rd.Assignment.Servers, Sync: job.SyncConfig(s).Model, Start: start,
		Straggler: sched, Seed: s.Data.Seed,
		Conn: conn,
		Report: func(r worker.Report) bool {
			rep.send(r)
			return ctx.Err() == nil
		},
		Commands:  commands,
		Ack:       ackFn,
		Allreduce: ar,
		Source:    source,
	})
	if err != nil {
		return err
	}
	defer w.Close()
	log.Info("training", "iterations", plan.Iterations(), "batch", plan.LocalOf(0, idx))
	sum, err := runWorker(ctx, w)
	if tm, ok := m.(*torch.Model); ok {
		t := tm.Timing()
		log.Info("torch steps", "steps", t.Steps, "python", t.Python.Round(time.Millisecond), "control", t.Control.Round(time.Millisecond),
			"data", t.Data.Round(time.Millisecond), "to_child", t.ToChild.Round(time.Millisecond), "to_worker", t.ToWorker.Round(time.Millisecond),
			"preps", t.Preps, "prep", t.Prep.Round(time.Millisecond))
	}
	if d := diverge.From(err); d != nil {
		return reportDivergence(ctx, coord, o, d)
	}
	if err != nil {
		return err
	}
	if sum.Left {
		log.Info("removed from the job", "iterations", sum.Iterations, "samples", sum.Samples)
	}
	cross := rep.psCross
	var lastPairs []*coordinatorpb.RegionBytes // since the last report
	if ar != nil {
		cross = ar.Group.CrossBytes()
		lastPairs = rep.arTally.delta(ar.Group.Bytes())
	}
	// Shard reports kept while the scheduler was away go out before Done:
	// the job's DONE count must be exact.
	if _, err := retry(ctx, rt, "report shards", func(context.Context) (struct{}, error) {
		return struct{}{}, source.Flush()
	}); err != nil {
		return fmt.Errorf("worker %s: report shards: %v", o.Node, err)
	}
	done, err := retry(ctx, rt, "done", func(ctx context.Context) (*coordinatorpb.DoneResponse, error) {
		return coord.Done(ctx, &coordinatorpb.DoneRequest{Job: o.Job, Node: o.Node, Iterations: sum.Iterations, Samples: sum.Samples,
			Left: sum.Left, CrossRegionBytes: cross, RegionBytes: lastPairs})
	})
	if err != nil {
		return fmt.Errorf("worker %s: done: %v", o.Node, err)
	}
	if !done.Evaluate {
		return nil
	}
	// Every worker has finished and left the barriers: the servers hold
	// the final parameters.
	var loss, acc float64
	err = torchErrors(func() (err error) {
		loss, acc, err = w.Evaluate(test, -1)
		return err
	})
	if err != nil {
		return err
	}
	log.Info("evaluated", "test_loss", loss, "test_accuracy", acc)
	_, err = retry(ctx, rt, "result", func(ctx context.Context) (*coordinatorpb.ResultResponse, error) {
		return coord.Result(ctx, &coordinatorpb.ResultRequest{Job: o.Job, Node: o.Node, TestLoss: loss, TestAccuracy: acc,
			TestSamples: int64(test.Len())})
	})
	return err
}

// newModel builds the job's model from its spec; every role derives the same
// tensors (core/shape) as the scheduler's block table. A torch model's
// child is forked by a zygote that lives as long as process owner (0: a
// child of its own; torch.Config.Owner).
func newModel(s *spec.Spec, owner int) (model.Model, error) {
	if s.Model.Kind == spec.ModelTorch {
		return torch.FromSpec(s, os.Stderr, owner)
	}
	return model.New(model.Config{Kind: s.Model.Kind, Hidden: s.Model.Hidden}, job.DataInfo(s))
}

// initialValues is the dense tensors' initial values a server installs its
// blocks from: the built-in models' seeded initialisation, or a torch
// script's module built with the job's seed in a short-lived Python child.
func initialValues(s *spec.Spec) ([][]float32, error) {
	if s.Model.Kind == spec.ModelTorch {
		return torch.Init(s, os.Stderr)
	}
	m, err := newModel(s, 0)
	if err != nil {
		return nil, err
	}
	return m.InitDense(s.Data.Seed), nil
}

// runWorker runs w, turning a failed step of a torch model's Python child
// into the worker's error.
func runWorker(ctx context.Context, w *worker.Worker) (sum worker.Summary, err error) {
	err = torchErrors(func() (err error) {
		sum, err = w.Run(ctx)
		return err
	})
	return sum, err
}

// torchErrors runs f, returning a torch model's failure as an error: the
// model interface has no error return, so the model panics with its
// child's error ("torch: ...").
func torchErrors(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, ok := r.(string)
			if !ok || !strings.HasPrefix(msg, "torch: ") {
				panic(r)
			}
			err = errors.New(msg)
		}
	}()
	return f()
}
