package client

import (
	"context"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
)

// SparklineLen is how many frames a replayed node's sparkline shows.
const SparklineLen = 30

// ViewAt rebuilds a job's console view as it was at t from its recorded
// timeline (frames oldest first, as the history command returns them):
// the job's and nodes' figures from the frame that covers t, the heatmap
// and charts from the columns frames up to it, the actions as they stood
// then. base is the job's view now (its name, model, spec, policies and
// actions with their histories); it is not changed. Nil without frames.
func ViewAt(base *consolepb.JobView, frames []*timelinepb.TimelineFrame, t time.Time, columns int) *consolepb.JobView {
	i := timelinepb.FrameAt(frames, t)
	if i < 0 {
		return nil
	}
	f := frames[i]
	v := proto.CloneOf(base)
	v.Nodes, v.Heatmap, v.Charts, v.Actions = nil, nil, nil, nil
	v.State, v.Iteration, v.Throughput, v.ShardsDone = f.GetState(), f.GetIteration(), f.GetThroughput(), f.GetShardsDone()
	v.ShardsTodo, v.ShardsDoing = f.GetShardsTodo(), f.GetShardsDoing()
	if f.GetShardsTotal() == 0 && f.GetShardsTodo() == 0 && f.GetShardsDoing() == 0 {
		// A frame recorded before frames held the queue: what was not
		// done was to do or being done; it shows as to do.
		v.ShardsTodo = max(base.GetShardsTotal()-f.GetShardsDone(), 0)
	}
	if f.GetShardsTotal() > 0 {
		v.ShardsTotal = f.GetShardsTotal()
	}
	if f.GetIterations() > 0 {
		v.Iterations = f.GetIterations() // the total shown then
	}
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
			v.Monitor = &consolepb.MonitorView{}
		}
		v.Monitor.MeanBptS, v.Monitor.SpeedVariance, v.Monitor.Superior = f.GetMeanBptS(), f.GetSpeedVariance(), f.GetSuperior()
	}
	if columns <= 0 {
		columns = 60
	}
	first := max(i-columns+1, 0)
	cols := frames[first : i+1]
	spark := frames[max(i-SparklineLen+1, 0) : i+1]
	v.Heatmap = &consolepb.Heatmap{BucketSeconds: f.GetSpanSeconds(), Start: timestamppb.New(cols[0].Start())}
	for _, n := range f.GetNodes() {
		state := n.GetState()
		if s, ok := final[n.GetName()]; ok {
			state = s
		}
		nv := &consolepb.NodeView{Name: n.GetName(), Role: n.GetRole(), State: state, Iteration: n.GetIteration(),
			BatchSize: n.GetBatchSize(), Accumulation: n.GetAccumulation(), Restarts: n.GetRestarts(),
			BptShortS: n.GetBptShortS(), BptLongS: n.GetBptLongS(), Throughput: n.GetThroughput(), Class: n.GetClass(),
			Superior: n.GetSuperior(), Speed: n.GetSpeed(), Blocks: n.GetBlocks(), Ratio: float64(n.GetHeat()),
			Sparkline: values(spark, n.GetName())}
		v.Nodes = append(v.Nodes, nv)
		row := &consolepb.HeatmapRow{Node: n.GetName(), Cells: make([]float32, len(cols))}
		ser := &consolepb.Series{Name: "bpt/" + n.GetName(), Unit: "s", IntervalSeconds: f.GetSpanSeconds(), Values: values(cols, n.GetName())}
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
func values(frames []*timelinepb.TimelineFrame, name string) []float64 {
	out := make([]float64, len(frames))
	for i, f := range frames {
		if n := node(f, name); n != nil {
			out[i] = n.GetValue()
		}
	}
	return out
}

// node is the named node of a frame, or nil.
func node(f *timelinepb.TimelineFrame, name string) *timelinepb.TimelineNode {
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
func actionAt(a *consolepb.Action, t time.Time) *consolepb.Action {
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

// History is a job's whole recorded timeline with its actions and events,
// as the history command returns them page by page.
type History struct {
	Frames  []*timelinepb.TimelineFrame
	Actions []*consolepb.Action
	Events  []*consolepb.Event
}

// maxHistoryPages bounds the pages History reads (a timeline is bounded by
// the scheduler; this guards against one that keeps growing under it).
const maxHistoryPages = 10_000

// History reads a job's whole timeline: the first page with its actions and
// events, then the rest of the frames.
func (c *Client) History(ctx context.Context, job string) (*History, error) {
	return ReadHistory(ctx, c.Send, job)
}

// ReadHistory reads a job's whole timeline through send (a Client's Send,
// or anything that answers console commands).
func ReadHistory(ctx context.Context, send func(context.Context, *consolepb.Command) (*consolepb.CommandResult, error), job string) (*History, error) {
	h := &History{}
	for page := 0; page < maxHistoryPages; page++ {
		res, err := send(ctx, &consolepb.Command{Kind: &consolepb.Command_History{History: &consolepb.GetHistory{
			Job: job, From: int32(len(h.Frames))}}})
		if err != nil {
			return nil, err
		}
		if !res.GetOk() {
			return nil, fmt.Errorf("history of %s refused (%s): %s", job, codes.Code(res.GetCode()), res.GetError())
		}
		if page == 0 {
			h.Actions, h.Events = res.GetActions(), res.GetEvents()
		}
		if int(res.GetFramesFrom()) != len(h.Frames) {
			return nil, fmt.Errorf("history of %s: asked for frames from %d, got from %d", job, len(h.Frames), res.GetFramesFrom())
		}
		h.Frames = append(h.Frames, res.GetFrames()...)
		if len(res.GetFrames()) == 0 || len(h.Frames) >= int(res.GetFramesTotal()) {
			return h, nil
		}
	}
	return nil, fmt.Errorf("history of %s: more than %d pages", job, maxHistoryPages)
}

// Records is the history as one time-ordered list of records (frames at
// their end, actions when created, events when they happened), the lines of
// `kelpie job history --json`.
func (h *History) Records() []*timelinepb.HistoryRecord {
	type rec struct {
		at time.Time
		r  *timelinepb.HistoryRecord
	}
	var all []rec
	for _, f := range h.Frames {
		all = append(all, rec{f.GetTime().AsTime(), &timelinepb.HistoryRecord{Kind: &timelinepb.HistoryRecord_Frame{Frame: f}}})
	}
	for _, a := range h.Actions {
		ha := &timelinepb.HistoryAction{Time: a.GetCreated(), Id: a.GetId(), Kind: a.GetKind(), Target: a.GetTarget(),
			Policy: a.GetPolicy(), State: a.GetState(), Reason: a.GetReason(), Predicted: a.GetPredicted(), Realized: a.GetRealized()}
		for _, t := range a.GetHistory() {
			if t.GetState() == "applied" {
				ha.Applied = t.GetAt()
			}
		}
		all = append(all, rec{a.GetCreated().AsTime(), &timelinepb.HistoryRecord{Kind: &timelinepb.HistoryRecord_Action{Action: ha}}})
	}
	for _, e := range h.Events {
		all = append(all, rec{e.GetTime().AsTime(), &timelinepb.HistoryRecord{Kind: &timelinepb.HistoryRecord_Event{
			Event: &timelinepb.HistoryEvent{Time: e.GetTime(), Kind: e.GetKind(), Node: e.GetNode(), Message: e.GetMessage()}}}})
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].at.Before(all[b].at) })
	out := make([]*timelinepb.HistoryRecord, len(all))
	for i, r := range all {
		out[i] = r.r
	}
	return out
}
