package tui

import (
	"fmt"
	"math"
	"strings"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// goodputPhases are the ledger's phases in the order the bar stacks them,
// each with its glyph (readable without colour): productive time first.
var goodputPhases = []struct {
	name  string
	glyph string
}{
	{"computing", "█"}, {"communicating", "▓"}, {"waiting", "▒"}, {"recovering", "R"},
	{"paused", "P"}, {"queued", "Q"}, {"idle", "·"},
}

// goodputBar is the job's goodput ledger as a stacked bar of w cells, one
// glyph per phase (cells apportioned by largest remainder, so they add up
// to w), or "" without a ledger.
func goodputBar(g *consolepb.Goodput, w int) string {
	if g == nil || w <= 0 {
		return ""
	}
	var total float64
	for _, p := range goodputPhases {
		total += g.GetPhases()[p.name]
	}
	if total <= 0 {
		return strings.Repeat(" ", w)
	}
	cells := make([]int, len(goodputPhases))
	rem := make([]float64, len(goodputPhases))
	used := 0
	for i, p := range goodputPhases {
		x := g.GetPhases()[p.name] / total * float64(w)
		cells[i] = int(math.Floor(x))
		rem[i] = x - float64(cells[i])
		used += cells[i]
	}
	for ; used < w; used++ {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		cells[best]++
		rem[best] = -1
	}
	var b strings.Builder
	for i, p := range goodputPhases {
		b.WriteString(strings.Repeat(p.glyph, cells[i]))
	}
	return b.String()
}

// goodputText is the job view's goodput line part: the bar, the
// productive share and the ETA ("goodput [███▓▓▒··] 62% · ETA 1m40s").
func goodputText(g *consolepb.Goodput, w int) string {
	if g == nil {
		return ""
	}
	s := fmt.Sprintf("goodput [%s] %.0f%%", goodputBar(g, w), 100*g.GetProductiveShare())
	if g.EtaS != nil {
		s += " · ETA " + durationText(g.GetEtaS())
	}
	return s
}

// durationText is seconds as "45s", "3m05s", "2h10m".
func durationText(s float64) string {
	d := int64(math.Round(s))
	switch {
	case d < 60:
		return fmt.Sprintf("%ds", d)
	case d < 3600:
		return fmt.Sprintf("%dm%02ds", d/60, d%60)
	}
	return fmt.Sprintf("%dh%02dm", d/3600, d%3600/60)
}

// hungText is the job view's warning for a hung job: whom it waits for
// (short: without the bound and the servers).
func hungText(h *consolepb.Hung, short bool) string {
	if h == nil {
		return ""
	}
	if short && len(h.GetMissing()) > 0 {
		return "⚠ HUNG: waiting for " + strings.Join(h.GetMissing(), ", ")
	}
	s := fmt.Sprintf("⚠ HUNG (no progress > %.0fs): waiting for %s", h.GetBoundS(), strings.Join(h.GetMissing(), ", "))
	if len(h.GetMissing()) == 0 {
		s = fmt.Sprintf("⚠ HUNG (no progress > %.0fs)", h.GetBoundS())
	}
	if len(h.GetHolding()) > 0 {
		s += " (pulls held by " + strings.Join(h.GetHolding(), ", ") + ")"
	}
	return s
}
