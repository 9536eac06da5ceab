package tui

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// An allreduce job (cluster.exchange ring or rat) has no parameter
// servers: its fourth panel draws the workers' racks and how the current
// members sum gradients — the ring's order, or each RAT tree's root and
// which node aggregates whom — with the bytes that crossed regions. All of
// it is the JobView's exchange, planned by the scheduler with the
// runtime's own plans for the members of the batch split in force.

// shortWorker is worker-3's short name, w3 (other names as they are).
func shortWorker(name string) string {
	if i, ok := strings.CutPrefix(name, "worker-"); ok {
		return "w" + i
	}
	return name
}

// shortWorkers is names, short, space-separated.
func shortWorkers(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = shortWorker(n)
	}
	return strings.Join(out, " ")
}

func (v *jobView) allreducePanel(ex *consolepb.ExchangeTopology, w, h int, focused bool) string {
	st := &v.c.st
	members := 0
	for _, r := range ex.GetRacks() {
		members += len(r.GetMembers())
	}
	lines := []string{fmt.Sprintf("%s · %d workers · %d regions (wN = worker-N)", ex.GetMode(), members, len(ex.GetRacks()))}
	if v.c.replaying(v.c.job) != nil {
		// The timeline records no exchange: a replay shows today's.
		lines = append(lines, st.muted.Render(fmt.Sprintf("now, at iteration %d: the timeline keeps no exchange", ex.GetIteration())))
	}
	for _, r := range ex.GetRacks() {
		lines = append(lines, fmt.Sprintf("%-8s %s", r.GetRegion(), shortWorkers(r.GetMembers())))
	}
	var across []string
	for _, b := range v.job.GetRegionBytes() {
		across = append(across, fmt.Sprintf("%s→%s %s", b.GetFromRegion(), b.GetToRegion(), byteSize(b.GetBytes())))
	}
	lines = append(lines, "across   "+orNone(strings.Join(across, " · ")))
	title := "allreduce: topology and trees"
	switch {
	case len(ex.GetRingOrder()) > 0:
		title = "allreduce: topology and ring"
		lines = append(lines, "", st.header.Render("RING (⇒ crosses regions)"), ringLine(ex))
	case len(ex.GetTrees()) > 0:
		lines = append(lines, "", st.header.Render(fmt.Sprintf("%-4s %-5s %s", "TREE", "ROOT", "AGGREGATOR ← WHAT IT ADDS")))
		for _, t := range ex.GetTrees() {
			lines = append(lines, treeLine(t))
		}
		if more := int(ex.GetTreesTotal()) - len(ex.GetTrees()); more > 0 {
			lines = append(lines, st.muted.Render(fmt.Sprintf("… %d more trees", more)))
		}
	}
	return v.c.box(v.panelTitle(panelPS, title), strings.Join(lines, "\n"), w, h, focused)
}

// ringLine is the ring's order, ⇒ where it crosses into another region,
// back to the first member.
func ringLine(ex *consolepb.ExchangeTopology) string {
	region := map[string]string{}
	for _, r := range ex.GetRacks() {
		for _, m := range r.GetMembers() {
			region[m] = r.GetRegion()
		}
	}
	order := ex.GetRingOrder()
	var b strings.Builder
	for i, m := range order {
		b.WriteString(shortWorker(m))
		if region[order[(i+1)%len(order)]] != region[m] {
			b.WriteString(" ⇒ ")
		} else {
			b.WriteString(" → ")
		}
	}
	b.WriteString(shortWorker(order[0]))
	return b.String()
}

// treeLine is one tree: its chunk, its root, then each aggregator (the
// root first) with the nodes whose sums it adds, every level's together.
func treeLine(t *consolepb.ExchangeTree) string {
	if t.GetRoot() == "" {
		return fmt.Sprintf("%-4d –", t.GetChunk())
	}
	var parts []string
	var agg string
	var adds []string
	flush := func() {
		if agg != "" {
			parts = append(parts, shortWorker(agg)+" ← "+strings.Join(adds, " "))
		}
	}
	for _, a := range t.GetAggregations() {
		if a.GetAggregator() != agg {
			flush()
			agg, adds = a.GetAggregator(), nil
		}
		adds = append(adds, shortWorkers(a.GetMembers()))
	}
	flush()
	return fmt.Sprintf("%-4d %-5s %s", t.GetChunk(), shortWorker(t.GetRoot()), strings.Join(parts, " · "))
}

// byteSize is a count of bytes in B, KB, MB, GB.
func byteSize(n int64) string {
	v := float64(n)
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + " GB"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + " MB"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " KB"
	}
	return strconv.FormatInt(n, 10) + " B"
}
