package client

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
)

var r0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return r0.Add(time.Duration(sec * float64(time.Second))) }

// replayed is a finished job's timeline: 20 one-second frames; worker-1
// straggles (heat 3) from second 6 until it is restarted at 12, and its
// batch changes at 8.
func replayed() (*consolepb.JobView, []*timelinepb.TimelineFrame) {
	var frames []*timelinepb.TimelineFrame
	for s := 1; s <= 20; s++ {
		f := &timelinepb.TimelineFrame{Time: timestamppb.New(at(float64(s))), SpanSeconds: 1, State: "running",
			Iteration: int64(10 * s), Throughput: 1000, ShardsDone: int64(s), Loss: proto.Float64(2 / float64(s)),
			Superior: []string{"server-0"}}
		if s == 20 {
			f.State = "completed"
		}
		for _, w := range []string{"worker-0", "worker-1"} {
			n := &timelinepb.TimelineNode{Name: w, Role: "worker", State: "running", Iteration: int64(10 * s), BatchSize: 32,
				Heat: 1, Value: proto.Float64(0.01)}
			if w == "worker-1" {
				if s >= 6 && s < 12 {
					n.Heat, n.Value, n.Class = 3, proto.Float64(0.03), "persistent"
				}
				if s >= 8 {
					n.BatchSize = 20
				}
				if s == 12 {
					n.State, n.Value = "restarting", nil
				}
			}
			f.Nodes = append(f.Nodes, n)
		}
		frames = append(frames, f)
	}
	base := &consolepb.JobView{Name: "replay", State: "completed", Ended: timestamppb.New(at(20)), Accuracy: 0.9,
		Monitor: &consolepb.MonitorView{Lambda: 1.5, WindowTransientS: 5},
		Actions: []*consolepb.Action{{Id: "a1", Kind: "ADJUST_BS", State: "applied", Created: timestamppb.New(at(7)),
			Updated: timestamppb.New(at(8)), AppliedIteration: 80,
			History:  []*consolepb.ActionTransition{{State: "proposed", At: timestamppb.New(at(7))}, {State: "applied", At: timestamppb.New(at(8))}},
			Realized: &timelinepb.Realized{Miss: true, Measured: timestamppb.New(at(11))}},
			{Id: "a2", Kind: "KILL_RESTART", Target: "worker-1", State: "applied", Created: timestamppb.New(at(11.5)), Updated: timestamppb.New(at(12))}}}
	return base, frames
}

func TestViewAt(t *testing.T) {
	base, frames := replayed()
	keep := proto.CloneOf(base)

	v := ViewAt(base, frames, at(7.5), 5) // inside frame 8 (7..8 s)
	if v.GetState() != "running" || v.GetIteration() != 80 || v.GetEnded() != nil || v.GetAccuracy() != 0 {
		t.Errorf("at 7.5 s: state %q iteration %d ended %v accuracy %v; want running, 80, not ended, no accuracy", v.GetState(), v.GetIteration(), v.GetEnded(), v.GetAccuracy())
	}
	if math.Abs(v.GetLoss()-0.25) > 1e-12 {
		t.Errorf("loss %v, want frame 8's 0.25", v.GetLoss())
	}
	w1 := v.GetNodes()[1]
	if w1.GetBatchSize() != 20 || w1.GetClass() != "persistent" || w1.GetRatio() != 3 {
		t.Errorf("worker-1 at 7.5 s = %v", w1)
	}
	if got := len(v.GetHeatmap().GetRows()[1].GetCells()); got != 5 {
		t.Fatalf("heatmap columns %d, want 5", got)
	}
	if cells := v.GetHeatmap().GetRows()[1].GetCells(); cells[0] != 1 || cells[4] != 3 || !v.GetHeatmap().GetStart().AsTime().Equal(at(3)) {
		t.Errorf("worker-1's heatmap row %v from %v; want [1 1 3 3 3] from 3 s", cells, v.GetHeatmap().GetStart().AsTime())
	}
	if len(v.GetActions()) != 1 || v.GetActions()[0].GetState() != "applied" || v.GetActions()[0].GetRealized() != nil {
		t.Errorf("actions at 7.5 s = %v; want a1 applied, not yet measured", v.GetActions())
	}

	v = ViewAt(base, frames, at(7), 60)
	if a := v.GetActions(); len(a) != 1 || a[0].GetState() != "proposed" || a[0].GetAppliedIteration() != 0 || len(a[0].GetHistory()) != 1 {
		t.Errorf("actions at 7 s = %v; want a1 proposed", a)
	}
	v = ViewAt(base, frames, at(12), 60)
	if w1 := v.GetNodes()[1]; w1.GetState() != "restarting" || w1.GetSparkline()[len(w1.GetSparkline())-1] != 0 {
		t.Errorf("worker-1 at 12 s = %v; want restarting with no value", w1)
	}
	if a := v.GetActions(); len(a) != 2 || a[0].GetRealized() == nil {
		t.Errorf("actions at 12 s = %v; want both, a1 measured", a)
	}
	v = ViewAt(base, frames, at(99), 60)
	if v.GetState() != "completed" || v.GetAccuracy() != 0.9 || v.GetEnded() == nil {
		t.Errorf("after the end: %q accuracy %v ended %v; want the final view", v.GetState(), v.GetAccuracy(), v.GetEnded())
	}
	if ViewAt(base, nil, at(1), 60) != nil {
		t.Error("ViewAt without frames is not nil")
	}
	if !proto.Equal(base, keep) {
		t.Error("ViewAt changed its base view")
	}
}

// TestViewAtShards: a replayed view shows the queue and the iteration total
// as they were at that time ("todo 0 doing 0" beside "133/940" before
// frames held them); a frame recorded before shows what was not done as to
// do.
func TestViewAtShards(t *testing.T) {
	base, frames := replayed()
	base.ShardsTotal, base.ShardsDone, base.Iterations, base.Iteration = 20, 20, 200, 200
	for i, f := range frames {
		f.ShardsTodo, f.ShardsDoing, f.ShardsTotal, f.Iterations = int64(18-i), 2, 20, 210
	}
	v := ViewAt(base, frames, at(7.5), 5) // frame 8: 8 done
	if v.GetShardsTodo() != 11 || v.GetShardsDoing() != 2 || v.GetShardsDone() != 8 || v.GetShardsTotal() != 20 || v.GetIterations() != 210 {
		t.Errorf("at 7.5 s: shards todo %d doing %d done %d of %d, iterations %d; want 11, 2, 8 of 20 and 210 (frame 8's)",
			v.GetShardsTodo(), v.GetShardsDoing(), v.GetShardsDone(), v.GetShardsTotal(), v.GetIterations())
	}
	base, frames = replayed()
	base.ShardsTotal = 20
	v = ViewAt(base, frames, at(7.5), 5)
	if v.GetShardsTodo() != 12 || v.GetShardsDoing() != 0 {
		t.Errorf("an older frame: todo %d doing %d; want 12 not done (20 − 8), 0", v.GetShardsTodo(), v.GetShardsDoing())
	}
}
