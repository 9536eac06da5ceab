package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// ActionResult is one action taken during a job.
type ActionResult struct {
	TimeS            float64 `json:"time_s"`
	Kind             string  `json:"kind"`
	Node             string  `json:"node"`
	Reason           string  `json:"reason"`
	AppliedIteration int64   `json:"applied_iteration"`
	// Extensions.
	State         string  `json:"state"`
	Policy        string  `json:"policy"`
	ID            string  `json:"id"`
	PausedSeconds float64 `json:"paused_seconds"`
	Error         string  `json:"error,omitempty"`
}

// NodeResult is one node's summary.
type NodeResult struct {
	Name      string  `json:"name"`
	Role      string  `json:"role"`
	BPTMeanS  float64 `json:"bpt_mean_s"`
	BatchSize int     `json:"batch_size"`
	// Extensions.
	Restarts int `json:"restarts"`
}

// ServerResult is one parameter server's counters (an extension).
type ServerResult struct {
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
	Name             string         `json:"name"`
	JCTSeconds       float64        `json:"jct_seconds"`
	Iterations       int64          `json:"iterations"`
	Samples          int64          `json:"samples"`
	Throughput       float64        `json:"throughput_samples_per_s"`
	ShardsTotal      int64          `json:"shards_total"`
	ShardsDone       int64          `json:"shards_done"`
	FinalLoss        float64        `json:"final_loss"`
	Accuracy         float64        `json:"accuracy"`
	DPRs             int64          `json:"dprs"`
	PausedSeconds    float64        `json:"paused_seconds"`
	BytesCrossRegion int64          `json:"bytes_cross_region"`
	Actions          []ActionResult `json:"actions"`
	Nodes            []NodeResult   `json:"nodes"`
	// Extensions.
	TrainSeconds float64        `json:"train_seconds"`
	TestSamples  int64          `json:"test_samples"`
	Servers      []ServerResult `json:"servers"`
}

// result assembles a finished job's result from the coordinator's figures
// and the job's actions (servers' counters are added by the caller).
func (j *jobState) result() *Result {
	c := j.coord
	r := &Result{Name: j.spec.Name, Actions: []ActionResult{}}
	if ev := c.Result(); ev != nil {
		r.FinalLoss, r.Accuracy, r.TestSamples = ev.TestLoss, ev.TestAccuracy, ev.TestSamples
	}
	for _, n := range c.Nodes() {
		role := "server"
		if n.Role == kelpiepb.Role_ROLE_WORKER {
			role = "worker"
			r.Samples += n.TotalSamples()
			r.Iterations = max(r.Iterations, n.Iteration)
		}
		r.Nodes = append(r.Nodes, NodeResult{Name: n.Name, Role: role, BPTMeanS: n.MeanBPT().Seconds(),
			BatchSize: n.BatchSize, Restarts: n.Restarts})
	}
	_, _, done, total := c.ShardCounts()
	r.ShardsDone, r.ShardsTotal = int64(done), int64(total)
	train := time.Since(c.Start()).Seconds()
	r.TrainSeconds = train
	if train > 0 {
		r.Throughput = float64(r.Samples) / train
	}
	j.m.mu.Lock()
	r.PausedSeconds = j.paused
	for _, a := range j.actions {
		if a.State == "proposed" || a.State == "expired" || a.State == "rejected" {
			continue
		}
		r.Actions = append(r.Actions, ActionResult{TimeS: a.Created.AsTime().Sub(j.submitted).Seconds(), Kind: a.Kind,
			Node: a.Target, Reason: a.Reason, AppliedIteration: a.AppliedIteration, State: a.State, Policy: a.Policy, ID: a.Id,
			PausedSeconds: a.PausedSeconds, Error: a.Error})
	}
	j.m.mu.Unlock()
	return r
}

func collectServers(addrs, names []string) ([]ServerResult, error) {
	var out []ServerResult
	for i, a := range addrs {
		if a == "" {
			continue // removed
		}
		st, err := serverStats(a)
		if err != nil {
			return out, fmt.Errorf("stats of %s: %v", names[i], err)
		}
		out = append(out, ServerResult{Name: names[i], DPRs: st.Dprs, DelayedIterations: st.DelayedIterations,
			Dropped: st.Dropped, Staleness: st.Staleness, Pushes: st.Pushes, Pulls: st.Pulls,
			BytesIn: st.BytesIn, BytesOut: st.BytesOut, Blocks: len(st.Blocks)})
	}
	return out, nil
}

func shutdownServers(addrs []string) {
	for _, a := range addrs {
		if a == "" {
			continue
		}
		c, closeFn, err := dialPS(a)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = c.Shutdown(ctx, &kelpiepb.ShutdownRequest{Reason: "job finished"})
		cancel()
		closeFn()
	}
}
