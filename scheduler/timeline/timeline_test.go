package timeline

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// frame makes a one-second frame ending at t0+sec with the job's
// throughput and each worker's BPT (seconds; NaN: no report).
func frame(sec int, throughput float64, bpt map[string]float64) *timelinepb.TimelineFrame {
	f := &timelinepb.TimelineFrame{Time: timestamppb.New(t0.Add(time.Duration(sec) * time.Second)), SpanSeconds: 1,
		State: "running", Iteration: int64(sec), Throughput: throughput}
	for _, name := range []string{"worker-0", "worker-1", "worker-2", "worker-3"} {
		x, ok := bpt[name]
		if !ok {
			continue
		}
		n := &timelinepb.TimelineNode{Name: name, Role: "worker"}
		if !math.IsNaN(x) {
			n.Value, n.Heat = proto.Float64(x), float32(x*100)
		}
		f.Nodes = append(f.Nodes, n)
	}
	return f
}

func TestCapacity(t *testing.T) {
	for _, c := range []struct{ nodes, budget, maxFrames, want int }{
		{4, 0, 0, DefaultMaxFrames},
		{1000, 0, 0, 1000},
		{5000, 0, 0, 200},
		{150_000, 0, 0, MinFrames},
		{10, 1000, 50, MinFrames},
		{10, 10_000, 500, 500},
	} {
		if got := Capacity(c.nodes, c.budget, c.maxFrames); got != c.want {
			t.Errorf("Capacity(%d, %d, %d) = %d, want %d", c.nodes, c.budget, c.maxFrames, got, c.want)
		}
	}
}

// TestRecorderBounded: however long the job, the recorder keeps at most its
// capacity, covers the whole run (first start to last end, spans summing to
// it), keeps the latest frames at full resolution, and never lets a hot
// bucket fade.
func TestRecorderBounded(t *testing.T) {
	const capacity = 64
	r := NewRecorder(capacity, nil)
	for s := 1; s <= 10_000; s++ {
		bpt := 0.002
		if s == 17 {
			bpt = 0.5 // one hot bucket, early: it must survive every merge
		}
		if !r.Add(frame(s, 1000, map[string]float64{"worker-0": bpt})) {
			t.Fatalf("frame %d refused", s)
		}
		if r.Len() > capacity {
			t.Fatalf("after %d frames the recorder holds %d > %d", s, r.Len(), capacity)
		}
	}
	fs := Protos(r.Frames())
	var span float64
	for _, f := range fs {
		span += f.GetSpanSeconds()
	}
	if span != 10_000 {
		t.Errorf("spans sum to %v s, want the whole run, 10000 s", span)
	}
	if got := fs[0].Start(); !got.Equal(t0) {
		t.Errorf("first frame starts at %v, want %v", got, t0)
	}
	if fs[len(fs)-1].GetSpanSeconds() != 1 {
		t.Errorf("latest frame spans %v s, want full resolution", fs[len(fs)-1].GetSpanSeconds())
	}
	var hot float32
	for _, f := range fs {
		hot = max(hot, f.GetNodes()[0].GetHeat())
	}
	if hot != 50 {
		t.Errorf("hottest cell after merges = %v, want 50 (max aggregation)", hot)
	}
	if r.Add(frame(10_000, 1, nil)) {
		t.Error("a frame ending at the last frame's time was recorded: time runs one way")
	}
}

func TestMerge(t *testing.T) {
	a := frame(1, 1000, map[string]float64{"worker-0": 0.010, "worker-1": 0.030, "worker-3": 0.5})
	a.Loss = proto.Float64(2.0)
	b := frame(2, 3000, map[string]float64{"worker-0": 0.020, "worker-1": math.NaN()})
	b.SpanSeconds = 3
	b.State = "completed"
	m := Merge(a, b)
	if m.GetSpanSeconds() != 4 || !m.GetTime().AsTime().Equal(b.GetTime().AsTime()) || m.GetState() != "completed" {
		t.Errorf("merged span %v end %v state %q, want 4 s ending at b's end, b's state", m.GetSpanSeconds(), m.GetTime().AsTime(), m.GetState())
	}
	if want := (1000*1 + 3000*3) / 4.0; m.GetThroughput() != want {
		t.Errorf("throughput %v, want the span-weighted mean %v", m.GetThroughput(), want)
	}
	if m.Loss == nil || m.GetLoss() != 2 {
		t.Errorf("loss %v, want a's 2 (b had none)", m.Loss)
	}
	byName := map[string]*timelinepb.TimelineNode{}
	for _, n := range m.GetNodes() {
		byName[n.GetName()] = n
	}
	if got, want := byName["worker-0"].GetValue(), (0.010*1+0.020*3)/4; math.Abs(got-want) > 1e-12 {
		t.Errorf("worker-0 value %v, want %v", got, want)
	}
	if got := byName["worker-1"]; got.Value == nil || got.GetValue() != 0.030 || got.GetHeat() != 3 {
		t.Errorf("worker-1 (no report in b) value %v heat %v, want a's 0.03 and heat 3", got.Value, got.GetHeat())
	}
	if got := byName["worker-3"]; got == nil || got.GetValue() != 0.5 {
		t.Errorf("worker-3, only in a, = %v, want kept with a's figures", got)
	}
	if len(a.GetNodes()) != 3 || a.GetNodes()[0].GetValue() != 0.010 {
		t.Error("Merge changed its input")
	}
}

func TestFlush(t *testing.T) {
	r := NewRecorder(MinFrames, nil)
	for s := 1; s <= 10; s++ {
		r.Add(frame(s, 1, nil))
	}
	if from, fs := r.Flush(); from != 0 || len(fs) != 10 {
		t.Fatalf("first flush = %d, %d frames; want 0, 10", from, len(fs))
	}
	r.Add(frame(11, 1, nil))
	if from, fs := r.Flush(); from != 10 || len(fs) != 1 {
		t.Fatalf("second flush = %d, %d frames; want 10, 1", from, len(fs))
	}
	for s := 12; s <= MinFrames+1; s++ {
		r.Add(frame(s, 1, nil))
	}
	from, fs := r.Flush()
	if from != 0 || len(fs) != r.Len() {
		t.Fatalf("flush after a compaction = %d, %d frames; want 0, all %d", from, len(fs), r.Len())
	}
	if from, fs := r.Flush(); from != r.Len() || len(fs) != 0 {
		t.Fatalf("idle flush = %d, %d frames; want %d, 0", from, len(fs), r.Len())
	}
	// A recorder restored over more frames than it may keep compacts them.
	big := make([]*timelinepb.TimelineFrame, 3*MinFrames)
	for i := range big {
		big[i] = frame(i+1, 1, nil)
	}
	if r := NewRecorder(MinFrames, big); r.Len() > MinFrames {
		t.Errorf("restored recorder holds %d > %d", r.Len(), MinFrames)
	}
}

func TestAt(t *testing.T) {
	fs := []*timelinepb.TimelineFrame{frame(1, 0, nil), frame(2, 0, nil), frame(4, 0, nil)}
	for _, c := range []struct {
		sec  float64
		want int
	}{{-5, 0}, {0.5, 0}, {1, 0}, {1.5, 1}, {3, 2}, {4, 2}, {9, 2}} {
		if got := timelinepb.FrameAt(fs, t0.Add(time.Duration(c.sec*float64(time.Second)))); got != c.want {
			t.Errorf("At(%vs) = %d, want %d", c.sec, got, c.want)
		}
	}
	if timelinepb.FrameAt(nil, t0) != -1 {
		t.Error("At(no frames) != -1")
	}
}

func TestFrameOf(t *testing.T) {
	v := &consolepb.JobView{State: "running", Iteration: 40, Throughput: 900, ShardsDone: 3, Loss: math.NaN(),
		Monitor: &consolepb.MonitorView{MeanBptS: 0.01, Superior: []string{"server-0"}},
		Nodes: []*consolepb.NodeView{{Name: "server-0", Role: "server", Speed: 5e6, Blocks: 3},
			{Name: "worker-0", Role: "worker", BatchSize: 16, Class: "transient"}},
		Heatmap: &consolepb.Heatmap{Rows: []*consolepb.HeatmapRow{{Node: "worker-0", Cells: []float32{1, 2.5}}}},
		Charts:  []*consolepb.Series{{Name: "bpt/worker-0", Values: []float64{0.01, 0.025}}, {Name: "speed/server-0", Values: []float64{4e6, 0}}},
	}
	f := FrameOf(v, -1, t0, time.Second)
	if f.Loss == nil || !math.IsNaN(f.GetLoss()) {
		t.Errorf("loss %v, want NaN kept (never 0)", f.Loss)
	}
	w := f.GetNodes()[1]
	if w.GetHeat() != 2.5 || w.GetValue() != 0.025 || w.GetBatchSize() != 16 || w.GetClass() != "transient" {
		t.Errorf("worker-0 = %v", w)
	}
	if s := f.GetNodes()[0]; s.Value != nil || s.GetBlocks() != 3 {
		t.Errorf("server-0 = %v, want no value (no report in the last bucket), 3 blocks", s)
	}
	if w := FrameOf(v, 0, t0, time.Second).GetNodes()[1]; w.GetHeat() != 1 || w.GetValue() != 0.01 {
		t.Errorf("column 0 of worker-0 = heat %v value %v, want 1, 0.01", w.GetHeat(), w.GetValue())
	}
	if w := FrameOf(v, 5, t0, time.Second).GetNodes()[1]; w.GetHeat() != 0 || w.Value != nil {
		t.Errorf("a column past the view's = %v, want none", w)
	}
	v.Loss = 0
	v.Diverged = nil
	if f := FrameOf(v, -1, t0, time.Second); f.Loss != nil {
		t.Errorf("a job with no loss yet recorded loss %v", f.GetLoss())
	}
}

// TestFrameOfAligned: a view whose heatmap rows and chart series are in
// its nodes' order (as the scheduler builds them) gives the frame the same
// view in any other order gives.
func TestFrameOfAligned(t *testing.T) {
	aligned := &consolepb.JobView{State: "running",
		Nodes: []*consolepb.NodeView{{Name: "server-0", Role: "server"}, {Name: "worker-0", Role: "worker"}, {Name: "worker-1", Role: "worker"}},
		Heatmap: &consolepb.Heatmap{Rows: []*consolepb.HeatmapRow{{Node: "server-0", Cells: []float32{0.5, 1}},
			{Node: "worker-0", Cells: []float32{1, 2.5}}, {Node: "worker-1", Cells: []float32{1}}}},
		Charts: []*consolepb.Series{{Name: "speed/server-0", Values: []float64{4e6, 3e6}}, {Name: "bpt/worker-0", Values: []float64{0.01, 0}},
			{Name: "bpt/worker-1", Values: []float64{0.02}}},
	}
	shuffled := proto.CloneOf(aligned)
	rows, charts := shuffled.Heatmap.Rows, shuffled.Charts
	rows[0], rows[2] = rows[2], rows[0]
	charts[0], charts[1] = charts[1], charts[0]
	shuffled.Charts = charts[:2] // worker-1's series missing
	for _, col := range []int{-1, 0, 1, 5} {
		got, want := FrameOf(aligned, col, t0, time.Second), FrameOf(shuffled, col, t0, time.Second)
		want.Nodes[2].Value = got.Nodes[2].Value // the shuffled view has no series of worker-1
		if !proto.Equal(got, want) {
			t.Errorf("column %d: aligned %v\nshuffled %v", col, got, want)
		}
	}
	if n := FrameOf(aligned, 1, t0, time.Second).Nodes; n[0].GetHeat() != 1 || n[0].GetValue() != 3e6 || n[1].Value != nil || n[2].GetHeat() != 0 {
		t.Errorf("column 1: %v; want server-0 heat 1 value 3e6, worker-0 no value (0), worker-1 nothing", n)
	}
}

// straggler is the demo of issue 16: worker-2 slowed by a fixed delay per
// iteration (28 ms whatever its batch), the others at 2 ms; throughput
// 17.4k/s before.
func straggler(from, to int, throughput, slow float64) []*timelinepb.TimelineFrame {
	var fs []*timelinepb.TimelineFrame
	for s := from; s <= to; s++ {
		fs = append(fs, frame(s, throughput, map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": slow, "worker-3": 0.002}))
	}
	return fs
}

func TestRealize(t *testing.T) {
	at := t0.Add(10 * time.Second)
	// ADJUST_BS predicted 17.4k → 21.0k/s; the batch cut leaves the BPT at
	// 28 ms and throughput falls to 12.3k/s: a miss.
	adjust := Applied{Targets: []string{"worker-2"}, At: at, Window: 5 * time.Second, Transition: time.Second, PredictedThroughput: 21_000}
	// KILL_RESTART predicted the others' 2 ms; worker-2 is gone for two
	// buckets and comes back at 2.0 ms: a hit.
	restart := Applied{Targets: []string{"worker-2"}, At: at, Window: 5 * time.Second, Transition: time.Second, PredictedBPT: 2 * time.Millisecond}
	missed := append(straggler(1, 10, 17_400, 0.028), straggler(11, 20, 12_300, 0.028)...)
	gap := straggler(11, 12, 12_000, math.NaN())
	restarted := append(append(straggler(1, 10, 17_400, 0.028), gap...), straggler(13, 22, 40_000, 0.002)...)
	for _, c := range []struct {
		name    string
		frames  []*timelinepb.TimelineFrame
		a       Applied
		final   bool
		want    bool // measured
		miss    bool
		verdict string
		before  float64 // BPT
		after   float64
	}{
		{"adjust-bs missed", missed, adjust, false, true, true, "predicted 17.4k → 21.0k/s · realized 12.3k/s ✗", 0.028, 0.028},
		{"restart hit after the node is back", restarted, restart, false, true, false, "predicted BPT 28ms → 2ms · realized 2ms ✓", 0.028, 0.002},
		{"after-window not over", missed[:14], adjust, false, false, false, "", 0, 0},
		{"job ended mid-window: what there is", missed[:14], adjust, true, true, true, "predicted 17.4k → 21.0k/s · realized 12.3k/s ✗", 0.028, 0.028},
		{"restarted node never back", append(straggler(1, 10, 17_400, 0.028), straggler(11, 20, 0, math.NaN())...), restart, true, false, false, "", 0, 0},
		{"nothing before", missed[10:], adjust, true, false, false, "", 0, 0},
		// Dispatched at 10 s, applied (the last worker's ack) at 13 s: the
		// frames between already run the change, so "before" ends at 10 s.
		{"before ends at the dispatch", append(append(straggler(1, 10, 17_400, 0.028), straggler(11, 13, 30_000, 0.004)...), straggler(14, 23, 30_000, 0.004)...),
			Applied{Targets: []string{"worker-2"}, At: at.Add(3 * time.Second), Dispatched: at, Window: 5 * time.Second, Transition: time.Second, PredictedThroughput: 21_000},
			false, true, false, "predicted 17.4k → 21.0k/s · realized 30.0k/s ✓", 0.028, 0.004},
		// A restart early in a job: no frame before it holds worker-2's
		// BPT (frames 1-10 without it); judged against the BPT the
		// policy measured (28 ms), a miss when it stays, a hit when it
		// comes down; without the policy's figure, no prediction to judge.
		{"early restart, slowness followed", append(append(straggler(1, 10, 17_400, math.NaN()), gap...), straggler(13, 22, 12_300, 0.028)...),
			func() Applied { a := restart; a.BPTBefore = 0.028; return a }(), false, true, true, "predicted BPT 28ms → 2ms · realized 28ms ✗", 0.028, 0.028},
		{"early restart, a hit", append(append(straggler(1, 10, 17_400, math.NaN()), gap...), straggler(13, 22, 40_000, 0.002)...),
			func() Applied { a := restart; a.BPTBefore = 0.028; return a }(), false, true, false, "predicted BPT 28ms → 2ms · realized 2ms ✓", 0.028, 0.002},
		{"no prediction", missed, Applied{At: at, Window: 5 * time.Second, Transition: time.Second}, false, true, false, "no prediction · throughput 17.4k → 12.3k/s", 0.0085, 0.0085},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := c.frames[len(c.frames)-1].GetTime().AsTime()
			r := Realize(CompactAll(c.frames), c.a, now, c.final)
			if (r != nil) != c.want {
				t.Fatalf("measured = %v, want %v (%v)", r != nil, c.want, r)
			}
			if r == nil {
				return
			}
			if r.GetMiss() != c.miss || r.GetVerdict() != c.verdict {
				t.Errorf("miss %v verdict %q; want %v %q", r.GetMiss(), r.GetVerdict(), c.miss, c.verdict)
			}
			if math.Abs(r.GetBptBeforeS()-c.before) > 1e-9 || math.Abs(r.GetBptAfterS()-c.after) > 1e-9 {
				t.Errorf("BPT %v → %v, want %v → %v", r.GetBptBeforeS(), r.GetBptAfterS(), c.before, c.after)
			}
			if r.GetWindowS() != 5 {
				t.Errorf("window %v s, want the policy's 5 s", r.GetWindowS())
			}
		})
	}
	r := Realize(CompactAll(missed), adjust, t0.Add(20*time.Second), false)
	if want := (12_300 - 21_000) / 21_000.0; math.Abs(r.GetPredictionError()-want) > 1e-9 {
		t.Errorf("prediction error %v, want %v", r.GetPredictionError(), want)
	}
	if !strings.HasSuffix(r.GetVerdict(), "✗") {
		t.Errorf("verdict %q does not end in ✗", r.GetVerdict())
	}
}

// TestRealizeHalfGain: the line between a hit and a miss is half of the
// predicted gain, in either direction of the prediction.
func TestRealizeHalfGain(t *testing.T) {
	at := t0.Add(5 * time.Second)
	for _, c := range []struct {
		after float64
		miss  bool
	}{{1499, true}, {1500, false}, {2500, false}, {900, true}} {
		fs := append(straggler(1, 5, 1000, 0.01), straggler(6, 12, c.after, 0.01)...)
		r := Realize(CompactAll(fs), Applied{At: at, Window: 3 * time.Second, Transition: time.Second, PredictedThroughput: 2000}, t0.Add(12*time.Second), false)
		if r == nil || r.GetMiss() != c.miss {
			t.Errorf("after %v/s (predicted 1000 → 2000): %v, want miss %v", c.after, r, c.miss)
		}
	}
}

// TestRealizeProgress: the realized throughput is what the job trained per
// second (samples_per_s) when recorded, not the Monitor's sum of v_i, which
// grows when a batch cut speeds up every worker but the one that sets a
// barrier's pace.
func TestRealizeProgress(t *testing.T) {
	fs := append(straggler(1, 5, 40_000, 0.028), straggler(6, 12, 60_000, 0.027)...)
	for _, f := range fs {
		f.SamplesPerS = 4_600 // one barrier every 28 ms, before and after
	}
	r := Realize(CompactAll(fs), Applied{Targets: []string{"worker-2"}, At: t0.Add(5 * time.Second), Window: 3 * time.Second,
		Transition: time.Second, PredictedThroughput: 39_000}, t0.Add(12*time.Second), false)
	if r == nil || r.GetThroughputBefore() != 4_600 || r.GetThroughputAfter() != 4_600 || !r.GetMiss() {
		t.Errorf("realized = %v; want 4.6k/s before and after, a miss", r)
	}
	m := Merge(fs[0], fs[1])
	if m.GetSamplesPerS() != 4_600 {
		t.Errorf("merged samples/s = %v", m.GetSamplesPerS())
	}
}

// TestRealizeByNode: an action with several targets (a batch split that
// cut two workers) records each target's own BPT before and after beside
// their mean.
func TestRealizeByNode(t *testing.T) {
	fs := append(straggler(1, 10, 17_400, 0.028), straggler(11, 20, 12_300, 0.027)...)
	r := Realize(CompactAll(fs), Applied{Targets: []string{"worker-0", "worker-2"}, At: t0.Add(10 * time.Second), Window: 5 * time.Second,
		Transition: time.Second, PredictedThroughput: 21_000}, t0.Add(20*time.Second), false)
	if r == nil {
		t.Fatal("not measured")
	}
	want := map[string][2]float64{"worker-0": {0.002, 0.002}, "worker-2": {0.028, 0.027}}
	for node, w := range want {
		if b, f := r.GetBptBeforeByNode()[node], r.GetBptAfterByNode()[node]; math.Abs(b-w[0]) > 1e-9 || math.Abs(f-w[1]) > 1e-9 {
			t.Errorf("%s: BPT %v → %v, want %v → %v", node, b, f, w[0], w[1])
		}
	}
	if math.Abs(r.GetBptBeforeS()-0.015) > 1e-9 || math.Abs(r.GetBptAfterS()-0.0145) > 1e-9 {
		t.Errorf("mean BPT %v → %v, want 0.015 → 0.0145", r.GetBptBeforeS(), r.GetBptAfterS())
	}
}

// TestRealizeAfterStartUp: an action taken a second into training, whose
// before-window reaches back into the job's start-up (no sample trained
// yet: a torch child importing torch), measures "before" from the first
// frame that trained, not from an average with the start-up's zeros. A job
// seen at 2.8k/s "before" (4 s of start-up and 1 s at 7k/s) made a batch
// split that predicted 1.1k/s, less than it had, look like a hit when the
// job went to 13.4k/s.
func TestRealizeAfterStartUp(t *testing.T) {
	fs := append(straggler(1, 4, 0, 0.01), straggler(5, 5, 7_000, 0.02)...)
	fs = append(fs, straggler(6, 12, 13_000, 0.008)...)
	for _, f := range fs[:4] {
		f.Nodes = nil // nobody has reported yet
	}
	at := t0.Add(5 * time.Second)
	if got := FirstTrained(CompactAll(fs)); !got.Equal(t0.Add(4 * time.Second)) {
		t.Errorf("first trained frame starts at %v; want t0+4s", got.Sub(t0))
	}
	if got := MeanThroughput(CompactAll(fs), Later(at.Add(-5*time.Second), FirstTrained(CompactAll(fs))), at); got != 7_000 {
		t.Errorf("throughput over the 5 s before, from the first trained frame: %v; want 7000", got)
	}
	r := Realize(CompactAll(fs), Applied{Targets: []string{"worker-2"}, At: at, Window: 5 * time.Second, Transition: time.Second,
		PredictedThroughput: 14_000}, t0.Add(12*time.Second), true)
	if r == nil || r.GetThroughputBefore() != 7_000 {
		t.Fatalf("realized = %v; want 7k/s before (the start-up left out)", r)
	}
	// A stall after training began is not start-up: it counts.
	stalled := append(straggler(1, 2, 7_000, 0.02), straggler(3, 5, 0, 0.02)...)
	if got := MeanThroughput(CompactAll(stalled), Later(at.Add(-5*time.Second), FirstTrained(CompactAll(stalled))), at); got != 7_000*2/5.0 {
		t.Errorf("throughput over a window with a stall: %v; want %v", got, 7_000*2/5.0)
	}
}
