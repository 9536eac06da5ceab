package client

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// ApplyPatch returns the job view that p makes of old, the view a client
// held (a subscription with patches: Subscribe.patches). old is not
// changed; the result shares what did not change with it and with p.
func ApplyPatch(old *consolepb.JobView, p *consolepb.JobPatch) *consolepb.JobView {
	base := old
	if p.GetFigures() != nil {
		base = p.GetFigures()
	}
	out := &consolepb.JobView{}
	dst := out.ProtoReflect()
	base.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch fd.Name() {
		case "nodes", "heatmap", "charts", "actions", "policies", "spec_yaml":
		default:
			dst.Set(fd, v)
		}
		return true
	})
	out.Actions, out.Policies, out.SpecYaml = old.GetActions(), old.GetPolicies(), old.GetSpecYaml()
	if a := p.GetActions(); a != nil {
		out.Actions = a.GetActions()
	}
	if pl := p.GetPolicies(); pl != nil {
		out.Policies = pl.GetPolicies()
	}
	if p.SpecYaml != nil {
		out.SpecYaml = p.GetSpecYaml()
	}
	out.Nodes = patchNodes(old.GetNodes(), p)
	out.Heatmap = patchHeatmap(old.GetHeatmap(), p)
	out.Charts = patchCharts(old.GetCharts(), p)
	return out
}

func patchNodes(old []*consolepb.NodeView, p *consolepb.JobPatch) []*consolepb.NodeView {
	if len(p.GetNodes()) == 0 && p.GetOrder() == nil {
		return old
	}
	byName := make(map[string]*consolepb.NodeView, len(old)+len(p.GetNodes()))
	names := make([]string, len(old))
	for i, n := range old {
		byName[n.GetName()] = n
		names[i] = n.GetName()
	}
	for _, n := range p.GetNodes() {
		byName[n.GetName()] = n
	}
	if o := p.GetOrder(); o != nil {
		names = o.GetNames()
	}
	out := make([]*consolepb.NodeView, 0, len(names))
	for _, name := range names {
		if n, ok := byName[name]; ok {
			out = append(out, n)
		}
	}
	return out
}

func patchHeatmap(old *consolepb.Heatmap, p *consolepb.JobPatch) *consolepb.Heatmap {
	if h := p.GetHeatmap(); h != nil {
		if len(h.GetRows()) == 0 && h.GetStart() == nil {
			return nil
		}
		return h
	}
	t := p.GetHeatmapTail()
	if t == nil || old == nil {
		return old
	}
	out := &consolepb.Heatmap{BucketSeconds: old.GetBucketSeconds(), Start: t.GetStart()}
	width, tail, shift := int(t.GetWidth()), int(t.GetTail()), int(t.GetShift())
	for i, r := range old.GetRows() {
		row := &consolepb.HeatmapRow{Node: r.GetNode(), Nodes: r.GetNodes(), Last: r.GetLast(), Cells: make([]float32, width)}
		for c := 0; c < width-tail; c++ {
			if c+shift < len(r.GetCells()) {
				row.Cells[c] = r.GetCells()[c+shift]
			}
		}
		if cells := t.GetCells(); (i+1)*tail <= len(cells) {
			copy(row.Cells[width-tail:], cells[i*tail:(i+1)*tail])
		}
		out.Rows = append(out.Rows, row)
	}
	return out
}

func patchCharts(old []*consolepb.Series, p *consolepb.JobPatch) []*consolepb.Series {
	if p.GetChartNames() == nil && len(p.GetCharts()) == 0 && len(p.GetChartTails()) == 0 {
		return old
	}
	byName := make(map[string]*consolepb.Series, len(old))
	names := make([]string, len(old))
	for i, s := range old {
		byName[s.GetName()] = s
		names[i] = s.GetName()
	}
	for _, t := range p.GetChartTails() {
		h := byName[t.GetName()]
		if h == nil {
			continue
		}
		s := proto.CloneOf(h)
		length, shift, vals := int(t.GetLength()), int(t.GetShift()), t.GetValues()
		s.Values = make([]float64, length)
		for c := 0; c < length-len(vals); c++ {
			if c+shift < len(h.GetValues()) {
				s.Values[c] = h.GetValues()[c+shift]
			}
		}
		copy(s.Values[max(length-len(vals), 0):], vals)
		byName[t.GetName()] = s
	}
	for _, s := range p.GetCharts() {
		byName[s.GetName()] = s
	}
	if n := p.GetChartNames(); n != nil {
		names = n.GetNames()
	}
	out := make([]*consolepb.Series, 0, len(names))
	for _, name := range names {
		if s, ok := byName[name]; ok {
			out = append(out, s)
		}
	}
	return out
}
