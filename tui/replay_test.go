package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// finishedHistory is a finished job's recorded timeline, 30 one-second
// frames: worker-2 straggles at 28 ms with batch 16 from second 5; at
// second 10 AntDT-ND's ADJUST_BS cut it to 9 (no help: 27 ms); at second 20
// the KILL_RESTART brought it to 2 ms. The job's final view shows the end.
func finishedHistory() (*consolepb.JobView, []*timelinepb.TimelineFrame, []*consolepb.Action) {
	start := t0.Add(-60 * time.Second)
	at := func(s int) *timestamppb.Timestamp { return timestamppb.New(start.Add(time.Duration(s) * time.Second)) }
	worker := func(s, w int) *timelinepb.TimelineNode {
		n := &timelinepb.TimelineNode{Name: fmt.Sprintf("worker-%d", w), Role: "worker", State: "running", Iteration: int64(40 * s),
			BatchSize: 16, Accumulation: 1, BptShortS: 0.002, BptLongS: 0.002, Throughput: 8000, Class: "healthy", Heat: 1,
			Value: proto.Float64(0.002)}
		if w != 2 {
			return n
		}
		switch {
		case s >= 20:
		case s >= 10:
			n.BatchSize, n.BptShortS, n.BptLongS, n.Class, n.Heat, n.Value = 9, 0.027, 0.02, "persistent", 9, proto.Float64(0.027)
		case s >= 5:
			n.BptShortS, n.BptLongS, n.Class, n.Heat, n.Value = 0.028, 0.01, "transient", 9, proto.Float64(0.028)
		}
		if s > 20 {
			n.Restarts = 1
		}
		return n
	}
	var frames []*timelinepb.TimelineFrame
	for s := 1; s <= 30; s++ {
		f := &timelinepb.TimelineFrame{Time: at(s), SpanSeconds: 1, State: "running", Iteration: int64(40 * s), Throughput: 17400,
			SamplesPerS: 17400, Loss: proto.Float64(2.0 / float64(s)), ShardsDone: int64(s), MeanBptS: 0.009, Superior: []string{"server-0"}}
		f.Nodes = append(f.Nodes, &timelinepb.TimelineNode{Name: "server-0", Role: "server", State: "running", Speed: 4e8, Blocks: 4,
			Class: "healthy", Superior: true, Heat: 1, Value: proto.Float64(4e8)})
		for w := range 4 {
			f.Nodes = append(f.Nodes, worker(s, w))
		}
		frames = append(frames, f)
	}
	actions := []*consolepb.Action{
		{Id: "a-1", Job: "replayed", Kind: "ADJUST_BS", Policy: "antdt-nd", State: "applied", Created: at(9), Updated: at(10),
			Reason:  "worker-2 BPT 28ms ≥ 1.5 × mean 9ms over 5s (transient)",
			History: []*consolepb.ActionTransition{{State: "proposed", At: at(9)}, {State: "applied", At: at(10)}},
			Realized: &timelinepb.Realized{WindowS: 5, ThroughputBefore: 17400, ThroughputAfter: 12300, PredictedThroughput: 21000, Miss: true,
				Verdict: "predicted 17.4k → 21.0k/s · realized 12.3k/s ✗", Measured: at(16)}},
		{Id: "a-2", Job: "replayed", Kind: "KILL_RESTART", Target: "worker-2", Policy: "antdt-nd", State: "applied", Created: at(19), Updated: at(20),
			History: []*consolepb.ActionTransition{{State: "proposed", At: at(19)}, {State: "applied", At: at(20)}}},
	}
	final := &consolepb.JobView{Name: "replayed", State: "completed", Model: "mlp on mnist", Sync: "bsp", Servers: 1, Workers: 4,
		GlobalBatch: 64, Iteration: 1200, Iterations: 1200, ShardsDone: 30, ShardsTotal: 30, Accuracy: 0.95,
		Submitted: at(0), Started: at(0), Ended: at(30), Monitor: &consolepb.MonitorView{Lambda: 1.5, WindowTransientS: 5, WindowPersistentS: 20},
		Heatmap: &consolepb.Heatmap{BucketSeconds: 1, Start: at(0), Rows: []*consolepb.HeatmapRow{{Node: "worker-0", Cells: make([]float32, 30)}}},
		Actions: actions}
	final.Nodes = append(final.Nodes, &consolepb.NodeView{Name: "server-0", Role: "server", State: "done", Speed: 4e8, Blocks: 4})
	for w := range 4 {
		final.Nodes = append(final.Nodes, &consolepb.NodeView{Name: fmt.Sprintf("worker-%d", w), Role: "worker", State: "done",
			BatchSize: 16, BptShortS: 0.002, BptLongS: 0.002, Class: "healthy", Iteration: 1200})
	}
	return final, frames, actions
}

// historyAnswer answers the console's history command from frames, in
// pages of at most page frames.
func historyAnswer(frames []*timelinepb.TimelineFrame, actions []*consolepb.Action, page int) func(*consolepb.Command) *consolepb.CommandResult {
	return func(cmd *consolepb.Command) *consolepb.CommandResult {
		h := cmd.GetHistory()
		if h == nil {
			return &consolepb.CommandResult{Ok: true}
		}
		from := min(int(h.GetFrom()), len(frames))
		res := &consolepb.CommandResult{Ok: true, Job: h.GetJob(), FramesFrom: int32(from), FramesTotal: int32(len(frames)),
			Frames: frames[from:min(from+page, len(frames))]}
		if from == 0 {
			res.Actions = actions
		}
		return res
	}
}

// TestReplayFinishedJob: a finished job opens as live ones do; `[` jumps
// back through its actions to the first one (the ADJUST_BS, applied at
// 10 s), and the node table, summary and heatmap show that moment:
// worker-2 at batch 9 and 27 ms, persistent, not yet restarted. `p` goes
// back to the job as it ended.
func TestReplayFinishedJob(t *testing.T) {
	end, frames, actions := finishedHistory()
	b := &fakeBackend{answer: historyAnswer(frames, actions, 7)} // several pages
	tm := run(t, b, "viewer", false, 200, 60)
	tm.Send(client.SnapshotMsg{Scope: []string{"replayed"}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{end}}})
	waitText(t, tm, "replayed")
	press(tm, ":", "job replayed", "enter")
	waitText(t, tm, "straggler heatmap", "worker-3 ", "completed")
	press(tm, "[")
	waitText(t, tm, "⏸ replay 20s in · frame 20/30")
	press(tm, "[")
	waitText(t, tm, "⏸ replay 10s in · frame 10/30")
	press(tm, "[") // no action before the first
	waitText(t, tm, "no action before this moment")
	m := final(t, tm) // the screen at the first action: testdata/TestReplayFinishedJob.golden
	if v := m.views[viewJob].(*jobView); v.job.GetState() != "running" || nodeNamed(v.job, "worker-2").GetBatchSize() != 9 {
		t.Errorf("at the first action the job is %q with worker-2 at batch %d; want running, 9", v.job.GetState(),
			nodeNamed(v.job, "worker-2").GetBatchSize())
	}
	var histories int
	for _, c := range b.sent() {
		if c.GetHistory() != nil {
			histories++
		}
	}
	if histories != 5 { // 30 frames in pages of 7
		t.Errorf("%d history pages asked; want 5", histories)
	}
}

// TestReplayLiveAndBack: `p` pauses a live job at its present, ←/→ move
// one frame, and `p` again shows the live job.
func TestReplayLiveAndBack(t *testing.T) {
	_, frames, actions := finishedHistory()
	b := &fakeBackend{answer: historyAnswer(frames, actions, 100)}
	tm := run(t, b, "operator", false, 200, 60)
	openJob(t, tm, mnistJob())
	press(tm, "p")
	waitText(t, tm, "frame 30/30")
	press(tm, "h", "h", "h")
	waitText(t, tm, "frame 27/30")
	press(tm, "l")
	waitText(t, tm, "frame 28/30")
	press(tm, "p")
	m := final2(t, tm)
	if m.c.replay != nil || m.views[viewJob].(*jobView).job.GetName() != "mnist-mlp" ||
		strings.Contains(m.View(), "⏸ replay") {
		t.Errorf("after p the job view is still replaying")
	}
}

// TestReplayLeftEnds: a job paused and moved back, left for the jobs list
// and opened again, shows live, not the paused moment with its old
// pending actions and nodes; the same for leaving to the events view.
func TestReplayLeftEnds(t *testing.T) {
	_, frames, actions := finishedHistory()
	for _, leave := range [][]string{{"esc"}, {"E"}} {
		b := &fakeBackend{answer: historyAnswer(frames, actions, 100)}
		tm := run(t, b, "operator", false, 200, 60)
		openJob(t, tm, mnistJob())
		press(tm, "p")
		waitText(t, tm, "frame 30/30")
		press(tm, "h", "h")
		waitText(t, tm, "frame 28/30")
		press(tm, leave...)
		press(tm, ":", "job mnist-mlp", "enter")
		m := final2(t, tm)
		if m.cur != viewJob || m.c.replay != nil || strings.Contains(m.View(), "⏸") {
			t.Errorf("left with %v and back, the job view is still replaying (view %d)", leave, m.cur)
		}
	}
}

func nodeNamed(v *consolepb.JobView, name string) *consolepb.NodeView {
	for _, n := range v.GetNodes() {
		if n.GetName() == name {
			return n
		}
	}
	return nil
}

// TestActionRealizedShown: an applied action's details show what it
// predicted and what it realized side by side, and the table its outcome.
func TestActionRealizedShown(t *testing.T) {
	tm := run(t, &fakeBackend{}, "operator", false, 200, 60)
	openJob(t, tm, mnistJob())
	press(tm, "A", "j")
	waitText(t, tm, "✓ hit", "realized", "predicted BPT 310ms → 210ms · realized 200ms ✓", "over 20s windows · BPT 310ms → 200ms")
	tm.Quit()
}

// TestClusterBusyShown: a job on a busy cluster (another job's Pod Pending
// beyond the launcher's threshold) says so in its summary, with the
// cluster's reason; the same job on an idle cluster does not.
func TestClusterBusyShown(t *testing.T) {
	for _, busy := range []string{"", "job khog's pod khog-worker-0-0 pending since 03:20:22 (Unschedulable)"} {
		tm := run(t, &fakeBackend{}, "operator", false, 200, 60)
		j := mnistJob()
		j.ClusterBusy = busy
		openJob(t, tm, j)
		if err := tm.Quit(); err != nil {
			t.Fatal(err)
		}
		summary := strings.Split(tm.FinalModel(t).(*App).View(), "\n")[1]
		shown := strings.Contains(summary, "cluster busy")
		if want := "⚠ cluster busy: " + busy + " · mnist-mlp · running"; busy != "" && !strings.Contains(summary, want) {
			t.Errorf("summary %q; want it to start with %q", summary, want)
		} else if busy == "" && shown {
			t.Errorf("summary %q of a job on an idle cluster says busy", summary)
		}
	}
}
