package manager

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestHeatmapAcrossTheRing: the buckets are a ring indexed by absolute
// column; once time has gone round it, the heatmap shows the last columns
// with their own numbers and none of the columns they replaced.
func TestHeatmapAcrossTheRing(t *testing.T) {
	const cols = 4
	t0 := time.Unix(1000, 0)
	m := &Manager{cfg: Config{Columns: cols, Bucket: time.Second}}
	j := &jobState{m: m, bucket0: t0, nodes: map[string]*nodeState{}}
	var rows []nodeRow
	for i := range 3 {
		n := &nodeState{name: fmt.Sprintf("worker-%d", i), role: "worker", cells: newBuckets(cols)}
		// Columns 0..6: column c holds BPT c+1 for every worker, except
		// column 5, which is empty (no report in that second).
		for c := range 7 {
			if c != 5 {
				n.cells.add(c, float64(c+1), 1, 0)
			}
		}
		j.nodes[n.name] = n
		rows = append(rows, nodeRow{name: n.name, role: n.role, cells: n.cells})
	}
	now := t0.Add(6*time.Second + time.Millisecond) // in column 6
	h, series := j.heatmap(rows, cols, now)
	if want := t0.Add(3 * time.Second); !h.Start.AsTime().Equal(want) {
		t.Errorf("heatmap starts at %v; want %v (column 3)", h.Start.AsTime(), want)
	}
	for i, s := range series {
		if want := []float64{4, 5, 0, 7}; !slices.Equal(s.Values, want) {
			t.Errorf("row %d = %v; want %v (column 5 empty, not column 1's)", i, s.Values, want)
		}
	}
	for _, r := range h.Rows {
		if want := []float32{1, 1, 0, 1}; !slices.Equal(r.Cells, want) {
			t.Errorf("%s cells = %v; want %v", r.Node, r.Cells, want)
		}
	}
}

// TestHeatmapCells: each cell is the node's mean in that bucket over the
// mean of its role's nodes there (workers and servers apart), a bucket
// without samples is 0, a worker's series is its mean BPT and a server's
// its speed (bytes over comm seconds).
func TestHeatmapCells(t *testing.T) {
	const cols = 3
	t0 := time.Unix(1000, 0)
	m := &Manager{cfg: Config{Columns: cols, Bucket: time.Second}}
	j := &jobState{m: m, bucket0: t0}
	type add struct {
		col   int
		sum   float64
		n     int
		bytes float64
	}
	nodes := []struct {
		name, role string
		adds       []add
		cells      []float32
		values     []float64
	}{
		{"server-0", "server", []add{{0, 1, 2, 100}, {2, 2, 1, 50}}, []float32{1, 0, 1}, []float64{100, 0, 25}},
		{"worker-0", "worker", []add{{0, 2, 2, 0}, {2, 3, 1, 0}}, []float32{0.5, 0, 1}, []float64{1, 0, 3}},
		{"worker-1", "worker", []add{{0, 3, 1, 0}, {1, 4, 2, 0}}, []float32{1.5, 1, 0}, []float64{3, 2, 0}},
	}
	var rows []nodeRow
	for _, n := range nodes {
		b := newBuckets(cols)
		for _, a := range n.adds {
			b.add(a.col, a.sum, a.n, a.bytes)
		}
		rows = append(rows, nodeRow{name: n.name, role: n.role, cells: b, seriesName: j.seriesName(n.name, n.role)})
	}
	h, series := j.heatmap(rows, cols, t0.Add(2*time.Second+time.Millisecond))
	for i, n := range nodes {
		if r := h.Rows[i]; r.Node != n.name || !slices.Equal(r.Cells, n.cells) {
			t.Errorf("row %d: %s %v; want %s %v", i, r.Node, r.Cells, n.name, n.cells)
		}
		want := map[string]string{"server": "speed/", "worker": "bpt/"}[n.role] + n.name
		if s := series[i]; s.Name != want || !slices.Equal(s.Values, n.values) {
			t.Errorf("series %d: %s %v; want %s %v", i, s.Name, s.Values, want, n.values)
		}
	}
}

func TestBucketsReuseACell(t *testing.T) {
	b := newBuckets(2)
	b.add(0, 1.5, 3, 10)
	b.add(0, 0.5, 1, 5)
	if sum, n, by, ok := b.get(0); !ok || sum != 2 || n != 4 || by != 15 {
		t.Errorf("get(0) = %v, %d, %v, %v; want 2, 4, 15, true", sum, n, by, ok)
	}
	b.add(2, 7, 1, 0) // the same cell, a newer column
	if _, _, _, ok := b.get(0); ok {
		t.Error("get(0) still reads after column 2 took its cell")
	}
	if sum, n, _, ok := b.get(2); !ok || sum != 7 || n != 1 {
		t.Errorf("get(2) = %v, %d, %v; want 7, 1, true", sum, n, ok)
	}
	if _, _, _, ok := b.get(-1); ok {
		t.Error("get(-1) reads")
	}
}

func TestNodeStateIn(t *testing.T) {
	for _, c := range []struct{ job, node, want string }{
		{StateRunning, "running", "running"},
		{StateRunning, "lost", "lost"},
		{StateStarting, "starting", "starting"},
		{StateCompleted, "running", "done"},
		{StateCompleted, "starting", "done"},
		{StateCompleted, "done", "done"},
		{StateCompleted, "lost", "lost"},
		{StateKilled, "running", "stopped"},
		{StateFailed, "restarting", "stopped"},
		{StateFailed, "failed", "failed"},
		{StateDiverged, "running", "stopped"},
	} {
		if got := nodeStateIn(c.job, c.node); got != c.want {
			t.Errorf("nodeStateIn(%q, %q) = %q; want %q", c.job, c.node, got, c.want)
		}
	}
}

// TestNodeOrder: nodes sort by role (servers first), then by the number in
// their names, not as strings.
func TestNodeOrder(t *testing.T) {
	names := []string{"worker-10", "worker-2", "server-1", "worker-1", "server-0", "worker-x"}
	ns := map[string]*nodeState{}
	for _, n := range names {
		role := "worker"
		if n[0] == 's' {
			role = "server"
		}
		ns[n] = &nodeState{name: n, role: role}
	}
	var got []string
	for _, n := range sortedNodes(ns) {
		got = append(got, n.name)
	}
	want := []string{"server-0", "server-1", "worker-1", "worker-2", "worker-10", "worker-x"}
	if !slices.Equal(got, want) {
		t.Errorf("sortedNodes = %v; want %v", got, want)
	}
}

// TestViewTTL: a job's summary view and the detail view of a job of up to
// 1,000 nodes live ViewTTL; a bigger job's detail view lives ViewTTL per
// 1,000 nodes, up to one heatmap bucket.
func TestViewTTL(t *testing.T) {
	for _, c := range []struct {
		nodes  int
		detail bool
		bucket time.Duration
		want   time.Duration
	}{
		{10, true, time.Second, ViewTTL},
		{1000, true, time.Second, ViewTTL},
		{5000, false, time.Second, ViewTTL},
		{2500, true, time.Second, 500 * time.Millisecond},
		{5000, true, time.Second, time.Second},
		{20000, true, time.Second, time.Second},
		{20000, true, 100 * time.Millisecond, ViewTTL}, // never below ViewTTL
	} {
		j := &jobState{m: &Manager{cfg: Config{Bucket: c.bucket}}}
		j.nodeCount.Store(int32(c.nodes))
		if got := j.viewTTL(viewKey{detail: c.detail}); got != c.want {
			t.Errorf("%d nodes, detail %v, bucket %v: TTL %v, want %v", c.nodes, c.detail, c.bucket, got, c.want)
		}
	}
}

// TestViewSince: a big job's detail view, which lives a heatmap bucket, is
// stale once the bucket it was built in has ended (the console's view and
// the timeline's frame then share one build a bucket); other views live
// their TTL from their build.
func TestViewSince(t *testing.T) {
	b0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		nodes   int
		detail  bool
		builtAt time.Duration // after the start of the job's first bucket
		now     time.Duration
		fresh   bool
	}{
		{"big, same bucket", 20000, true, 3100 * time.Millisecond, 3900 * time.Millisecond, true},
		{"big, the bucket ended", 20000, true, 3900 * time.Millisecond, 4100 * time.Millisecond, false},
		{"big, not detail: its TTL", 20000, false, 3900 * time.Millisecond, 4050 * time.Millisecond, true},
		{"small: its TTL", 100, true, 3900 * time.Millisecond, 4050 * time.Millisecond, true},
		{"small, past its TTL", 100, true, 3900 * time.Millisecond, 4150 * time.Millisecond, false},
	} {
		j := &jobState{m: &Manager{cfg: Config{Bucket: time.Second}}, bucket0: b0}
		j.nodeCount.Store(int32(c.nodes))
		key := viewKey{detail: c.detail}
		built, now := b0.Add(c.builtAt), b0.Add(c.now)
		views := viewCache{key: {v: &consolepb.JobView{}, at: built}}
		ttl := j.viewTTL(key)
		if got := views.fresh(key, now, ttl, j.viewSince(key, now, ttl)) != nil; got != c.fresh {
			t.Errorf("%s: fresh %v, want %v", c.name, got, c.fresh)
		}
	}
}
