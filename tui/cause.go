package tui

import (
	"cmp"
	"slices"
	"strings"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// previewLines are an action's preview in its detail (the approval view):
// whether it can start, what it costs, what it is predicted to do.
func previewLines(p *kelpiepb.ActionPreview, label func(string) string, st *styles) []string {
	if p == nil {
		return nil
	}
	start := st.ok.Render("can start")
	if !p.GetCanStart() {
		start = st.straggler.Render("cannot start")
	}
	lines := []string{label("preview") + start + st.muted.Render(" · "+p.GetStart()), label("cost") + p.GetCost()}
	if p.GetPredicted() != "" {
		lines = append(lines, label("effect")+p.GetPredicted())
	}
	return lines
}

// causeLine is the heatmap's detail line: every straggler's cause, the
// strongest first ("worker-2: compute 3.1× median · server-1: link 4.0×
// median — pull wait on every worker"); "" when no node straggles.
func causeLine(nodes []*kelpiepb.NodeView) string {
	var with []*kelpiepb.NodeView
	for _, n := range nodes {
		if n.GetCause().GetKind() != "" {
			with = append(with, n)
		}
	}
	slices.SortStableFunc(with, func(a, b *kelpiepb.NodeView) int {
		return cmp.Or(cmp.Compare(b.GetCause().GetRatio(), a.GetCause().GetRatio()), strings.Compare(a.GetName(), b.GetName()))
	})
	parts := make([]string, len(with))
	for i, n := range with {
		parts[i] = n.GetName() + ": " + n.GetCause().GetDetail()
	}
	return strings.Join(parts, " · ")
}
