package console

import (
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/consoleapi"
)

// This file makes a job's JobPatch: what changed between the view a client
// holds and the current one, so that a subscription with patches costs the
// rows that changed and the last heatmap and chart columns rather than the
// whole view (client.ApplyPatch undoes it). Both views are what the client
// sees (trimView'd).

// diffPatch returns the patch that turns old into cur, and whether anything
// changed at all.
func diffPatch(old, cur *consolepb.JobView) (*consolepb.JobPatch, bool) {
	p := &consolepb.JobPatch{Name: cur.GetName()}
	changed := false
	if f := consoleapi.Figures(cur, heavy); !sameFigures(consoleapi.Figures(old, heavy), f) {
		p.Figures, changed = f, true
	}
	if !sameList(old.GetActions(), cur.GetActions()) {
		p.Actions, changed = &consolepb.ActionList{Actions: cur.GetActions()}, true
	}
	if !sameList(old.GetPolicies(), cur.GetPolicies()) {
		p.Policies, changed = &consolepb.PolicyList{Policies: cur.GetPolicies()}, true
	}
	if old.GetSpecYaml() != cur.GetSpecYaml() {
		p.SpecYaml, changed = proto.String(cur.GetSpecYaml()), true
	}
	if diffNodes(p, old.GetNodes(), cur.GetNodes()) {
		changed = true
	}
	shift, ok := diffHeatmap(p, old.GetHeatmap(), cur.GetHeatmap())
	if ok {
		changed = true
	}
	if diffCharts(p, old.GetCharts(), cur.GetCharts(), shift) {
		changed = true
	}
	return p, changed
}

// sameFigures compares two views' figures by their encoding (NaN equals
// NaN, as the client sees it).
func sameFigures(a, b *consolepb.JobView) bool {
	sa, oka := viewSum(a)
	sb, okb := viewSum(b)
	if oka && okb {
		return sa == sb
	}
	return proto.Equal(a, b)
}

// sameList says whether two lists hold equal messages in order.
func sameList[M proto.Message](a, b []M) bool {
	return slices.EqualFunc(a, b, func(x, y M) bool { return proto.Message(x) == proto.Message(y) || proto.Equal(x, y) })
}

// diffNodes puts the new or changed rows, and the order when it changed,
// into p.
func diffNodes(p *consolepb.JobPatch, old, cur []*consolepb.NodeView) bool {
	held := make(map[string]*consolepb.NodeView, len(old))
	for _, n := range old {
		held[n.GetName()] = n
	}
	sameOrder := len(old) == len(cur)
	for i, n := range cur {
		if sameOrder && old[i].GetName() != n.GetName() {
			sameOrder = false
		}
		if h, ok := held[n.GetName()]; !ok || h != n && !proto.Equal(h, n) {
			p.Nodes = append(p.Nodes, n)
		}
	}
	if !sameOrder {
		p.Order = &consolepb.NodeOrder{Names: make([]string, len(cur))}
		for i, n := range cur {
			p.Order.Names[i] = n.GetName()
		}
	}
	return len(p.Nodes) > 0 || p.Order != nil
}

// diffHeatmap puts the heatmap into p: whole when its rows or bucket
// changed, else its last columns that differ from the held ones shifted by
// the buckets it moved on. It returns that shift, and whether it changed.
func diffHeatmap(p *consolepb.JobPatch, old, cur *consolepb.Heatmap) (int, bool) {
	if cur == nil {
		if old != nil {
			p.Heatmap = &consolepb.Heatmap{} // gone: an empty one
			return 0, true
		}
		return 0, false
	}
	if !sameRows(old, cur) || old.GetStart() == nil || cur.GetStart() == nil {
		p.Heatmap = cur
		return 0, true
	}
	b := cur.GetBucketSeconds()
	shift := int(math.Round(cur.GetStart().AsTime().Sub(old.GetStart().AsTime()).Seconds() / b))
	width := 0
	for _, r := range cur.GetRows() {
		width = max(width, len(r.GetCells()))
	}
	if shift < 0 || b <= 0 || anyRagged(cur.GetRows(), width) {
		p.Heatmap = cur
		return 0, true
	}
	keep := width // leading columns equal to the held ones shifted
	for i, r := range cur.GetRows() {
		held := old.GetRows()[i].GetCells()
		for c := 0; c < keep; c++ {
			if c+shift >= len(held) || !sameFloat32(held[c+shift], r.GetCells()[c]) {
				keep = c
				break
			}
		}
	}
	if keep == width && shift == 0 && width == len(old.GetRows()[0].GetCells()) {
		return 0, false
	}
	tail := width - keep
	t := &consolepb.HeatmapTail{Start: cur.GetStart(), Width: int32(width), Tail: int32(tail), Shift: int32(shift),
		Cells: make([]float32, 0, tail*len(cur.GetRows()))}
	for _, r := range cur.GetRows() {
		t.Cells = append(t.Cells, r.GetCells()[keep:]...)
	}
	p.HeatmapTail = t
	return shift, true
}

// sameRows says whether two heatmaps have the same rows (nodes and merges)
// and bucket.
func sameRows(a, b *consolepb.Heatmap) bool {
	if a == nil || a.GetBucketSeconds() != b.GetBucketSeconds() || len(a.GetRows()) != len(b.GetRows()) || len(b.GetRows()) == 0 {
		return false
	}
	for i, r := range a.GetRows() {
		s := b.GetRows()[i]
		if r.GetNode() != s.GetNode() || r.GetNodes() != s.GetNodes() || r.GetLast() != s.GetLast() {
			return false
		}
	}
	return true
}

func anyRagged(rows []*consolepb.HeatmapRow, width int) bool {
	for _, r := range rows {
		if len(r.GetCells()) != width {
			return true
		}
	}
	return false
}

// diffCharts puts the chart series into p: the order when it changed, new
// series whole, the others' last values that differ from the held ones
// shifted.
func diffCharts(p *consolepb.JobPatch, old, cur []*consolepb.Series, shift int) bool {
	held := make(map[string]*consolepb.Series, len(old))
	for _, s := range old {
		held[s.GetName()] = s
	}
	changed := false
	if !slices.EqualFunc(old, cur, func(a, b *consolepb.Series) bool { return a.GetName() == b.GetName() }) {
		p.ChartNames = &consolepb.ChartNames{}
		for _, s := range cur {
			p.ChartNames.Names = append(p.ChartNames.Names, s.GetName())
		}
		changed = true
	}
	for _, s := range cur {
		h, ok := held[s.GetName()]
		if !ok || h.GetUnit() != s.GetUnit() || h.GetIntervalSeconds() != s.GetIntervalSeconds() {
			p.Charts = append(p.Charts, s)
			changed = true
			continue
		}
		v, hv := s.GetValues(), h.GetValues()
		keep := len(v)
		for c := range v {
			if c+shift >= len(hv) || !sameFloat64(hv[c+shift], v[c]) {
				keep = c
				break
			}
		}
		if keep == len(v) && len(v) == len(hv) && shift == 0 {
			continue
		}
		p.ChartTails = append(p.ChartTails, &consolepb.SeriesTail{Name: s.GetName(), Length: int32(len(v)), Shift: int32(shift),
			Values: v[keep:]})
		changed = true
	}
	return changed
}

func sameFloat32(a, b float32) bool { return a == b || a != a && b != b }
func sameFloat64(a, b float64) bool { return a == b || a != a && b != b }
