package timeline

import (
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/timelinepb"
)

// Frame is a timeline frame as a Recorder keeps it: the job's figures (a
// TimelineFrame without its nodes) and each node's as a plain 80-byte row
// rather than a TimelineNode message (some 200 bytes with its pointer and
// its optional value's allocation). The nodes' names and roles are a
// roster that consecutive frames of the same nodes share, and the nodes'
// states and classes are indexes into the frame's few distinct strings.
// A 20,000-node job's timeline is 64 frames × 20,000 nodes: 1.28 million
// node samples, some 100 MB as rows, 260 MB as messages.
//
// A field added to TimelineNode must be added to nodeRow, Compact and
// Proto (TestCompactKeepsEveryNodeField fails until it is); a field added
// to TimelineFrame is kept as it is.
//
// A Frame is never changed once made (a merge makes a new one), so frames
// are shared freely; Proto makes the message where a frame leaves the
// process (the store, the console API).
type Frame struct {
	head   *timelinepb.TimelineFrame // the frame's figures; Nodes nil
	roster *roster
	nodes  []nodeRow // in roster order
	strs   []string  // the states and classes the rows index
}

// roster is the names and roles of a frame's nodes, in their order.
type roster struct {
	names, roles []string
	// unique: no name appears twice, so frames of the same roster are
	// merged node by node at the same index.
	unique bool
}

// nodeRow is a TimelineNode's figures (name and role in the roster, state
// and class in the frame's strs).
type nodeRow struct {
	iteration                                 int64
	bptShortS, bptLongS, throughput, speed    float64
	value                                     float64 // when hasValue
	batchSize, accumulation, restarts, blocks int32
	heat                                      float32
	state, class                              uint32
	superior, hasValue                        bool
}

// strTable interns a frame's states and classes.
type strTable struct {
	strs []string
	idx  map[string]uint32
}

func (t *strTable) code(s string) uint32 {
	if len(t.strs) <= smallTable { // a frame has a handful: a scan beats hashing
		for i, x := range t.strs {
			if x == s {
				return uint32(i)
			}
		}
		t.strs = append(t.strs, s)
		return uint32(len(t.strs) - 1)
	}
	if t.idx == nil {
		t.idx = make(map[string]uint32, len(t.strs)+4)
		for i, x := range t.strs {
			t.idx[x] = uint32(i)
		}
	}
	if c, ok := t.idx[s]; ok {
		return c
	}
	t.strs = append(t.strs, s)
	t.idx[s] = uint32(len(t.strs) - 1)
	return uint32(len(t.strs) - 1)
}

// smallTable is the most strings a strTable scans rather than hashes.
const smallTable = 8

// Compact returns the frame that f (not changed) holds; nodes whose
// roster equals prev's share it (prev may be nil).
func Compact(f *timelinepb.TimelineFrame, prev *Frame) *Frame {
	head := proto.CloneOf(stripped(f))
	out := &Frame{head: head, nodes: make([]nodeRow, len(f.GetNodes()))}
	var t strTable
	same := prev != nil && len(prev.roster.names) == len(f.GetNodes())
	for i, n := range f.GetNodes() {
		if same && (prev.roster.names[i] != n.GetName() || prev.roster.roles[i] != n.GetRole()) {
			same = false
		}
		out.nodes[i] = nodeRow{
			iteration: n.GetIteration(), bptShortS: n.GetBptShortS(), bptLongS: n.GetBptLongS(),
			throughput: n.GetThroughput(), speed: n.GetSpeed(), value: n.GetValue(), hasValue: n.Value != nil,
			batchSize: n.GetBatchSize(), accumulation: n.GetAccumulation(), restarts: n.GetRestarts(),
			blocks: n.GetBlocks(), heat: n.GetHeat(), superior: n.GetSuperior(),
			state: t.code(n.GetState()), class: t.code(n.GetClass()),
		}
	}
	out.strs = t.strs
	if same {
		out.roster = prev.roster
	} else {
		out.roster = newRoster(len(f.GetNodes()), func(i int) (string, string) { return f.GetNodes()[i].GetName(), f.GetNodes()[i].GetRole() })
	}
	return out
}

// newRoster is the roster of n nodes, node i named and in role at(i).
func newRoster(n int, at func(i int) (name, role string)) *roster {
	r := &roster{names: make([]string, n), roles: make([]string, n)}
	for i := range n {
		r.names[i], r.roles[i] = at(i)
	}
	r.unique = uniqueNames(r.names)
	return r
}

// stripped is every field of f but its nodes, whatever fields the
// message has (a shallow view for cloning: f itself is not changed).
func stripped(f *timelinepb.TimelineFrame) *timelinepb.TimelineFrame {
	out := &timelinepb.TimelineFrame{}
	dst := out.ProtoReflect()
	f.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Name() != nodesField {
			dst.Set(fd, v)
		}
		return true
	})
	dst.SetUnknown(f.ProtoReflect().GetUnknown())
	return out
}

// nodesField is the name of TimelineFrame's nodes.
const nodesField protoreflect.Name = "nodes"

func uniqueNames(names []string) bool {
	seen := make(map[string]struct{}, len(names))
	for _, n := range names {
		if _, ok := seen[n]; ok {
			return false
		}
		seen[n] = struct{}{}
	}
	return true
}

// CompactAll returns the frames of fs (not changed), consecutive frames
// of the same nodes sharing their roster.
func CompactAll(fs []*timelinepb.TimelineFrame) []*Frame { return CompactAfter(nil, fs) }

// CompactAfter is CompactAll of frames that follow prev (nil: none), whose
// roster the first may share.
func CompactAfter(prev *Frame, fs []*timelinepb.TimelineFrame) []*Frame {
	out := make([]*Frame, len(fs))
	for i, f := range fs {
		out[i] = Compact(f, prev)
		prev = out[i]
	}
	return out
}

// Proto returns the frame as a new message.
func (f *Frame) Proto() *timelinepb.TimelineFrame {
	out := proto.CloneOf(f.head)
	if len(f.nodes) == 0 {
		return out
	}
	out.Nodes = make([]*timelinepb.TimelineNode, len(f.nodes))
	for i := range f.nodes {
		n := &timelinepb.TimelineNode{}
		f.node(i, n)
		if n.Value != nil {
			n.Value = proto.Float64(*n.Value) // its own, not the row's
		}
		out.Nodes[i] = n
	}
	return out
}

// node sets n (a new or reset message) to node i; its Value, when set,
// points into f's row.
func (f *Frame) node(i int, n *timelinepb.TimelineNode) {
	r := &f.nodes[i]
	n.Name, n.Role, n.State, n.Iteration = f.roster.names[i], f.roster.roles[i], f.strs[r.state], r.iteration
	n.BatchSize, n.Accumulation, n.Restarts = r.batchSize, r.accumulation, r.restarts
	n.BptShortS, n.BptLongS, n.Throughput = r.bptShortS, r.bptLongS, r.throughput
	n.Class, n.Superior, n.Speed, n.Blocks, n.Heat = f.strs[r.class], r.superior, r.speed, r.blocks, r.heat
	n.Value = nil
	if r.hasValue {
		n.Value = &r.value
	}
}

// Marshal is the wire form of f.Proto() (what proto.Unmarshal makes a
// message equal to it of), written without a message per node: the
// figures, then each node as the frame's nodes field, one reused
// TimelineNode at a time. The store takes a 20,000-node frame a second.
func (f *Frame) Marshal() ([]byte, error) {
	b, err := proto.Marshal(f.head)
	if err != nil {
		return nil, err
	}
	num := f.head.ProtoReflect().Descriptor().Fields().ByName(nodesField).Number()
	var n timelinepb.TimelineNode
	cached := proto.MarshalOptions{UseCachedSize: true} // the size Size just took
	for i := range f.nodes {
		f.node(i, &n)
		at := len(b)
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(proto.Size(&n)))
		if b, err = cached.MarshalAppend(b, &n); err != nil {
			return nil, err
		}
		if i == 0 {
			// Room for the others at the first one's size, and an eighth.
			b = slices.Grow(b, (len(b)-at)*(len(f.nodes)-1)*9/8)
		}
	}
	return b, nil
}

// Protos returns the frames as new messages.
func Protos(fs []*Frame) []*timelinepb.TimelineFrame {
	out := make([]*timelinepb.TimelineFrame, len(fs))
	for i, f := range fs {
		out[i] = f.Proto()
	}
	return out
}

// WithSamplesPerS returns f with the job's samples per second x (a new
// frame sharing f's rows; f is not changed).
func (f *Frame) WithSamplesPerS(x float64) *Frame {
	out := *f
	out.head = proto.CloneOf(f.head)
	out.head.SamplesPerS = x
	return &out
}

// Time is the end of the frame's span.
func (f *Frame) Time() time.Time { return f.head.GetTime().AsTime() }

// Start is when the frame's span begins.
func (f *Frame) Start() time.Time { return f.head.Start() }

// SpanSeconds is how long the frame covers.
func (f *Frame) SpanSeconds() float64 { return f.head.GetSpanSeconds() }

// Throughput and SamplesPerS are the job's, as TimelineFrame's.
func (f *Frame) Throughput() float64  { return f.head.GetThroughput() }
func (f *Frame) SamplesPerS() float64 { return f.head.GetSamplesPerS() }

// NodeCount is the number of nodes in the frame; NodeName, NodeRole,
// NodeBatchSize and NodeValue are the i-th one's (NodeValue: its mean BPT
// or comm speed over the span, false when it had no report in it).
func (f *Frame) NodeCount() int            { return len(f.nodes) }
func (f *Frame) NodeName(i int) string     { return f.roster.names[i] }
func (f *Frame) NodeRole(i int) string     { return f.roster.roles[i] }
func (f *Frame) NodeBatchSize(i int) int32 { return f.nodes[i].batchSize }
func (f *Frame) NodeValue(i int) (float64, bool) {
	return f.nodes[i].value, f.nodes[i].hasValue
}

// FrameAt returns the index of the frame that covers t in frames (oldest
// first), as timelinepb.FrameAt.
func FrameAt(frames []*Frame, t time.Time) int {
	return timelinepb.IndexAt(len(frames), func(i int) time.Time { return frames[i].Time() }, t)
}

// merge is Merge of compact frames.
func merge(a, b *Frame) *Frame {
	wa, wb := a.SpanSeconds(), b.SpanSeconds()
	head := proto.CloneOf(b.head)
	head.SpanSeconds = wa + wb
	head.Throughput = weighted(a.head.GetThroughput(), wa, b.head.GetThroughput(), wb)
	head.SamplesPerS = weighted(a.head.GetSamplesPerS(), wa, b.head.GetSamplesPerS(), wb)
	if head.Loss == nil && a.head.Loss != nil {
		head.Loss = proto.Float64(a.head.GetLoss())
	}
	out := &Frame{head: head, roster: b.roster, nodes: append([]nodeRow(nil), b.nodes...), strs: b.strs}
	mergeRow := func(n *nodeRow, p *nodeRow) {
		if p.heat > n.heat || n.heat != n.heat {
			n.heat = p.heat // the hotter of the two (a NaN never wins)
		}
		switch {
		case !n.hasValue && p.hasValue:
			n.value, n.hasValue = p.value, true
		case n.hasValue && p.hasValue:
			n.value = weighted(p.value, wa, n.value, wb)
		}
	}
	if a.roster == b.roster && b.roster.unique {
		for i := range out.nodes {
			mergeRow(&out.nodes[i], &a.nodes[i])
		}
		return out
	}
	prev := make(map[string]int, len(a.nodes))
	for i, name := range a.roster.names {
		prev[name] = i
	}
	for i := range out.nodes {
		name := b.roster.names[i]
		p, ok := prev[name]
		if !ok {
			continue
		}
		delete(prev, name)
		mergeRow(&out.nodes[i], &a.nodes[p])
	}
	// Nodes that were gone by b's end, in a's order.
	var gone []int
	for i, name := range a.roster.names {
		if _, ok := prev[name]; ok {
			gone = append(gone, i)
		}
	}
	if len(gone) == 0 {
		return out
	}
	r := &roster{names: append([]string(nil), b.roster.names...), roles: append([]string(nil), b.roster.roles...)}
	t := strTable{strs: append([]string(nil), b.strs...)}
	for _, i := range gone {
		r.names, r.roles = append(r.names, a.roster.names[i]), append(r.roles, a.roster.roles[i])
		n := a.nodes[i]
		n.state, n.class = t.code(a.strs[n.state]), t.code(a.strs[n.class])
		out.nodes = append(out.nodes, n)
	}
	r.unique = uniqueNames(r.names)
	out.roster, out.strs = r, t.strs
	return out
}
