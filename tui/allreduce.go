package tui

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/allreduce"
	"github.com/kelpie/kelpie/runtime/spec"
)

// An allreduce job (cluster.exchange ring or rat) has no parameter
// servers: its fourth panel draws the workers' topology and how the current
// members sum gradients — the ring's order, or each RAT tree's root and
// which node aggregates whom — from the job's spec and its live workers,
// with the bytes that crossed regions. The plans are the runtime's own
// (runtime/allreduce), built for the same members as the workers build
// them.

// allreduceSpec is the job's spec when it is an allreduce job.
func (v *jobView) allreduceSpec() *spec.Spec {
	src := v.job.GetSpecYaml()
	if src == "" {
		return nil
	}
	s, err := spec.Parse(v.job.GetName()+".yaml", []byte(src))
	if err != nil || (s.Cluster.Exchange != spec.ExchangeRing && s.Cluster.Exchange != spec.ExchangeRAT) {
		return nil
	}
	return s
}

// allreduceMembers are the workers taking part now (not stopped or
// failed), by index, ascending.
func allreduceMembers(j *kelpiepb.JobView) []int {
	var out []int
	for _, n := range j.GetNodes() {
		if n.GetRole() != "worker" || n.GetState() == "stopped" || n.GetState() == "failed" {
			continue
		}
		if i, err := strconv.Atoi(strings.TrimPrefix(n.GetName(), "worker-")); err == nil {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// shortWorker is worker-3's short name, w3.
func shortWorker(i int) string { return "w" + strconv.Itoa(i) }

func (v *jobView) allreducePanel(s *spec.Spec, w, h int, focused bool) string {
	st := &v.c.st
	members := allreduceMembers(v.job)
	topo := make(allreduce.Topology, len(members))
	for k, m := range members {
		l := s.Cluster.Topology[spec.WorkerName(m)]
		topo[k] = allreduce.Place{Rack: l.Rack, Pod: l.Pod}
	}
	// Racks in topology order, with their members.
	var regions []string
	byRegion := map[string][]string{}
	for _, k := range allreduce.RingOrder(len(members), topo) {
		r := topo.Rack(k)
		if _, ok := byRegion[r]; !ok {
			regions = append(regions, r)
		}
		byRegion[r] = append(byRegion[r], shortWorker(members[k]))
	}
	kind := s.Cluster.Exchange
	lines := []string{fmt.Sprintf("%s · %d workers · %d regions (wN = worker-N)", kind, len(members), len(regions))}
	for _, r := range regions {
		lines = append(lines, fmt.Sprintf("%-8s %s", r, strings.Join(byRegion[r], " ")))
	}
	var across []string
	for _, b := range v.job.GetRegionBytes() {
		across = append(across, fmt.Sprintf("%s→%s %s", b.GetFromRegion(), b.GetToRegion(), byteSize(b.GetBytes())))
	}
	lines = append(lines, "across   "+orNone(strings.Join(across, " · ")))
	if len(members) >= 2 {
		if kind == spec.ExchangeRing {
			lines = append(lines, "", st.header.Render("RING (⇒ crosses regions)"), ringLine(members, topo))
		} else {
			lines = append(lines, "", st.header.Render(fmt.Sprintf("%-4s %-5s %s", "TREE", "ROOT", "AGGREGATOR ← WHAT IT ADDS")))
			plan := allreduce.RAT(len(members), 1<<16, topo, 0)
			for c := range plan.Chunks {
				lines = append(lines, treeLine(plan, c, members))
			}
		}
	}
	return v.c.box(v.panelTitle(panelPS, "allreduce: topology and "+map[string]string{"ring": "ring", "rat": "trees"}[kind]), strings.Join(lines, "\n"), w, h, focused)
}

// ringLine is the ring's order, ⇒ where it crosses into another region.
func ringLine(members []int, topo allreduce.Topology) string {
	order := allreduce.RingOrder(len(members), topo)
	var b strings.Builder
	for i, k := range order {
		b.WriteString(shortWorker(members[k]))
		next := order[(i+1)%len(order)]
		if topo.Rack(next) != topo.Rack(k) {
			b.WriteString(" ⇒ ")
		} else {
			b.WriteString(" → ")
		}
	}
	b.WriteString(shortWorker(members[order[0]]))
	return b.String()
}

// treeLine is tree c: its root, then each aggregator (the root first) with
// the nodes whose sums it adds.
func treeLine(p *allreduce.Plan, c int, members []int) string {
	root, children := p.Tree(c)
	if root < 0 {
		return fmt.Sprintf("%-4d –", c)
	}
	aggs := []int{root}
	for a := range children {
		if a != root {
			aggs = append(aggs, a)
		}
	}
	slices.Sort(aggs[1:])
	var parts []string
	for _, a := range aggs {
		var kids []string
		for _, k := range children[a] {
			kids = append(kids, shortWorker(members[k]))
		}
		parts = append(parts, shortWorker(members[a])+" ← "+strings.Join(kids, " "))
	}
	return fmt.Sprintf("%-4d %-5s %s", c, shortWorker(members[root]), strings.Join(parts, " · "))
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
