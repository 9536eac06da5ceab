package consoleapi

import (
	"cmp"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// This file trims a job's detail view to a subscription's ViewWindow: what
// the client shows of it. Backend views are immutable and shared by every
// client; a trimmed view shares their parts and copies nothing it does not
// change. The console trims what a Backend's View returns (TrimView); a
// WindowBackend builds the window itself and must return what TrimView
// would make of its whole view.

// MaxWindowRows bounds ViewWindow.limit.
const MaxWindowRows = 10_000

// Node orders a window may ask for.
const (
	SortListed = ""      // as the scheduler lists nodes: servers, then workers, by index
	SortRatio  = "ratio" // highest BPT (comm time) / mean first
	SortName   = "name"
)

// Figures returns v without the fields in skip: a shallow copy whose other
// fields share v's values (v must not change afterwards; the backend's views
// never do).
func Figures(v *consolepb.JobView, skip map[protoreflect.Name]bool) *consolepb.JobView {
	out := &consolepb.JobView{}
	dst := out.ProtoReflect()
	v.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		if !skip[fd.Name()] {
			dst.Set(fd, val)
		}
		return true
	})
	return out
}

// TrimView returns v as a client with window w sees it: node rows filtered,
// sorted and windowed (nodes_total, nodes_offset), heatmap rows merged down
// to w.heatmap_rows by max, each chart's slowest w.chart_series series.
// Without a window, or for a summary view (no nodes), v itself.
func TrimView(v *consolepb.JobView, w *consolepb.ViewWindow) *consolepb.JobView {
	if !Trims(v, w) {
		return v
	}
	out := WindowNodes(v, w)
	out.Heatmap = MergeRows(v.GetHeatmap(), int(w.GetHeatmapRows()))
	out.Charts = SlowestSeries(v.GetCharts(), int(w.GetChartSeries()))
	return out
}

// Trims says whether TrimView(v, w) is a window of v rather than v.
func Trims(v *consolepb.JobView, w *consolepb.ViewWindow) bool {
	return w != nil && v != nil && (len(v.GetNodes()) > 0 || v.GetHeatmap() != nil)
}

// windowed are the fields a window replaces.
var windowed = map[protoreflect.Name]bool{"nodes": true, "heatmap": true, "charts": true}

// WindowNodes is TrimView(v, w) without its heatmap and charts: v's
// figures and the window's node rows.
func WindowNodes(v *consolepb.JobView, w *consolepb.ViewWindow) *consolepb.JobView {
	out := Figures(v, windowed)
	nodes := FilterNodes(v.GetNodes(), w.GetFilter())
	if w.GetSort() != SortListed {
		nodes = slices.Clone(nodes)
		SortNodes(nodes, w.GetSort())
	}
	out.NodesTotal = int32(len(nodes))
	off := min(max(int(w.GetOffset()), 0), len(nodes))
	end := len(nodes)
	if l := int(w.GetLimit()); l > 0 {
		end = min(off+min(l, MaxWindowRows), len(nodes))
	}
	out.NodesOffset, out.Nodes = int32(off), nodes[off:end]
	return out
}

// FilterNodes keeps the nodes whose name, role, state, class or host contain
// f (case-insensitive); all of them (the same slice) for an empty f.
func FilterNodes(nodes []*consolepb.NodeView, f string) []*consolepb.NodeView {
	f = strings.ToLower(strings.TrimSpace(f))
	if f == "" {
		return nodes
	}
	var out []*consolepb.NodeView
	for _, n := range nodes {
		if strings.Contains(strings.ToLower(n.GetName()+" "+n.GetRole()+" "+n.GetState()+" "+n.GetClass()+" "+n.GetHost()), f) {
			out = append(out, n)
		}
	}
	return out
}

// SortNodes orders nodes by ratio (highest first) or name, stably.
func SortNodes(nodes []*consolepb.NodeView, by string) {
	switch by {
	case SortRatio:
		slices.SortStableFunc(nodes, func(a, b *consolepb.NodeView) int { return cmp.Compare(b.GetRatio(), a.GetRatio()) })
	case SortName:
		slices.SortStableFunc(nodes, func(a, b *consolepb.NodeView) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
}

// MergeRows merges consecutive heatmap rows so there are at most rows of
// them (0: as they are), each cell the maximum of the merged ones: a hot
// node never disappears into a cooler neighbour's average.
func MergeRows(h *consolepb.Heatmap, rows int) *consolepb.Heatmap {
	n := len(h.GetRows())
	if rows <= 0 || n <= rows {
		return h
	}
	out := &consolepb.Heatmap{BucketSeconds: h.GetBucketSeconds(), Start: h.GetStart()}
	out.Rows = MergedRows(n, rows, func(i int) string { return h.GetRows()[i].GetNode() },
		func(i int) []float32 { return h.GetRows()[i].GetCells() })
	return out
}

// MergedRows is MergeRows' rows for n rows (n > rows > 0), row i named
// node(i) with cells(i) (which may reuse one buffer: each is read before
// the next call).
func MergedRows(n, rows int, node func(i int) string, cells func(i int) []float32) []*consolepb.HeatmapRow {
	per := (n + rows - 1) / rows
	var out []*consolepb.HeatmapRow
	for i := 0; i < n; i += per {
		to := min(i+per, n)
		m := &consolepb.HeatmapRow{Node: node(i), Last: node(to - 1), Nodes: int32(to - i)}
		for r := i; r < to; r++ {
			cs := cells(r)
			if len(cs) > len(m.Cells) {
				m.Cells = append(m.Cells, make([]float32, len(cs)-len(m.Cells))...)
			}
			for c, x := range cs {
				if x > m.Cells[c] {
					m.Cells[c] = x
				}
			}
		}
		out = append(out, m)
	}
	return out
}

// SlowestSeries keeps, per chart (the name's prefix before "/"), the n
// series of the slowest nodes — the highest latest BPT, the lowest latest
// server speed — in their listed order; every series for n ≤ 0.
func SlowestSeries(all []*consolepb.Series, n int) []*consolepb.Series {
	if n <= 0 {
		return all
	}
	var out []*consolepb.Series
	for _, i := range Slowest(len(all), n, func(i int) string { return all[i].GetName() }, func(i int) float64 {
		if v := all[i].GetValues(); len(v) > 0 {
			return v[len(v)-1]
		}
		return 0
	}) {
		out = append(out, all[i])
	}
	return out
}

// Slowest is which of count series SlowestSeries keeps (n > 0), in their
// order: series i is named name(i) and its latest value is last(i).
func Slowest(count, n int, name func(i int) string, last func(i int) float64) []int {
	byChart := map[string][]int{}
	for i := range count {
		prefix, _, _ := strings.Cut(name(i), "/")
		byChart[prefix] = append(byChart[prefix], i)
	}
	keep := make([]bool, count)
	for prefix, idx := range byChart {
		slices.SortStableFunc(idx, func(a, b int) int {
			if prefix == "speed" {
				return cmp.Compare(last(a), last(b)) // slowest servers: lowest speed
			}
			return cmp.Compare(last(b), last(a))
		})
		for _, i := range idx[:min(n, len(idx))] {
			keep[i] = true
		}
	}
	var out []int
	for i, k := range keep {
		if k {
			out = append(out, i)
		}
	}
	return out
}
