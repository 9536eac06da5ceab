package console

import (
	"cmp"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// This file trims a job's detail view to a subscription's ViewWindow: what
// the client shows of it. The backend's views are immutable and shared by
// every client; a trimmed view shares their parts and copies nothing it does
// not change.

// MaxWindowRows bounds ViewWindow.limit.
const MaxWindowRows = 10_000

// Node orders a window may ask for.
const (
	SortListed = ""      // as the scheduler lists nodes: servers, then workers, by index
	SortRatio  = "ratio" // highest BPT (comm time) / mean first
	SortName   = "name"
)

// heavy are the JobView fields a window trims, and that patches carry apart
// from the job's figures.
var heavy = map[protoreflect.Name]bool{
	"nodes": true, "heatmap": true, "charts": true, "actions": true, "policies": true, "spec_yaml": true,
}

// figures returns v without the fields in skip: a shallow copy whose other
// fields share v's values (v must not change afterwards; the backend's views
// never do).
func figures(v *consolepb.JobView, skip map[protoreflect.Name]bool) *consolepb.JobView {
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

// trimView returns v as a client with window w sees it: node rows filtered,
// sorted and windowed (nodes_total, nodes_offset), heatmap rows merged down
// to w.heatmap_rows by max, each chart's slowest w.chart_series series.
// Without a window, or for a summary view (no nodes), v itself.
func trimView(v *consolepb.JobView, w *consolepb.ViewWindow) *consolepb.JobView {
	if w == nil || v == nil || len(v.GetNodes()) == 0 && v.GetHeatmap() == nil {
		return v
	}
	out := figures(v, map[protoreflect.Name]bool{"nodes": true, "heatmap": true, "charts": true})
	nodes := filterNodes(v.GetNodes(), w.GetFilter())
	if w.GetSort() != SortListed {
		nodes = slices.Clone(nodes)
		sortNodes(nodes, w.GetSort())
	}
	out.NodesTotal = int32(len(nodes))
	off := min(max(int(w.GetOffset()), 0), len(nodes))
	end := len(nodes)
	if l := int(w.GetLimit()); l > 0 {
		end = min(off+min(l, MaxWindowRows), len(nodes))
	}
	out.NodesOffset, out.Nodes = int32(off), nodes[off:end]
	out.Heatmap = mergeRows(v.GetHeatmap(), int(w.GetHeatmapRows()))
	out.Charts = slowestSeries(v.GetCharts(), int(w.GetChartSeries()))
	return out
}

// filterNodes keeps the nodes whose name, role, state, class or host contain
// f (case-insensitive); all of them (the same slice) for an empty f.
func filterNodes(nodes []*consolepb.NodeView, f string) []*consolepb.NodeView {
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

// sortNodes orders nodes by ratio (highest first) or name, stably.
func sortNodes(nodes []*consolepb.NodeView, by string) {
	switch by {
	case SortRatio:
		slices.SortStableFunc(nodes, func(a, b *consolepb.NodeView) int { return cmp.Compare(b.GetRatio(), a.GetRatio()) })
	case SortName:
		slices.SortStableFunc(nodes, func(a, b *consolepb.NodeView) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
}

// mergeRows merges consecutive heatmap rows so there are at most rows of
// them (0: as they are), each cell the maximum of the merged ones: a hot
// node never disappears into a cooler neighbour's average.
func mergeRows(h *consolepb.Heatmap, rows int) *consolepb.Heatmap {
	n := len(h.GetRows())
	if rows <= 0 || n <= rows {
		return h
	}
	per := (n + rows - 1) / rows
	out := &consolepb.Heatmap{BucketSeconds: h.GetBucketSeconds(), Start: h.GetStart()}
	for i := 0; i < n; i += per {
		group := h.GetRows()[i:min(i+per, n)]
		width := 0
		for _, r := range group {
			width = max(width, len(r.GetCells()))
		}
		m := &consolepb.HeatmapRow{Node: group[0].GetNode(), Last: group[len(group)-1].GetNode(), Nodes: int32(len(group)),
			Cells: make([]float32, width)}
		for _, r := range group {
			for c, x := range r.GetCells() {
				if x > m.Cells[c] {
					m.Cells[c] = x
				}
			}
		}
		out.Rows = append(out.Rows, m)
	}
	return out
}

// slowestSeries keeps, per chart (the name's prefix before "/"), the n
// series of the slowest nodes — the highest latest BPT, the lowest latest
// server speed — in their listed order; every series for n ≤ 0.
func slowestSeries(all []*consolepb.Series, n int) []*consolepb.Series {
	if n <= 0 {
		return all
	}
	byChart := map[string][]int{}
	for i, s := range all {
		prefix, _, _ := strings.Cut(s.GetName(), "/")
		byChart[prefix] = append(byChart[prefix], i)
	}
	keep := make([]bool, len(all))
	for prefix, idx := range byChart {
		last := func(i int) float64 {
			if v := all[i].GetValues(); len(v) > 0 {
				return v[len(v)-1]
			}
			return 0
		}
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
	var out []*consolepb.Series
	for i, s := range all {
		if keep[i] {
			out = append(out, s)
		}
	}
	return out
}

// MaxWindowFilter bounds ViewWindow.filter.
const MaxWindowFilter = 256

// checkWindow refuses windows whose numbers make no sense.
func checkWindow(w *consolepb.ViewWindow) error {
	if w == nil {
		return nil
	}
	switch {
	case w.GetSort() != SortListed && w.GetSort() != SortRatio && w.GetSort() != SortName:
		return errorf(codes.InvalidArgument, "console: subscribe: window.sort %q must be empty, %q or %q", w.GetSort(), SortRatio, SortName)
	case len(w.GetFilter()) > MaxWindowFilter:
		return errorf(codes.InvalidArgument, "console: subscribe: window.filter is %d bytes (at most %d)", len(w.GetFilter()), MaxWindowFilter)
	case w.GetOffset() < 0 || w.GetLimit() < 0 || w.GetLimit() > MaxWindowRows:
		return errorf(codes.InvalidArgument, "console: subscribe: window offset %d and limit %d must not be negative, limit at most %d",
			w.GetOffset(), w.GetLimit(), MaxWindowRows)
	case w.GetHeatmapRows() < 0 || w.GetChartSeries() < 0:
		return errorf(codes.InvalidArgument, "console: subscribe: window heatmap_rows %d and chart_series %d must not be negative",
			w.GetHeatmapRows(), w.GetChartSeries())
	}
	return nil
}
