// Package topology places a job's nodes in the network: each node's rack and pod labels, the
// region ("pod/rack") they make, and an order of the nodes that keeps neighbours in one region.
// The allreduce plans (core/reduceplan) are built on it, the scheduler's coordinator hands the
// labels to the roles, and the console counts bytes per pair of regions. Pure: no I/O.
package topology

import (
	"cmp"
	"slices"
)

// Place is a node's position in the network: its rack and pod labels
// (either may be empty).
type Place struct{ Rack, Pod string }

// Topology places node i at Topology[i].
type Topology []Place

// Rack returns node i's rack region: "pod/rack". Nodes without a rack
// label share their pod's unracked region ("pod/"), and nodes without any
// label share one region ("/"), as the spec says unlabelled nodes do.
func (t Topology) Rack(i int) string { return Region(t.at(i)) }

// Region is the rack region of a node placed at p (see Topology.Rack).
func Region(p Place) string { return p.Pod + "/" + p.Rack }

// Pod returns node i's pod label ("" when none).
func (t Topology) Pod(i int) string { return t.at(i).Pod }

func (t Topology) at(i int) Place {
	if i < len(t) {
		return t[i]
	}
	return Place{}
}

// RackRegion is Rack as a region function (for reduceplan.Plan.Bytes).
func (t Topology) RackRegion() func(int) string { return t.Rack }

func (t Topology) labelled() bool {
	for _, p := range t {
		if p.Rack != "" || p.Pod != "" {
			return true
		}
	}
	return false
}

// Order returns the node indexes sorted by pod, then rack, then index, so
// that neighbours in the order share regions as far as possible.
func (t Topology) Order(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if !t.labelled() {
		return idx
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := cmp.Compare(t.Pod(a), t.Pod(b)); c != 0 {
			return c
		}
		return cmp.Compare(t.Rack(a), t.Rack(b))
	})
	return idx
}
