package manager

import (
	"slices"

	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/topology"
	"github.com/kelpie/kelpie/proto/consolepb"
)

// maxViewTrees bounds the RAT trees a view carries: one per member, so a
// big job's would be O(members²) edges; the first ones show the shape.
const maxViewTrees = 32

// exchangeView is an allreduce job's exchange at iteration next (the
// iteration the furthest worker runs: the iterations it completed), for the
// console: the members are the workers the batch split in force at next
// gives samples — as each worker's group takes them (runtime/worker's
// reducer), so a worker removed or added changes them at the split's
// iteration — placed by cluster.topology, and the ring or trees are the
// runtime's own plan for them (allreduce.Ring's order, allreduce.RAT's
// trees). nil for a PS job.
func exchangeView(s *spec.Spec, plan job.Plan, next int64) *consolepb.ExchangeTopology {
	return (*exchangeCache)(nil).view(s, plan, next)
}

// exchangeCache is the exchange a job's last view carried: the next view of
// the same spec and members shares its regions, ring and trees (planning
// 1,000 members' takes ~30 ms). Used under the job's viewMu.
type exchangeCache struct {
	spec    *spec.Spec
	members []int
	v       *consolepb.ExchangeTopology
}

// view is exchangeView, from c when c holds the plan of the same members
// (c may be nil: no cache).
func (c *exchangeCache) view(s *spec.Spec, plan job.Plan, next int64) *consolepb.ExchangeTopology {
	mode := s.Cluster.Exchange
	if mode != spec.ExchangeRing && mode != spec.ExchangeRAT {
		return nil
	}
	var members []int
	for w, b := range plan.LocalAt(next) {
		if b > 0 {
			members = append(members, w)
		}
	}
	if c != nil && c.v != nil && c.spec == s && slices.Equal(c.members, members) {
		v := c.v
		return &consolepb.ExchangeTopology{Mode: v.Mode, Iteration: next, Racks: v.Racks, RingOrder: v.RingOrder,
			Trees: v.Trees, TreesTotal: v.TreesTotal}
	}
	v := planExchange(s, members, next)
	if c != nil {
		c.spec, c.members, c.v = s, members, v
	}
	return v
}

// planExchange is the exchange of members (worker indices, in order) at
// iteration next.
func planExchange(s *spec.Spec, members []int, next int64) *consolepb.ExchangeTopology {
	mode := s.Cluster.Exchange
	topo := make(topology.Topology, len(members))
	for k, w := range members {
		l := s.Cluster.Topology[spec.WorkerName(w)]
		topo[k] = topology.Place{Rack: l.Rack, Pod: l.Pod}
	}
	pl := placed{names: make([]string, len(members)), racks: make([]string, len(members)), pods: make([]string, len(members))}
	for k, w := range members {
		pl.names[k], pl.racks[k], pl.pods[k] = spec.WorkerName(w), topo.Rack(k), topo.Pod(k)
	}
	v := &consolepb.ExchangeTopology{Mode: mode, Iteration: next}
	order := reduceplan.RingOrder(len(members), topo)
	for _, k := range order {
		r := pl.racks[k]
		if n := len(v.Racks); n == 0 || v.Racks[n-1].Region != r {
			v.Racks = append(v.Racks, &consolepb.ExchangeRegion{Region: r})
		}
		last := v.Racks[len(v.Racks)-1]
		last.Members = append(last.Members, pl.names[k])
	}
	if len(members) < 2 {
		return v // one worker sums nothing
	}
	if mode == spec.ExchangeRing {
		for _, k := range order {
			v.RingOrder = append(v.RingOrder, pl.names[k])
		}
		return v
	}
	// Tree t of a RAT plan depends only on the trees before it, so the
	// first trees of a plan of fewer trees are the full plan's.
	trees := min(len(members), maxViewTrees)
	v.TreesTotal = int32(len(members))
	p := reduceplan.RAT(len(members), trees, topo, trees)
	for c := range p.Chunks {
		v.Trees = append(v.Trees, pl.tree(p, c))
	}
	return v
}

// placed is the members' names and regions, by plan node.
type placed struct{ names, racks, pods []string }

// aggregationLevels are the levels of a tree's aggregations, nearest first.
var aggregationLevels = []string{"rack", "pod", "cluster"}

// tree is chunk c's tree of p: its root, and each aggregator's additions
// (the root's first, then by member), level by level.
func (pl placed) tree(p *reduceplan.Plan, c int) *consolepb.ExchangeTree {
	root, children := p.Tree(c)
	t := &consolepb.ExchangeTree{Chunk: int32(c)}
	if root < 0 {
		return t
	}
	t.Root = pl.names[root]
	aggs := make([]int, 0, len(children))
	for a := range children {
		if a != root {
			aggs = append(aggs, a)
		}
	}
	slices.Sort(aggs)
	for _, a := range append([]int{root}, aggs...) {
		for _, lvl := range aggregationLevels {
			var ms []string
			for _, k := range children[a] {
				if pl.level(a, k) == lvl {
					ms = append(ms, pl.names[k])
				}
			}
			if len(ms) > 0 {
				t.Aggregations = append(t.Aggregations, &consolepb.ExchangeAggregation{Aggregator: pl.names[a], Level: lvl, Members: ms})
			}
		}
	}
	return t
}

// level is the level at which aggregator a adds node k's sum: the
// smallest region holding both.
func (pl placed) level(a, k int) string {
	switch {
	case pl.racks[a] == pl.racks[k]:
		return "rack"
	case pl.pods[a] == pl.pods[k]:
		return "pod"
	}
	return "cluster"
}
