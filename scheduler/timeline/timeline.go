// Package timeline records a job's run as a bounded sequence of frames, one
// per heatmap bucket, and judges applied actions by what they did.
//
// A Recorder takes the job's console view once per bucket (FrameOf) and
// keeps at most a bound of frames. When it is full it merges the older half
// pairwise (Merge), so recent time stays at full resolution and older time
// gets coarser: a job of any length costs a bounded number of frames, and
// its whole run stays covered. What the Recorder changed since the last
// Flush is what the store must write (Flush).
//
// Realize measures an applied action's effect from the frames: the targeted
// nodes' BPT and the job's throughput over the proposing policy's window
// before the action and over the same window after it, the transition
// skipped; an action that delivered less than half of its predicted gain is
// a miss.
//
// The package is pure: no I/O, time is a value.
package timeline

import (
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
)

// Bounds of a recorder.
const (
	// DefaultBudget is how many node samples (frames × nodes) a job's
	// timeline keeps by default: at most BytesPerNodeSample × 1,000,000,
	// some 85 MB, for a job of up to DefaultBudget/MinFrames (15,625)
	// nodes; a larger job keeps MinFrames frames, 64 × nodes samples
	// (1.28 million, some 110 MB, at 20,000 nodes).
	DefaultBudget = 1_000_000
	// BytesPerNodeSample bounds the heap a recorder holds per node sample
	// (an 80-byte row; the names and roles are shared by the frames of
	// the same nodes): measured by TestBytesPerNodeSample. Kept as
	// TimelineNode messages they took some 207.
	BytesPerNodeSample = 88
	// DefaultMaxFrames bounds the frames of a small job (two hours of
	// one-second buckets before the oldest are merged).
	DefaultMaxFrames = 7200
	// MinFrames is the least a recorder keeps, however many nodes.
	MinFrames = 64
)

// Capacity is the number of frames a recorder keeps for a job of nodes
// nodes under budget node samples, at most maxFrames and at least
// MinFrames. Zero arguments take the defaults.
func Capacity(nodes, budget, maxFrames int) int {
	if budget <= 0 {
		budget = DefaultBudget
	}
	if maxFrames <= 0 {
		maxFrames = DefaultMaxFrames
	}
	c := maxFrames
	if nodes > 0 {
		c = min(c, budget/nodes)
	}
	return max(c, MinFrames)
}

// Recorder keeps a job's frames, oldest first, within its capacity. It is
// not safe for concurrent use: its job owns it.
type Recorder struct {
	frames []*Frame
	cap    int
	// dirty is the first index whose frame changed since the last Flush
	// (len(frames) when none did).
	dirty int
}

// NewRecorder returns a recorder that keeps at most capacity frames
// (MinFrames if less), starting from frames already recorded (restored
// from the store; not changed).
func NewRecorder(capacity int, restored []*timelinepb.TimelineFrame) *Recorder {
	r := &Recorder{cap: max(capacity, MinFrames), frames: CompactAll(restored)}
	r.dirty = len(r.frames)
	for len(r.frames) > r.cap {
		r.compact()
	}
	return r
}

// Len is the number of frames kept.
func (r *Recorder) Len() int { return len(r.frames) }

// Frames returns the frames, oldest first. The slice is a copy; the frames
// are shared and never changed once recorded (a merge makes a new one).
func (r *Recorder) Frames() []*Frame {
	return append([]*Frame(nil), r.frames...)
}

// Last is the most recent frame, or nil.
func (r *Recorder) Last() *Frame {
	if len(r.frames) == 0 {
		return nil
	}
	return r.frames[len(r.frames)-1]
}

// Add records f (kept as a Frame: f is not changed or kept), as AddFrame.
func (r *Recorder) Add(f *timelinepb.TimelineFrame) bool {
	if last := r.Last(); last != nil && !f.GetTime().AsTime().After(last.Time()) {
		return false
	}
	return r.AddFrame(Compact(f, r.Last()))
}

// AddFrame records f, which must end after the last frame (a frame that
// does not is dropped: time runs one way). When the recorder is full, the
// older half is merged pairwise first. f is made off the recorder's owner
// (Compact, from the last frame: the rows of 20,000 nodes take a
// millisecond or two), so that its turn is an append.
func (r *Recorder) AddFrame(f *Frame) bool {
	if last := r.Last(); last != nil && !f.Time().After(last.Time()) {
		return false
	}
	r.frames = append(r.frames, f)
	if len(r.frames) > r.cap {
		r.compact()
	}
	return true
}

// compact merges the frames of the older half pairwise.
func (r *Recorder) compact() {
	half := len(r.frames) / 2
	half -= half % 2
	out := make([]*Frame, 0, half/2+len(r.frames)-half)
	for i := 0; i < half; i += 2 {
		out = append(out, merge(r.frames[i], r.frames[i+1]))
	}
	out = append(out, r.frames[half:]...)
	r.frames = out
	r.dirty = 0
}

// Flush returns what changed since the last Flush: the frames from index
// from on must be (re)written (Frame.Proto), and the timeline now has
// Len() frames (any stored beyond that are gone).
func (r *Recorder) Flush() (from int, frames []*Frame) {
	from = min(r.dirty, len(r.frames))
	frames = append([]*Frame(nil), r.frames[from:]...)
	r.dirty = len(r.frames)
	return from, frames
}

// Merge returns one frame covering a and the frame b that follows it: the
// job's and each node's figures at the end (b's), throughput and each
// node's value averaged over the span, each node's heat the maximum (so a
// straggler's hot bucket never fades out of a downsampled heatmap). A node
// only in a keeps a's figures. Neither a nor b is changed.
func Merge(a, b *timelinepb.TimelineFrame) *timelinepb.TimelineFrame {
	fa := Compact(a, nil)
	return merge(fa, Compact(b, fa)).Proto()
}

// weighted is the mean of x and y weighted by wx and wy.
func weighted(x, wx, y, wy float64) float64 {
	if wx+wy <= 0 {
		return y
	}
	return (x*wx + y*wy) / (wx + wy)
}

// FrameOf makes the frame of a job's detailed console view for the bucket
// that ends at end and spans span: the job's and nodes' figures from the
// view, each node's heat and value from the view's heatmap column and chart
// point col (negative: the last). It is FrameOfView's frame as a message.
func FrameOf(v *consolepb.JobView, col int, end time.Time, span time.Duration) *timelinepb.TimelineFrame {
	return FrameOfView(v, col, end, span, nil).Proto()
}

// FrameOfView is FrameOf's frame kept compact, made straight from the view
// (no message per node): its nodes share prev's roster when they are the
// same nodes (prev may be nil).
func FrameOfView(v *consolepb.JobView, col int, end time.Time, span time.Duration, prev *Frame) *Frame {
	f := &timelinepb.TimelineFrame{
		Time:        timestamppb.New(end),
		SpanSeconds: span.Seconds(),
		State:       v.GetState(),
		Iteration:   v.GetIteration(),
		Throughput:  v.GetThroughput(),
		ShardsDone:  v.GetShardsDone(),
		ShardsTodo:  v.GetShardsTodo(),
		ShardsDoing: v.GetShardsDoing(),
		ShardsTotal: v.GetShardsTotal(),
		Iterations:  v.GetIterations(),
		Hung:        v.GetHung() != nil,
	}
	if p := v.GetGoodput().GetPhases(); len(p) > 0 {
		f.Phases = make(map[string]float64, len(p))
		for k, x := range p {
			f.Phases[k] = x
		}
	}
	if v.GetLoss() != 0 || math.IsNaN(v.GetLoss()) || v.GetDiverged() != nil {
		f.Loss = proto.Float64(v.GetLoss())
	}
	if m := v.GetMonitor(); m != nil {
		f.MeanBptS, f.SpeedVariance, f.Superior = m.GetMeanBptS(), m.GetSpeedVariance(), append([]string(nil), m.GetSuperior()...)
	}
	pick := func(n int) (int, bool) {
		if col < 0 {
			return n - 1, n > 0
		}
		return col, col < n
	}
	// A job view's heatmap rows and chart series are in its nodes' order:
	// a node's are read at its own index, and looked up by name only
	// when they are not there (two maps of every node per frame were
	// most of a 20,000-node frame's time and allocation).
	rows, charts := v.GetHeatmap().GetRows(), v.GetCharts()
	var heat map[string]float32
	var value map[string]float64
	cellOf := func(r *consolepb.HeatmapRow) (float32, bool) {
		if c, ok := pick(len(r.GetCells())); ok {
			return r.GetCells()[c], true
		}
		return 0, false
	}
	valueOfSeries := func(s *consolepb.Series) (float64, bool) {
		if c, ok := pick(len(s.GetValues())); ok && s.GetValues()[c] != 0 {
			return s.GetValues()[c], true
		}
		return 0, false
	}
	rowNode := func(r *consolepb.HeatmapRow) string { return r.GetNode() }
	seriesNode := func(s *consolepb.Series) string { return nodeOfSeries(s.GetName()) }
	nodes := v.GetNodes()
	out := &Frame{head: f, nodes: make([]nodeRow, len(nodes))}
	var t strTable
	same := prev != nil && len(prev.roster.names) == len(nodes)
	for i, n := range nodes {
		if same && (prev.roster.names[i] != n.GetName() || prev.roster.roles[i] != n.GetRole()) {
			same = false
		}
		h, _ := atOrByName(rows, i, n.GetName(), rowNode, cellOf, &heat)
		x, hasValue := atOrByName(charts, i, n.GetName(), seriesNode, valueOfSeries, &value)
		out.nodes[i] = nodeRow{
			iteration: n.GetIteration(), bptShortS: n.GetBptShortS(), bptLongS: n.GetBptLongS(),
			throughput: n.GetThroughput(), speed: n.GetSpeed(), value: x, hasValue: hasValue,
			batchSize: n.GetBatchSize(), accumulation: n.GetAccumulation(), restarts: n.GetRestarts(),
			blocks: n.GetBlocks(), heat: h, superior: n.GetSuperior(),
			state: t.code(n.GetState()), class: t.code(n.GetClass()),
		}
	}
	out.strs = t.strs
	if same {
		out.roster = prev.roster
	} else {
		out.roster = newRoster(len(nodes), func(i int) (string, string) { return nodes[i].GetName(), nodes[i].GetRole() })
	}
	return out
}

// nodeOfSeries is the node a chart series is about ("bpt/worker-2").
func nodeOfSeries(name string) string {
	for i := range len(name) {
		if name[i] == '/' {
			return name[i+1:]
		}
	}
	return name
}

// atOrByName is node's value in list, kept in a view's nodes' order: the
// entry at the node's own index i when it is the node's, else the one a
// map of the whole list (made once, in *byName) holds.
func atOrByName[E any, V any](list []E, i int, node string, nameOf func(E) string, valueOf func(E) (V, bool), byName *map[string]V) (V, bool) {
	if i < len(list) && nameOf(list[i]) == node {
		return valueOf(list[i])
	}
	if *byName == nil {
		*byName = make(map[string]V, len(list))
		for _, e := range list {
			if v, ok := valueOf(e); ok {
				(*byName)[nameOf(e)] = v
			}
		}
	}
	v, ok := (*byName)[node]
	return v, ok
}
