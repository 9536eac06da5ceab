package manager

import (
	"fmt"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
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
	// StallSeconds is how long the workers stopped making progress around
	// the action, from their iteration timelines: the longest gap between
	// consecutive iteration completions of any worker that overlaps the
	// action (from its creation to its application), less that worker's
	// median iteration time for each iteration the gap spans
	// (timeline.Stall); a gap that overlaps several actions counts for the
	// first whose span holds its end, else the first (timeline.Stalls). Measured alike for every kind of change — a hot
	// table change and checkpoint-and-restart included, where
	// paused_seconds measures each its own way. Absent when the action was
	// not applied or no worker's timeline covers it.
	StallSeconds *float64 `json:"stall_seconds,omitempty"`
	Error        string   `json:"error,omitempty"`
	// Realized is what the action did, measured over the proposing
	// policy's window once it was applied (history.go); absent when it
	// could not be measured.
	Realized *realizedResult `json:"realized,omitempty"`
	// Host and FromHost are, for a KILL_RESTART on simulated hosts
	// (cluster.spare_hosts), the host the node was relaunched on and the
	// one it left (equal for a server relaunched in place); absent for a
	// restart in place.
	Host     string `json:"host,omitempty"`
	FromHost string `json:"from_host,omitempty"`
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

// Result is the `kelpie run --json` object (docs/design.md, Contracts).
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
	// ScriptSkipped lists the script steps that never ran because the job
	// ended before their time.
	ScriptSkipped []SkippedStep `json:"script_skipped"`
	// Diverged says where training diverged (state diverged); final_loss
	// and accuracy are then null.
	Diverged *Divergence `json:"diverged,omitempty"`
	// RegionBytes is bytes_cross_region by region pair, from the workers'
	// reports (as the console's JobView.region_bytes).
	RegionBytes []RegionBytes `json:"region_bytes"`
}

// RegionBytes is what crossed from one region to another.
type RegionBytes struct {
	From  string `json:"from_region"`
	To    string `json:"to_region"`
	Bytes int64  `json:"bytes"`
}

// result assembles a finished job's result from the coordinator's ledger
// (samples, iterations, restarts, shards), the nodes' progress (mean BPT,
// batch size) and the job's actions (servers' counters are added by the
// caller). ending is the state the job ends in.
func (j *jobState) result(ending string) *Result {
	j.closeHistory(j.m.now(), ending) // the last frame, and every action's realized effect
	c := j.coord
	r := &Result{Name: j.spec.Name, Actions: []ActionResult{}}
	if ev := c.Result(); ev != nil {
		r.FinalLoss, r.Accuracy, r.TestSamples = ev.TestLoss, ev.TestAccuracy, ev.TestSamples
	}
	ledger := c.Nodes()
	r.RegionBytes = []RegionBytes{}
	for _, b := range c.RegionBytes() {
		r.RegionBytes = append(r.RegionBytes, RegionBytes{From: b.FromRegion, To: b.ToRegion, Bytes: b.Bytes})
	}
	j.onActor(func() {
		for _, n := range ledger {
			role := "server"
			if n.Role == coordinatorpb.Role_ROLE_WORKER {
				role = "worker"
				r.Samples += n.TotalSamples()
				r.BytesCrossRegion += n.CrossRegionBytes
				r.Iterations = max(r.Iterations, n.Iteration)
			}
			nr := NodeResult{Name: n.Name, Role: role, BatchSize: n.BatchSize, Restarts: n.Restarts}
			if ns := j.nodes[n.Name]; ns != nil && ns.role == "worker" {
				p := ns.progress()
				nr.BatchSize = p.batch
				if p.bptCount > 0 {
					nr.BPTMeanS = p.bptSum / float64(p.bptCount)
				}
			}
			r.Nodes = append(r.Nodes, nr)
		}
	})
	_, _, done, total := c.ShardCounts()
	r.ShardsDone, r.ShardsTotal = int64(done), int64(total)
	now := j.m.now()
	r.TrainSeconds = now.Sub(c.Start()).Seconds()
	r.Throughput = Throughput(0, c.Start(), r.Samples, now) // over the whole run
	j.onActor(func() {
		r.ScriptSkipped = skippedSteps(scriptSteps(j.spec), j.scriptNext)
		r.PausedSeconds = j.paused
		stalls := actionStalls(j.actions, j.workerMarks())
		for i, a := range j.actions {
			if a.State == "proposed" || a.State == "expired" || a.State == "rejected" {
				continue
			}
			r.Actions = append(r.Actions, ActionResult{TimeS: a.Created.AsTime().Sub(j.submitted).Seconds(), Kind: a.Kind,
				Node: a.Target, Reason: a.Reason, AppliedIteration: a.AppliedIteration, State: a.State, Policy: a.Policy, ID: a.Id,
				PausedSeconds: a.PausedSeconds, StallSeconds: stalls[i], Error: a.Error, Realized: realizedOf(a.Realized),
				Host: j.moves[a.Id].to, FromHost: j.moves[a.Id].from})
		}
	})
	j.m.reportSkipped(j, r.ScriptSkipped)
	return r
}

// finalStatsTimeout bounds the wait for the servers' final counters.
const finalStatsTimeout = 5 * time.Second

// finalServers is the live servers' counters for the result: those their
// agents sent after since (the servers send them as they shut down), or
// after finalStatsTimeout the last ones sent.
func (m *Manager) finalServers(j *jobState, addrs, names []string, since time.Time) ([]ServerResult, error) {
	fresh := func() bool {
		all := true
		j.onActor(func() {
			for i, a := range addrs {
				if a == "" || i >= len(names) {
					continue
				}
				if n := j.nodes[names[i]]; n == nil || n.statsAt.Before(since) {
					all = false
					return
				}
			}
		})
		return all
	}
	err := m.await(j, finalStatsTimeout, j.changed, fresh)
	var out []ServerResult
	var missing []string
	j.onActor(func() {
		for i, a := range addrs {
			if a == "" || i >= len(names) {
				continue // removed
			}
			n := j.nodes[names[i]]
			if n == nil || n.stats == nil {
				missing = append(missing, names[i])
				continue
			}
			st := n.stats // never changed once received
			out = append(out, ServerResult{Name: names[i], DPRs: st.Dprs, DelayedIterations: st.DelayedIterations,
				Dropped: st.Dropped, Staleness: st.Staleness, Pushes: st.Pushes, Pulls: st.Pulls,
				BytesIn: st.BytesIn, BytesOut: st.BytesOut, Blocks: len(st.Blocks)})
		}
	})
	switch {
	case len(missing) > 0:
		return out, fmt.Errorf("no counters from %v", missing)
	case err != nil:
		return out, fmt.Errorf("final counters: %w; the last ones sent are reported", err)
	}
	return out, nil
}

// shutdownServers tells the named servers, through their agents, to stop
// serving (why: the reason they log); it does not wait for their acks.
func (m *Manager) shutdownServers(j *jobState, names []string, id, why string) {
	cmds := map[string]*agentpb.ActionCommand{}
	for _, name := range names {
		if name != "" {
			cmds[name] = &agentpb.ActionCommand{ActionId: id, Kind: serverShutdown, Target: name, Reason: why}
		}
	}
	m.tellServers(j, cmds)
}
