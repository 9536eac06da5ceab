// Package runner runs one job to completion on a local cluster of processes:
// it starts a coordinator, launches the job's servers and workers as child
// processes (`kelpie role ...`), watches them, and assembles the result
// object of `kelpie run --json`. A role process that dies ends the run with
// an error that names it; every child is stopped before Run returns.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/coordinator"
	"github.com/kelpie/kelpie/scheduler/launch"
)

// Action is one action taken during the run.
type Action struct {
	TimeS            float64 `json:"time_s"`
	Kind             string  `json:"kind"`
	Node             string  `json:"node"`
	Reason           string  `json:"reason"`
	AppliedIteration int64   `json:"applied_iteration"`
}

// Node is one node's summary.
type Node struct {
	Name      string  `json:"name"`
	Role      string  `json:"role"`
	BPTMeanS  float64 `json:"bpt_mean_s"`
	BatchSize int     `json:"batch_size"`
}

// Server is one parameter server's counters (an extension of the result).
type Server struct {
	Name              string  `json:"name"`
	DPRs              int64   `json:"dprs"`
	DelayedIterations int64   `json:"delayed_iterations"`
	Dropped           int64   `json:"dropped"`
	Staleness         []int64 `json:"staleness_histogram"`
	Pushes            int64   `json:"pushes"`
	Pulls             int64   `json:"pulls"`
	BytesIn           int64   `json:"bytes_in"`
	BytesOut          int64   `json:"bytes_out"`
	Blocks            int     `json:"blocks"`
}

// Result is the `kelpie run --json` object (DESIGN.md, Experiments).
type Result struct {
	Name             string   `json:"name"`
	JCTSeconds       float64  `json:"jct_seconds"`
	Iterations       int64    `json:"iterations"`
	Samples          int64    `json:"samples"`
	Throughput       float64  `json:"throughput_samples_per_s"`
	ShardsTotal      int64    `json:"shards_total"`
	ShardsDone       int64    `json:"shards_done"`
	FinalLoss        float64  `json:"final_loss"`
	Accuracy         float64  `json:"accuracy"`
	DPRs             int64    `json:"dprs"`
	PausedSeconds    float64  `json:"paused_seconds"`
	BytesCrossRegion int64    `json:"bytes_cross_region"`
	Actions          []Action `json:"actions"`
	Nodes            []Node   `json:"nodes"`
	// Extensions.
	TrainSeconds float64  `json:"train_seconds"`
	TestSamples  int64    `json:"test_samples"`
	Servers      []Server `json:"servers"`
}

// Options tune a run.
type Options struct {
	Exe     string       // the kelpie binary for role processes (default: this executable)
	Log     *slog.Logger // progress messages
	RoleLog io.Writer    // the role processes' output (default stderr)
	// OnStart is called with the launched processes once they run (tests
	// use it to kill one).
	OnStart func(procs []*launch.Proc)
}

// Run runs the job of s to completion.
func Run(ctx context.Context, s *spec.Spec, o Options) (*Result, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	begin := time.Now()
	coord := coordinator.New()
	j, err := coord.AddJob(s)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("coordinator listen: %v", err)
	}
	gs := grpc.NewServer()
	kelpiepb.RegisterCoordinatorServer(gs, coord)
	go gs.Serve(lis)
	defer gs.Stop()
	addr := lis.Addr().String()
	log.Info("coordinator up", "addr", addr, "job", s.Name)

	l := &launch.Local{Exe: o.Exe, Log: o.RoleLog}
	defer l.StopAll(3 * time.Second)
	start := func(role, node string) error {
		_, err := l.Start(node, "role", role, "--coordinator", addr, "--job", s.Name, "--node", node)
		return err
	}
	for _, n := range s.ServerNames() {
		if err := start("server", n); err != nil {
			return nil, err
		}
	}
	for _, n := range s.WorkerNames() {
		if err := start("worker", n); err != nil {
			return nil, err
		}
	}
	procs := l.Procs()
	if o.OnStart != nil {
		o.OnStart(procs)
	}
	// A role that exits before the job is finished fails the job; workers
	// may exit once they are done, servers only when told.
	for _, p := range procs {
		go func() {
			<-p.Exited()
			select {
			case <-j.Finished():
				return
			default:
			}
			if p.Err() == nil && isWorker(p.Name) && workerDone(j, p.Name) {
				return
			}
			how := "exited"
			if p.Err() != nil {
				how = p.Err().Error()
			}
			j.Fail(fmt.Errorf("%s (pid %d) stopped before the job finished: %s", p.Name, p.Pid(), how))
		}()
	}
	select {
	case <-j.Finished():
	case <-j.Failed():
		return nil, j.Err()
	case <-ctx.Done():
		j.Fail(fmt.Errorf("interrupted: %v", ctx.Err()))
		return nil, j.Err()
	}
	res := assemble(j, begin)
	servers, err := collectServers(ctx, j.ServerAddrs(), s.ServerNames())
	if err != nil {
		return nil, err
	}
	res.Servers = servers
	for _, sv := range servers {
		res.DPRs += sv.DPRs
	}
	// Tell the servers to stop, then wait for every child.
	shutdownServers(j.ServerAddrs())
	for _, p := range procs {
		select {
		case <-p.Exited():
		case <-time.After(5 * time.Second):
			p.Stop(time.Second)
		}
	}
	res.JCTSeconds = time.Since(begin).Seconds()
	return res, nil
}

func isWorker(name string) bool { return len(name) > 7 && name[:7] == "worker-" }

func workerDone(j *coordinator.Job, name string) bool {
	for _, n := range j.Nodes() {
		if n.Name == name {
			return n.Done
		}
	}
	return false
}

func assemble(j *coordinator.Job, begin time.Time) *Result {
	s := j.Spec
	r := &Result{Name: s.Name, Actions: []Action{}, ShardsTotal: j.Plan.Shards()}
	if ev := j.Result(); ev != nil {
		r.FinalLoss, r.Accuracy, r.TestSamples = ev.TestLoss, ev.TestAccuracy, ev.TestSamples
	}
	minIter := int64(-1)
	for _, n := range j.Nodes() {
		role := "server"
		if n.Role == kelpiepb.Role_ROLE_WORKER {
			role = "worker"
			r.Samples += n.Samples
			r.Iterations = max(r.Iterations, n.Iteration)
			if minIter < 0 || n.Iteration < minIter {
				minIter = n.Iteration
			}
		}
		r.Nodes = append(r.Nodes, Node{Name: n.Name, Role: role, BPTMeanS: n.MeanBPT().Seconds(), BatchSize: n.BatchSize})
	}
	// A shard (M consecutive global batches) is done when every worker has
	// trained past its last iteration.
	if minIter >= 0 {
		m := int64(max(j.Plan.BatchesPerShard, 1))
		done := minIter / m
		if minIter >= j.Plan.Iterations() {
			done = r.ShardsTotal
		}
		r.ShardsDone = done
	}
	train := time.Since(j.Start()).Seconds()
	r.TrainSeconds = train
	if train > 0 {
		r.Throughput = float64(r.Samples) / train
	}
	return r
}

func collectServers(ctx context.Context, addrs, names []string) ([]Server, error) {
	var out []Server
	for i, a := range addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := kelpiepb.NewParameterServerClient(cc).Stats(cctx, &kelpiepb.StatsRequest{})
		cancel()
		cc.Close()
		if err != nil {
			return nil, fmt.Errorf("stats of %s: %v", names[i], err)
		}
		out = append(out, Server{Name: names[i], DPRs: st.Dprs, DelayedIterations: st.DelayedIterations,
			Dropped: st.Dropped, Staleness: st.Staleness, Pushes: st.Pushes, Pulls: st.Pulls,
			BytesIn: st.BytesIn, BytesOut: st.BytesOut, Blocks: len(st.Blocks)})
	}
	return out, nil
}

func shutdownServers(addrs []string) {
	for _, a := range addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = kelpiepb.NewParameterServerClient(cc).Shutdown(ctx, &kelpiepb.ShutdownRequest{Reason: "job finished"})
		cancel()
		cc.Close()
	}
}

// ErrBadSpec marks spec errors (exit code 2).
var ErrBadSpec = errors.New("bad spec")
