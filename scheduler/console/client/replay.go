package client

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// SparklineLen is how many frames a replayed node's sparkline shows.
const SparklineLen = 30

// ViewAt rebuilds a job's console view as it was at t from its recorded
// timeline (frames oldest first, as the history command returns them):
// the job's and nodes' figures from the frame that covers t, the heatmap
// and charts from the columns frames up to it, the actions as they stood
// then. base is the job's view now (its name, model, spec, policies and
// actions with their histories); it is not changed. Nil without frames.
func ViewAt(base *kelpiepb.JobView, frames []*kelpiepb.TimelineFrame, t time.Time, columns int) *kelpiepb.JobView {
	i := kelpiepb.FrameAt(frames, t)
	if i < 0 {
		return nil
	}
	f := frames[i]
	v := proto.CloneOf(base)
	v.Nodes, v.Heatmap, v.Charts, v.Actions = nil, nil, nil, nil
	v.State, v.Iteration, v.Throughput, v.ShardsDone = f.GetState(), f.GetIteration(), f.GetThroughput(), f.GetShardsDone()
	v.ShardsTodo, v.ShardsDoing = 0, 0
	v.Loss = f.GetLoss()
	final := map[string]string{} // node states once the job is over
	switch ended := base.GetEnded(); {
	case ended == nil:
	case i < len(frames)-1 && f.GetTime().AsTime().Before(ended.AsTime()):
		v.Ended, v.Accuracy, v.Diverged = nil, 0, nil // not over yet at t
	case i == len(frames)-1:
		// The last frame was recorded as the job ended: what it ended as
		// is the base's.
		v.State = base.GetState()
		for _, n := range base.GetNodes() {
			final[n.GetName()] = n.GetState()
		}
	}
	if m := base.GetMonitor(); m != nil || f.GetMeanBptS() != 0 {
		v.Monitor = proto.CloneOf(m)
		if v.Monitor == nil {
			v.Monitor = &kelpiepb.MonitorView{}
		}
		v.Monitor.MeanBptS, v.Monitor.SpeedVariance, v.Monitor.Superior = f.GetMeanBptS(), f.GetSpeedVariance(), f.GetSuperior()
	}
	if columns <= 0 {
		columns = 60
	}
	first := max(i-columns+1, 0)
	cols := frames[first : i+1]
	spark := frames[max(i-SparklineLen+1, 0) : i+1]
	v.Heatmap = &kelpiepb.Heatmap{BucketSeconds: f.GetSpanSeconds(), Start: timestamppb.New(cols[0].Start())}
	for _, n := range f.GetNodes() {
		state := n.GetState()
		if s, ok := final[n.GetName()]; ok {
			state = s
		}
		nv := &kelpiepb.NodeView{Name: n.GetName(), Role: n.GetRole(), State: state, Iteration: n.GetIteration(),
			BatchSize: n.GetBatchSize(), Accumulation: n.GetAccumulation(), Restarts: n.GetRestarts(),
			BptShortS: n.GetBptShortS(), BptLongS: n.GetBptLongS(), Throughput: n.GetThroughput(), Class: n.GetClass(),
			Superior: n.GetSuperior(), Speed: n.GetSpeed(), Blocks: n.GetBlocks(), Ratio: float64(n.GetHeat()),
			Sparkline: values(spark, n.GetName())}
		v.Nodes = append(v.Nodes, nv)
		row := &kelpiepb.HeatmapRow{Node: n.GetName(), Cells: make([]float32, len(cols))}
		ser := &kelpiepb.Series{Name: "bpt/" + n.GetName(), Unit: "s", IntervalSeconds: f.GetSpanSeconds(), Values: values(cols, n.GetName())}
		if n.GetRole() == "server" {
			ser.Name, ser.Unit = "speed/"+n.GetName(), "B/s"
		}
		for c, cf := range cols {
			if cn := node(cf, n.GetName()); cn != nil {
				row.Cells[c] = cn.GetHeat()
			}
		}
		v.Heatmap.Rows = append(v.Heatmap.Rows, row)
		v.Charts = append(v.Charts, ser)
	}
	end := f.GetTime().AsTime()
	for _, a := range base.GetActions() {
		if as := actionAt(a, end); as != nil {
			v.Actions = append(v.Actions, as)
		}
	}
	return v
}

// values is a node's value in each frame, 0 where it had none.
func values(frames []*kelpiepb.TimelineFrame, name string) []float64 {
	out := make([]float64, len(frames))
	for i, f := range frames {
		if n := node(f, name); n != nil {
			out[i] = n.GetValue()
		}
	}
	return out
}

// node is the named node of a frame, or nil.
func node(f *kelpiepb.TimelineFrame, name string) *kelpiepb.TimelineNode {
	for _, n := range f.GetNodes() {
		if n.GetName() == name {
			return n
		}
	}
	return nil
}

// actionAt is an action as it stood at t: nil if it did not exist yet,
// else a copy in the state its history gives at t (and without what came
// after: its realized effect, its applied iteration, later transitions).
func actionAt(a *kelpiepb.Action, t time.Time) *kelpiepb.Action {
	if c := a.GetCreated(); c != nil && c.AsTime().After(t) {
		return nil
	}
	out := proto.CloneOf(a)
	if r := out.GetRealized(); r != nil && r.GetMeasured().AsTime().After(t) {
		out.Realized = nil
	}
	if u := a.GetUpdated(); u == nil || !u.AsTime().After(t) {
		return out // no transition after t
	}
	out.History = nil
	out.State = "proposed"
	for _, h := range a.GetHistory() {
		if h.GetAt().AsTime().After(t) {
			break
		}
		out.History = append(out.History, h)
		out.State = h.GetState()
	}
	out.Updated = nil
	if n := len(out.History); n > 0 {
		out.Updated = out.History[n-1].GetAt()
	}
	if out.State != "applied" {
		out.AppliedIteration = 0
	}
	return out
}
