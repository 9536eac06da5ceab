package tui

import (
	"cmp"
	"slices"
	"strings"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// previewLines are an action's preview in its detail (the approval view):
// whether it can start, what it costs, what it is predicted to do.
func previewLines(p *consolepb.ActionPreview, label func(string) string, st *styles) []string {
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

// causeLines are the heatmap's detail lines: every straggler's cause, one
// a line, the strongest first ("server-1: link 4.0× median — pull wait on
// every worker", "worker-2: compute 3.1× median"); none when no node
// straggles.
func causeLines(nodes []*consolepb.NodeView) []string {
	var with []*consolepb.NodeView
	for _, n := range nodes {
		if n.GetCause().GetKind() != "" {
			with = append(with, n)
		}
	}
	slices.SortStableFunc(with, func(a, b *consolepb.NodeView) int {
		return cmp.Or(cmp.Compare(b.GetCause().GetRatio(), a.GetCause().GetRatio()), strings.Compare(a.GetName(), b.GetName()))
	})
	lines := make([]string, len(with))
	for i, n := range with {
		lines[i] = n.GetName() + ": " + n.GetCause().GetDetail()
	}
	return lines
}

// maxCauseLines bounds the detail lines under the heatmap; the rest are
// counted on the last one.
const maxCauseLines = 3
