package reduceplan

import (
	"slices"

	"github.com/kelpie/kelpie/core/topology"
)

// Region levels of a RAT tree, coarsest first; below the last are leaves.
const (
	levelPod = iota
	levelRack
	levelLeaf
)

// RAT returns Resilient Allreduce Trees (RAT §3, Alg. 1) for n elements
// among the nodes of topo. The vector is cut into one chunk per tree (trees
// ≤ 0: one tree per node); tree t's root is the t-th node in topology order,
// so every node is a root once. In each tree every pod and every rack has one
// aggregator: the root in the root's regions, the pod's aggregator in its own
// rack, and otherwise the member that has carried the least in the trees
// built before (so roles rotate and load evens out); the root aggregates the
// pods. Reduce goes leaves → rack aggregator → pod
// aggregator → root, then the sum is broadcast back down the same edges:
// 2(l+1) dependent steps for l region levels, and each region sends one copy
// of each chunk out and receives one back.
func RAT(nodes, n int, topo topology.Topology, trees int) *Plan {
	if trees <= 0 {
		trees = nodes
	}
	p := &Plan{Kind: "rat", Nodes: nodes, Len: n, Chunks: Split(n, trees)}
	if nodes < 2 {
		return p
	}
	order := topo.Order(nodes)
	b := ratBuilder{topo: topo, steps: make([][]Transfer, 2*(levelLeaf+1)), load: make([]int, nodes), pending: make([]int, nodes)}
	for t := range p.Chunks {
		b.tree, b.root = t, order[t%nodes]
		b.aggregate(order, levelPod, b.root)
		for i, x := range b.pending {
			b.load[i] += x
		}
		clear(b.pending)
	}
	p.Steps = b.steps
	p.compact()
	return p
}

type ratBuilder struct {
	topo       topology.Topology
	tree, root int
	steps      [][]Transfer
	// load counts the transfers each node has sent or received in the
	// trees built so far; pending those of the tree being built.
	load, pending []int
}

// aggregate adds tree b.tree's transfers within one region (nodes, at the
// given level) and returns the region's aggregator. Aggregators are chosen
// top-down: the region holding the parent's aggregator (or the root) uses
// that node; any other region picks the member that has carried the least in
// the trees built so far, ties broken by a rotation on the tree's number.
func (b *ratBuilder) aggregate(nodes []int, level, parent int) int {
	agg := -1
	if slices.Contains(nodes, parent) {
		agg = parent
	} else {
		for k := range nodes {
			c := nodes[(b.tree+k)%len(nodes)]
			if agg < 0 || b.load[c]+b.pending[c] < b.load[agg]+b.pending[agg] {
				agg = c
			}
		}
	}
	var subs []int
	if level == levelLeaf {
		subs = nodes
	} else {
		for _, g := range b.groups(nodes, level) {
			subs = append(subs, b.aggregate(g, level+1, agg))
		}
	}
	up, down := levelLeaf-level, levelLeaf+1+level
	for _, s := range subs {
		if s != agg {
			b.steps[up] = append(b.steps[up], Transfer{From: s, To: agg, Chunk: b.tree, Op: Reduce})
			b.steps[down] = append(b.steps[down], Transfer{From: agg, To: s, Chunk: b.tree, Op: Copy})
			b.pending[s] += 2
			b.pending[agg] += 2
		}
	}
	return agg
}

// groups partitions nodes (in order) by their region at level.
func (b *ratBuilder) groups(nodes []int, level int) [][]int {
	key := b.topo.Pod
	if level == levelRack {
		key = b.topo.Rack
	}
	var out [][]int
	at := map[string]int{}
	for _, v := range nodes {
		k := key(v)
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], v)
	}
	return out
}

// PS returns the parameter-server exchange as a plan, with servers
// co-located on the nodes as in RAT's comparison: node c holds chunk c;
// every node pushes its chunk c to node c, which sums them, and node c sends
// the sum back to every node.
func PS(nodes, n int) *Plan {
	p := &Plan{Kind: "ps", Nodes: nodes, Len: n, Chunks: Split(n, nodes)}
	if nodes < 2 {
		return p
	}
	p.Steps = make([][]Transfer, 2)
	for c := range p.Chunks {
		for i := range nodes {
			if i != c {
				p.Steps[0] = append(p.Steps[0], Transfer{From: i, To: c, Chunk: c, Op: Reduce})
				p.Steps[1] = append(p.Steps[1], Transfer{From: c, To: i, Chunk: c, Op: Copy})
			}
		}
	}
	return p
}

// Tree is chunk c's tree in a reduce-then-broadcast plan (RAT, PS): its
// root, and for each aggregator the nodes whose partial sums it adds, in
// plan order (leaves first, then the aggregators of the regions below).
// The root is the node that adds and sends chunk c nowhere upward; -1 when
// nothing is reduced.
func (p *Plan) Tree(c int) (root int, children map[int][]int) {
	children = map[int][]int{}
	hasParent := make([]bool, p.Nodes)
	for _, step := range p.Steps {
		for _, t := range step {
			if t.Chunk == c && t.Op == Reduce {
				children[t.To] = append(children[t.To], t.From)
				hasParent[t.From] = true
			}
		}
	}
	root = -1
	for agg := range children {
		if !hasParent[agg] && (root < 0 || agg < root) {
			root = agg
		}
	}
	return root, children
}

// RingOrder is the order in which Ring passes chunks among the nodes of
// topo: pod by pod and rack by rack.
func RingOrder(nodes int, topo topology.Topology) []int { return topo.Order(nodes) }
