package timeline

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/timelinepb"
)

// rich makes a frame at t0+sec with every field set, its nodes named by
// names (each node's figures vary with sec and its index; every third one
// has no value in the frame).
func rich(sec int, names ...string) *timelinepb.TimelineFrame {
	f := &timelinepb.TimelineFrame{Time: timestamppb.New(t0.Add(time.Duration(sec) * time.Second)), SpanSeconds: 1,
		State: "running", Iteration: int64(sec * 10), Throughput: float64(1000 + sec), ShardsDone: int64(sec),
		MeanBptS: 0.01, SpeedVariance: 0.2, Superior: []string{"server-0"}, SamplesPerS: float64(900 + sec),
		ShardsTodo: 3, ShardsDoing: 2, ShardsTotal: 9, Iterations: 100, Phases: map[string]float64{"train": float64(sec)}, Hung: sec%5 == 0}
	if sec%2 == 0 {
		f.Loss = proto.Float64(1 / float64(sec))
	}
	for i, name := range names {
		role, class := "worker", "normal"
		if i%4 == 3 {
			role, class = "server", ""
		}
		if (i+sec)%7 == 0 {
			class = "straggler"
		}
		n := &timelinepb.TimelineNode{Name: name, Role: role, State: []string{"running", "restarting", "done"}[(i+sec)%3],
			Iteration: int64(sec*10 + i), BatchSize: int32(32 + i), Accumulation: int32(1 + i%2), Restarts: int32(i % 3),
			BptShortS: 0.001 * float64(i+sec), BptLongS: 0.002 * float64(i+sec), Throughput: float64(100 * i), Class: class,
			Superior: i%5 == 0, Speed: float64(1e6 * i), Blocks: int32(i), Heat: float32(i*sec%11) / 3}
		if (i+sec)%3 != 0 {
			n.Value = proto.Float64(0.001 * float64(i*sec+1))
		}
		f.Nodes = append(f.Nodes, n)
	}
	return f
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// mergeMessages is Merge as it was on messages, before frames were kept
// compact: the reference the compact merge must reproduce.
func mergeMessages(a, b *timelinepb.TimelineFrame) *timelinepb.TimelineFrame {
	wa, wb := a.GetSpanSeconds(), b.GetSpanSeconds()
	out := proto.CloneOf(b)
	out.SpanSeconds = wa + wb
	out.Throughput = weighted(a.GetThroughput(), wa, b.GetThroughput(), wb)
	out.SamplesPerS = weighted(a.GetSamplesPerS(), wa, b.GetSamplesPerS(), wb)
	if out.Loss == nil && a.Loss != nil {
		out.Loss = proto.Float64(a.GetLoss())
	}
	prev := make(map[string]*timelinepb.TimelineNode, len(a.GetNodes()))
	for _, n := range a.GetNodes() {
		prev[n.GetName()] = n
	}
	for _, n := range out.Nodes {
		p, ok := prev[n.GetName()]
		if !ok {
			continue
		}
		delete(prev, n.GetName())
		if h := p.GetHeat(); h > n.GetHeat() || n.GetHeat() != n.GetHeat() {
			n.Heat = h
		}
		switch {
		case n.Value == nil && p.Value != nil:
			n.Value = proto.Float64(p.GetValue())
		case n.Value != nil && p.Value != nil:
			n.Value = proto.Float64(weighted(p.GetValue(), wa, n.GetValue(), wb))
		}
	}
	for _, n := range a.GetNodes() {
		if _, ok := prev[n.GetName()]; ok {
			out.Nodes = append(out.Nodes, proto.CloneOf(n))
		}
	}
	return out
}

// TestCompactRoundTrip: a frame kept compact gives back the same message,
// whether or not it shares the previous frame's roster.
func TestCompactRoundTrip(t *testing.T) {
	prev := Compact(rich(1, names("worker", 8)...), nil)
	for _, c := range []struct {
		name  string
		f     *timelinepb.TimelineFrame
		share bool
	}{
		{"same nodes", rich(2, names("worker", 8)...), true},
		{"other nodes", rich(3, names("worker", 9)...), false},
		{"same names, another order", rich(4, append(names("worker", 8)[1:], "worker-0")...), false},
		{"no nodes", rich(5), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Compact(c.f, prev)
			if !proto.Equal(got.Proto(), c.f) {
				t.Errorf("round trip changed the frame:\n got %v\nwant %v", got.Proto(), c.f)
			}
			checkMarshal(t, got, c.f)
			if shared := got.roster == prev.roster; shared != c.share {
				t.Errorf("roster shared = %v, want %v", shared, c.share)
			}
		})
	}
}

// TestMergeAsMessages: the compact merge gives what merging the messages
// gave, for the same nodes, changed nodes, nodes gone and duplicate names,
// and leaves its inputs as they were.
func TestMergeAsMessages(t *testing.T) {
	w := names("worker", 12)
	nan := rich(2, w...)
	nan.Nodes[4].Heat = float32(math.NaN())
	for _, c := range []struct {
		name string
		a, b *timelinepb.TimelineFrame
	}{
		{"same nodes", rich(1, w...), rich(2, w...)},
		{"a NaN heat in b", rich(1, w...), nan},
		{"a node gone", rich(1, w...), rich(2, w[1:]...)},
		{"a node new", rich(1, w[1:]...), rich(2, w...)},
		{"other order", rich(1, w...), rich(2, append(w[3:], w[:3]...)...)},
		{"duplicate names", rich(1, append(w[:4], w[:2]...)...), rich(2, append(w[:4], w[:2]...)...)},
		{"no nodes in b", rich(1, w...), rich(2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			a0, b0 := proto.CloneOf(c.a), proto.CloneOf(c.b)
			want := mergeMessages(c.a, c.b)
			fa := Compact(c.a, nil)
			fb := Compact(c.b, fa)
			got := merge(fa, fb).Proto()
			if !equalFrames(got, want) {
				t.Errorf("merge:\n got %v\nwant %v", got, want)
			}
			if !equalFrames(fa.Proto(), a0) || !equalFrames(fb.Proto(), b0) {
				t.Error("merge changed its inputs")
			}
			if got := Merge(c.a, c.b); !equalFrames(got, want) {
				t.Errorf("Merge:\n got %v\nwant %v", got, want)
			}
		})
	}
}

// equalFrames is proto.Equal with NaN heat equal to NaN heat.
func equalFrames(a, b *timelinepb.TimelineFrame) bool {
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	for _, f := range []*timelinepb.TimelineFrame{a, b} {
		for _, n := range f.GetNodes() {
			if n.Heat != n.Heat {
				n.Heat = -1
			}
		}
	}
	return proto.Equal(a, b)
}

// TestRecorderAsMessages: a recorder of compact frames holds, frame for
// frame, what a recorder of messages held, through many compactions and
// a change of the nodes.
func TestRecorderAsMessages(t *testing.T) {
	r := NewRecorder(MinFrames, nil)
	var ref []*timelinepb.TimelineFrame
	for s := 1; s <= 500; s++ {
		n := 6
		if s > 200 && s < 300 {
			n = 7 // a node joins for a while
		}
		f := rich(s, names("worker", n)...)
		r.Add(f)
		ref = append(ref, f)
		if len(ref) > MinFrames {
			half := len(ref) / 2
			half -= half % 2
			var out []*timelinepb.TimelineFrame
			for i := 0; i < half; i += 2 {
				out = append(out, mergeMessages(ref[i], ref[i+1]))
			}
			ref = append(out, ref[half:]...)
		}
	}
	got := Protos(r.Frames())
	if len(got) != len(ref) {
		t.Fatalf("%d frames, want %d", len(got), len(ref))
	}
	for i := range got {
		if !equalFrames(got[i], ref[i]) {
			t.Fatalf("frame %d:\n got %v\nwant %v", i, got[i], ref[i])
		}
	}
}

// TestBytesPerNodeSample: what a recorder holds per node sample (frames ×
// nodes) is within BytesPerNodeSample, the figure the budget is given in.
func TestBytesPerNodeSample(t *testing.T) {
	const nodes = 5000
	got := heldPerNodeSample(nodes)
	t.Logf("%.1f bytes per node sample (%d nodes, %d frames)", got, nodes, MinFrames)
	if got > BytesPerNodeSample {
		t.Errorf("%.1f bytes per node sample, more than BytesPerNodeSample (%d)", got, BytesPerNodeSample)
	}
}

// heldPerNodeSample is the heap a full recorder of nodes nodes holds, per
// node sample: MinFrames frames recorded over 2×MinFrames seconds, so
// half of them merged.
func heldPerNodeSample(nodes int) float64 {
	w := names("worker", nodes)
	// Built once, as views are: the frames share the strings.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := NewRecorder(MinFrames, nil)
	for s := 1; s <= 2*MinFrames; s++ {
		r.Add(rich(s, w...))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	runtime.KeepAlive(r)
	runtime.KeepAlive(w)
	return held / float64(r.Len()*nodes)
}

// heldAsMessages is what MinFrames frames of nodes nodes held as
// messages (as recorders kept them before), per node sample.
func heldAsMessages(nodes int) float64 {
	w := names("worker", nodes)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fs := make([]*timelinepb.TimelineFrame, MinFrames)
	for i := range fs {
		fs[i] = rich(i+1, w...)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(after.HeapAlloc) - float64(before.HeapAlloc)
	runtime.KeepAlive(fs)
	runtime.KeepAlive(w)
	return held / float64(len(fs)*nodes)
}

// BenchmarkRecorderHeld reports the bytes a recorder holds per node
// sample at 20,000 nodes, kept compact and as messages.
func BenchmarkRecorderHeld(b *testing.B) {
	for range b.N {
		b.ReportMetric(heldPerNodeSample(20_000), "B/sample")
		b.ReportMetric(heldAsMessages(20_000), "B/sample-as-messages")
	}
}

// TestCompactKeepsEveryNodeField: every field of TimelineNode and
// TimelineFrame, set, comes back from a compact frame — a field added to
// the messages and not to Frame fails here.
func TestCompactKeepsEveryNodeField(t *testing.T) {
	f := &timelinepb.TimelineFrame{}
	setEvery(f.ProtoReflect())
	n := &timelinepb.TimelineNode{}
	setEvery(n.ProtoReflect())
	f.Nodes = []*timelinepb.TimelineNode{n}
	if got := Compact(f, nil).Proto(); !proto.Equal(got, f) {
		t.Errorf("round trip lost a field:\n got %v\nwant %v", got, f)
	}
	checkMarshal(t, Compact(f, nil), f)
}

// checkMarshal: what f.Marshal writes reads back as want (f's message),
// as proto.Marshal of it does.
func checkMarshal(t *testing.T, f *Frame, want *timelinepb.TimelineFrame) {
	t.Helper()
	b, err := f.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got := &timelinepb.TimelineFrame{}
	if err := proto.Unmarshal(b, got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("Marshal reads back as\n %v\nwant %v", got, want)
	}
}

// setEvery sets every scalar, repeated and map field of m to something
// other than its zero (messages other than timestamps are left alone).
func setEvery(m protoreflect.Message) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Kind() == protoreflect.MessageKind && !fd.IsMap() {
			if !fd.IsList() && fd.Message().FullName() == "google.protobuf.Timestamp" {
				m.Set(fd, protoreflect.ValueOfMessage(timestamppb.New(t0).ProtoReflect()))
			}
			continue
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(protoreflect.ValueOfString("k").MapKey(), scalarFor(fd.MapValue(), i))
		case fd.IsList():
			m.Mutable(fd).List().Append(scalarFor(fd, i))
		default:
			m.Set(fd, scalarFor(fd, i))
		}
	}
}

func scalarFor(fd protoreflect.FieldDescriptor, i int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("s%d", i))
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(int32(i + 1))
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(int64(i + 1))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(i) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(i) + 0.25)
	}
	panic(fmt.Sprintf("no value for %v", fd.Kind()))
}

// TestAddFrame: a frame made off the recorder (Compact from its last) and
// given its rate (WithSamplesPerS, which leaves the frame as it was) is
// recorded as Add records the message; time still runs one way.
func TestAddFrame(t *testing.T) {
	w := names("worker", 5)
	byAdd, byFrame := NewRecorder(MinFrames, nil), NewRecorder(MinFrames, nil)
	for s := 1; s <= 3*MinFrames; s++ {
		f := rich(s, w...)
		c := Compact(f, byFrame.Last())
		given := c.WithSamplesPerS(42)
		if c.SamplesPerS() != f.GetSamplesPerS() || given.SamplesPerS() != 42 {
			t.Fatalf("WithSamplesPerS: %v, the original %v (was %v)", given.SamplesPerS(), c.SamplesPerS(), f.GetSamplesPerS())
		}
		f.SamplesPerS = 42
		byAdd.Add(f)
		if !byFrame.AddFrame(given) {
			t.Fatalf("frame %d refused", s)
		}
	}
	if byFrame.AddFrame(Compact(rich(3*MinFrames, w...), nil)) {
		t.Error("a frame ending at the last frame's time was recorded")
	}
	got, want := Protos(byFrame.Frames()), Protos(byAdd.Frames())
	for i := range want {
		if !equalFrames(got[i], want[i]) {
			t.Fatalf("frame %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}
