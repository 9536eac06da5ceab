package tui

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/timelinepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
	"github.com/kelpie/kelpie/themes"
	"github.com/kelpie/kelpie/tui/keys"
)

// t0 is the injected clock's time in every test.
var t0 = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(t0.Add(d)) }

// wave is a deterministic wiggle around base.
func wave(base float64, i, k int) float64 {
	return base * (1 + 0.06*math.Sin(float64(i)*0.7+float64(k)))
}

// mnistJob is a running 4-worker, 2-server job whose worker-2 is a persistent straggler since
// 40 s ago, with an ADJUST_BS proposal from AntDT-ND waiting for approval.
func mnistJob() *consolepb.JobView {
	j := &consolepb.JobView{
		Name: "mnist-mlp", State: "running", Model: "mlp on mnist", Sync: "ssp s=3 lazy",
		Submitted: ts(-195 * time.Second), Started: ts(-192 * time.Second),
		Servers: 2, Workers: 4, GlobalBatch: 256, Throughput: 1843, Iteration: 1520, Iterations: 5000,
		ShardsTodo: 60, ShardsDoing: 20, ShardsDone: 120, ShardsTotal: 200, Loss: 0.412,
		Policies: []*consolepb.PolicyView{
			{Name: "antdt-nd", Mode: "approve", Params: map[string]float64{"lambda": 1.5, "window_transient_s": 5, "window_persistent_s": 20}},
			{Name: "backup-workers", Mode: "off", Params: map[string]float64{"drop": 1}},
			{Name: "psld", Mode: "off", Params: map[string]float64{"epsilon": 0.1, "scale_threshold": 0.5, "variance_threshold": 1}},
		},
		Monitor: &consolepb.MonitorView{MeanBptS: 0.26, SpeedVariance: 0.08, Superior: []string{"server-0", "server-1"},
			WindowTransientS: 5, WindowPersistentS: 20, Lambda: 1.5},
		Heatmap: &consolepb.Heatmap{BucketSeconds: 1, Start: ts(-60 * time.Second)},
	}
	for s := 0; s < 2; s++ {
		name := fmt.Sprintf("server-%d", s)
		spark := make([]float64, 30)
		for i := range spark {
			spark[i] = wave(0.012, i, s)
		}
		j.Nodes = append(j.Nodes, &consolepb.NodeView{
			Name: name, Role: "server", Host: "127.0.0.1", State: "running", Pid: int32(4100 + s),
			BptShortS: 0.012, BptLongS: 0.012, Class: "healthy", Superior: true,
			Alpha: 2.1e-9 * float64(s+1), Beta: 0.0012, Speed: 4.8e8 / float64(s+1), Blocks: int32(12 - 2*s),
			Iteration: 1520, Sparkline: spark, Ratio: 1 + 0.05*float64(s), LastReport: ts(-time.Second),
		})
	}
	for w := 0; w < 4; w++ {
		name := fmt.Sprintf("worker-%d", w)
		base := 0.21
		class := "healthy"
		if w == 2 {
			base, class = 0.61, "persistent"
		}
		spark := make([]float64, 30)
		for i := range spark {
			spark[i] = wave(0.21, i, w)
			if w == 2 && i >= 10 {
				spark[i] = wave(base, i, w)
			}
		}
		j.Nodes = append(j.Nodes, &consolepb.NodeView{
			Name: name, Role: "worker", Host: "127.0.0.1", State: "running", Pid: int32(4200 + w),
			BatchSize: 64, Accumulation: 1, BptShortS: base * 1.01, BptLongS: base * 0.97,
			Throughput: 64 / base, Class: class, Iteration: int64(1520 - 3*w), Sparkline: spark,
			Ratio: base / 0.26, LastReport: ts(-time.Second),
		})
	}
	for _, n := range j.Nodes {
		cells := make([]float32, 60)
		for i := range cells {
			r := 1.0
			if n.Role == "worker" && n.Name != "worker-2" {
				r = 0.85
			}
			if n.Name == "worker-2" && i >= 20 {
				r = 2.35
			}
			cells[i] = float32(wave(r, i, len(n.Name)))
		}
		j.Heatmap.Rows = append(j.Heatmap.Rows, &consolepb.HeatmapRow{Node: n.Name, Cells: cells})
	}
	for _, n := range j.Nodes {
		vals := make([]float64, 60)
		for i := range vals {
			if n.Role == "worker" {
				b := 0.21
				if n.Name == "worker-2" && i >= 20 {
					b = 0.61
				}
				vals[i] = wave(b, i, int(n.Pid))
			} else {
				vals[i] = wave(n.Speed, i, int(n.Pid))
			}
		}
		if n.Role == "worker" {
			j.Charts = append(j.Charts, &consolepb.Series{Name: "bpt/" + n.Name, Unit: "s", Values: vals, IntervalSeconds: 1})
		} else {
			j.Charts = append(j.Charts, &consolepb.Series{Name: "speed/" + n.Name, Unit: "B/s", Values: vals, IntervalSeconds: 1})
		}
	}
	j.Actions = []*consolepb.Action{
		{
			Id: "a-7", Job: "mnist-mlp", Kind: "ADJUST_BS", Target: "worker-2", Policy: "antdt-nd",
			Reason:     "worker-2 BPT 0.62s ≥ λ·mean (1.5 × 0.26s) over the 5s window",
			Predicted:  "iteration time 0.62s → 0.29s (−53%)",
			BatchSizes: map[string]int32{"worker-0": 80, "worker-1": 80, "worker-2": 16, "worker-3": 80},
			State:      "proposed", Created: ts(-12 * time.Second), Updated: ts(-12 * time.Second),
			Evidence: map[string]float64{"bpt_short_s": 0.62, "mean_bpt_s": 0.26, "lambda": 1.5},
			History:  []*consolepb.ActionTransition{{State: "proposed", At: ts(-12 * time.Second), By: "antdt-nd"}},
		},
		{
			Id: "a-5", Job: "mnist-mlp", Kind: "KILL_RESTART", Target: "worker-1", Policy: "operator",
			Reason: "restarted by hand", Predicted: "worker-1 rejoins at the next iteration",
			State: "applied", Created: ts(-150 * time.Second), Updated: ts(-140 * time.Second),
			TargetIteration: 410, AppliedIteration: 411, DecidedBy: "alice",
			History: []*consolepb.ActionTransition{
				{State: "approved", At: ts(-150 * time.Second), By: "alice"},
				{State: "applied", At: ts(-140 * time.Second), By: "agent"},
			},
			Realized: &timelinepb.Realized{WindowS: 20, BptBeforeS: 0.31, BptAfterS: 0.2, ThroughputBefore: 1620, ThroughputAfter: 1843,
				PredictedBptS: 0.21, Verdict: "predicted BPT 310ms → 210ms · realized 200ms ✓", Measured: ts(-115 * time.Second)},
		},
	}
	return j
}

// summaryJobs are the jobs list without nodes, as a subscription to every job sends them.
func summaryJobs() []*consolepb.JobView {
	m := mnistJob()
	m.Nodes, m.Heatmap, m.Charts = nil, nil, nil
	return []*consolepb.JobView{
		m,
		{Name: "ctr-sparse", State: "pending", Model: "sparse-lr on synthetic-ctr", Servers: 4, Workers: 8,
			Submitted: ts(-5 * time.Second), ShardsTotal: 400, ShardsTodo: 400,
			Policies: []*consolepb.PolicyView{{Name: "psld", Mode: "auto", Params: map[string]float64{"epsilon": 0.1}}}},
		{Name: "mnist-softmax", State: "completed", Model: "softmax on mnist", Servers: 1, Workers: 2,
			Submitted: ts(-40 * time.Minute), Started: ts(-39 * time.Minute), Ended: ts(-31 * time.Minute),
			Throughput: 0, Iteration: 2000, Iterations: 2000, ShardsDone: 100, ShardsTotal: 100, Loss: 0.281, Accuracy: 0.921},
	}
}

func events() []*consolepb.Event {
	return []*consolepb.Event{
		{Time: ts(-12 * time.Second), Job: "mnist-mlp", Kind: "action", Who: "antdt-nd", Node: "worker-2", Message: "proposed a-7 ADJUST_BS: worker-2 BPT 0.62s ≥ 1.5 × mean"},
		{Time: ts(-20 * time.Second), Job: "mnist-mlp", Kind: "node", Node: "worker-2", Message: "worker-2 is a persistent straggler (2.35 × mean over 20s)"},
		{Time: ts(-95 * time.Second), Job: "mnist-mlp", Kind: "audit", Who: "bob", Allowed: false, Message: "kill mnist-mlp: bob is a viewer"},
		{Time: ts(-140 * time.Second), Job: "mnist-mlp", Kind: "action", Who: "agent", Node: "worker-1", Message: "applied a-5 KILL_RESTART at iteration 411"},
		{Time: ts(-150 * time.Second), Job: "mnist-mlp", Kind: "audit", Who: "alice", Allowed: true, Message: "trigger KILL_RESTART worker-1"},
		{Time: ts(-192 * time.Second), Job: "mnist-mlp", Kind: "job", Message: "started: 2 servers, 4 workers"},
	}
}

// bigJob is mnistJob with n workers, for the 1,000-node benchmarks; worker-637 straggles.
func bigJob(n int) *consolepb.JobView {
	j := mnistJob()
	servers := j.Nodes[:2]
	j.Nodes = append([]*consolepb.NodeView(nil), servers...)
	j.Heatmap.Rows = j.Heatmap.Rows[:2]
	j.Charts = nil
	j.Workers = int32(n)
	for w := 0; w < n; w++ {
		name := fmt.Sprintf("worker-%d", w)
		base, class := 0.21, "healthy"
		if w == 637 {
			base, class = 0.61, "persistent"
		}
		spark := make([]float64, 30)
		for i := range spark {
			spark[i] = wave(base, i, w)
		}
		j.Nodes = append(j.Nodes, &consolepb.NodeView{Name: name, Role: "worker", Host: fmt.Sprintf("10.0.%d.%d", w/250, w%250),
			State: "running", BatchSize: 64, BptShortS: base, BptLongS: base, Class: class, Sparkline: spark, Ratio: base / 0.21, Iteration: 1520})
		cells := make([]float32, 60)
		for i := range cells {
			cells[i] = float32(wave(base/0.21, i, w))
		}
		j.Heatmap.Rows = append(j.Heatmap.Rows, &consolepb.HeatmapRow{Node: name, Cells: cells})
		vals := make([]float64, 60)
		for i := range vals {
			vals[i] = wave(base, i, w)
		}
		j.Charts = append(j.Charts, &consolepb.Series{Name: "bpt/" + name, Unit: "s", Values: vals})
	}
	for s := 0; s < 2; s++ {
		vals := make([]float64, 60)
		for i := range vals {
			vals[i] = wave(4.8e8, i, s)
		}
		j.Charts = append(j.Charts, &consolepb.Series{Name: fmt.Sprintf("speed/server-%d", s), Unit: "B/s", Values: vals})
	}
	return j
}

// fakeBackend records what the console sends and answers from a script.
type fakeBackend struct {
	mu       sync.Mutex
	commands []*consolepb.Command
	scopes   [][]string
	rates    []float64
	windows  []*consolepb.ViewWindow
	answer   func(*consolepb.Command) *consolepb.CommandResult
}

func (f *fakeBackend) Send(ctx context.Context, cmd *consolepb.Command) (*consolepb.CommandResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = append(f.commands, cmd)
	if f.answer != nil {
		return f.answer(cmd), nil
	}
	return &consolepb.CommandResult{Ok: true, ActionId: "a-8"}, nil
}

func (f *fakeBackend) Subscribe(ctx context.Context, jobs []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scopes = append(f.scopes, jobs)
	return nil
}

func (f *fakeBackend) SetRate(ctx context.Context, hz float64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rates = append(f.rates, hz)
	return nil
}

func (f *fakeBackend) SetWindow(ctx context.Context, w *consolepb.ViewWindow) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.windows = append(f.windows, w)
	return nil
}

func (f *fakeBackend) lastWindow() *consolepb.ViewWindow {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.windows) == 0 {
		return nil
	}
	return f.windows[len(f.windows)-1]
}

func (f *fakeBackend) sent() []*consolepb.Command {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*consolepb.Command(nil), f.commands...)
}

// testApp is the console as the tests drive it: dark theme, default keys, the clock at t0.
func testApp(b Backend, readOnly bool) *App {
	th, _ := themes.Get("dark")
	return newApp(config{theme: th, keys: keys.Default(), now: func() time.Time { return t0 }, backend: b,
		readOnly: readOnly, addr: "127.0.0.1:7080", refreshHz: 20})
}

// feed is what the client would deliver after connecting: status, welcome and a snapshot.
func feed(role string, scope []string, jobs []*consolepb.JobView) []any {
	return []any{
		client.StatusMsg{State: client.Connected, Addr: "127.0.0.1:7080"},
		client.WelcomeMsg{Welcome: &consolepb.Welcome{ApiVersion: "kelpie.v1", User: "alice", Role: role}},
		client.SnapshotMsg{Scope: scope, Snapshot: &consolepb.Snapshot{Jobs: jobs, Events: events()}},
	}
}

// ratJob is a running RAT job on 2 racks × 4 workers after worker-5 was
// removed: its exchange is the 7 members' (the region bytes are what
// TestExchangeModesSameAccuracy measured for RAT on 2 racks × 4).
func ratJob() *consolepb.JobView {
	topo := ""
	for w := range 8 {
		topo += fmt.Sprintf("    worker-%d: {rack: r%d}\n", w, w/4)
	}
	j := &consolepb.JobView{
		Name: "mnist-rat", State: "running", Model: "mlp on mnist", Sync: "bsp",
		Submitted: ts(-95 * time.Second), Started: ts(-92 * time.Second),
		Workers: 7, GlobalBatch: 600, Throughput: 9120, Iteration: 120, Iterations: 200, Loss: 0.31,
		SpecYaml: "name: mnist-rat\nmodel: {kind: mlp, hidden: [32]}\ntrain: {global_batch: 600}\ncluster:\n  workers: 8\n  exchange: rat\n  topology:\n" + topo,
		RegionBytes: []*coordinatorpb.RegionBytes{
			{FromRegion: "/r0", ToRegion: "/r1", Bytes: 20360864},
			{FromRegion: "/r1", ToRegion: "/r0", Bytes: 20360864},
		},
		Heatmap:  &consolepb.Heatmap{BucketSeconds: 1, Start: ts(-60 * time.Second)},
		Exchange: ratExchange(),
	}
	for w := range 8 {
		n := &consolepb.NodeView{Name: fmt.Sprintf("worker-%d", w), Role: "worker", Host: fmt.Sprintf("r%d-h%d", w/4, w%4), State: "running",
			Pid: int32(5200 + w), BatchSize: 86, Accumulation: 1, BptShortS: 0.066, BptLongS: 0.065, Throughput: 1300,
			Class: "healthy", Iteration: 120, Ratio: 1, LastReport: ts(-time.Second)}
		if w == 5 {
			n.State, n.BatchSize, n.Iteration = "stopped", 0, 61
		}
		j.Nodes = append(j.Nodes, n)
	}
	return j
}

// ratExchange is the exchange the scheduler plans for ratJob's 7 members
// (the trees TestExchangeViewAfterRemoveWorker expects of reduceplan.RAT).
func ratExchange() *consolepb.ExchangeTopology {
	w := func(ids ...int) []string {
		var out []string
		for _, i := range ids {
			out = append(out, fmt.Sprintf("worker-%d", i))
		}
		return out
	}
	agg := func(a int, level string, ms ...int) *consolepb.ExchangeAggregation {
		return &consolepb.ExchangeAggregation{Aggregator: w(a)[0], Level: level, Members: w(ms...)}
	}
	// Each tree: root r adds its rack's others and the other rack's
	// aggregator o, which adds its own rack's others.
	trees := []struct{ r, o int }{{0, 4}, {1, 6}, {2, 7}, {3, 4}, {4, 0}, {6, 1}, {7, 2}}
	rack := func(x int) []int {
		if x < 4 {
			return []int{0, 1, 2, 3}
		}
		return []int{4, 6, 7}
	}
	others := func(x int) []int {
		var out []int
		for _, y := range rack(x) {
			if y != x {
				out = append(out, y)
			}
		}
		return out
	}
	ex := &consolepb.ExchangeTopology{Mode: "rat", Iteration: 120, TreesTotal: 7, Racks: []*consolepb.ExchangeRegion{
		{Region: "/r0", Members: w(0, 1, 2, 3)}, {Region: "/r1", Members: w(4, 6, 7)}}}
	for c, t := range trees {
		ex.Trees = append(ex.Trees, &consolepb.ExchangeTree{Chunk: int32(c), Root: w(t.r)[0], Aggregations: []*consolepb.ExchangeAggregation{
			agg(t.r, "rack", others(t.r)...), agg(t.r, "pod", t.o), agg(t.o, "rack", others(t.o)...)}})
	}
	return ex
}
