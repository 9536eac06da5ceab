package reduceplan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kelpie/kelpie/core/topology"
)

// racks returns a topology of len(sizes) racks in one pod.
func racks(sizes ...int) topology.Topology {
	var t topology.Topology
	for r, n := range sizes {
		for range n {
			t = append(t, topology.Place{Rack: fmt.Sprintf("r%d", r)})
		}
	}
	return t
}

// pods returns p pods of r racks of w nodes.
func pods(p, r, w int) topology.Topology {
	var t topology.Topology
	for i := range p {
		for j := range r {
			for range w {
				t = append(t, topology.Place{Pod: fmt.Sprintf("p%d", i), Rack: fmt.Sprintf("r%d", j)})
			}
		}
	}
	return t
}

func plans(nodes, n int, topo topology.Topology) []*Plan {
	return []*Plan{Ring(nodes, n, topo), RAT(nodes, n, topo, 0), RAT(nodes, n, topo, 3), PS(nodes, n)}
}

func TestPlansVerifyAndSum(t *testing.T) {
	cases := []struct {
		name  string
		nodes int
		n     int
		topo  topology.Topology
	}{
		{"one node", 1, 10, nil},
		{"two nodes", 2, 10, nil},
		{"flat 5", 5, 103, nil},
		{"fewer elements than nodes", 6, 4, racks(3, 3)},
		{"empty vector", 3, 0, nil},
		{"2 racks x 4", 8, 1000, racks(4, 4)},
		{"uneven racks", 7, 999, racks(2, 5)},
		{"2 pods x 2 racks x 2", 8, 1001, pods(2, 2, 2)},
		{"pods without racks", 6, 100, topology.Topology{{Pod: "a"}, {Pod: "a"}, {Pod: "b"}, {Pod: "b"}, {Pod: "b"}, {Pod: "c"}}},
		{"some unlabelled", 5, 50, topology.Topology{{Rack: "x"}, {}, {Rack: "x"}, {Rack: "y"}}},
	}
	for _, c := range cases {
		for _, p := range plans(c.nodes, c.n, c.topo) {
			t.Run(c.name+"/"+p.Kind, func(t *testing.T) {
				if err := p.Verify(); err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, uint64(c.nodes)))
				vecs := make([][]float32, c.nodes)
				want := make([]float64, c.n)
				for i := range vecs {
					vecs[i] = make([]float32, c.n)
					for j := range vecs[i] {
						vecs[i][j] = float32(rng.NormFloat64())
						want[j] += float64(vecs[i][j])
					}
				}
				if err := p.Simulate(vecs); err != nil {
					t.Fatal(err)
				}
				for i, v := range vecs {
					for j := range v {
						if math.Abs(float64(v[j])-want[j]) > 1e-4 {
							t.Fatalf("%s: node %d element %d = %v; want %v", p.Kind, i, j, v[j], want[j])
						}
						if v[j] != vecs[0][j] {
							t.Fatalf("%s: node %d element %d = %v, node 0 has %v; every node must end with the same bits", p.Kind, i, j, v[j], vecs[0][j])
						}
					}
				}
			})
		}
	}
}

// TestVerifyCatchesBrokenPlans shows Verify fails on each kind of mistake.
func TestVerifyCatchesBrokenPlans(t *testing.T) {
	good := func() *Plan { return RAT(8, 100, racks(4, 4), 0) }
	cases := []struct {
		name string
		edit func(p *Plan)
	}{
		{"element reduced twice", func(p *Plan) { p.Steps[0] = append(p.Steps[0], p.Steps[0][0]) }},
		{"broadcast step missing", func(p *Plan) { p.Steps = p.Steps[:len(p.Steps)-1] }},
		{"reduce turned into copy", func(p *Plan) { p.Steps[0][0].Op = Copy }},
		{"chunk out of range", func(p *Plan) { p.Steps[0][0].Chunk = 99 }},
		{"send to itself", func(p *Plan) { p.Steps[0][0].To = p.Steps[0][0].From }},
		{"chunks do not cover", func(p *Plan) { p.Len++ }},
		{"send and receive a chunk in one step", func(p *Plan) {
			t0 := p.Steps[0][0]
			p.Steps[0] = append(p.Steps[0], Transfer{From: t0.To, To: (t0.To + 1) % 8, Chunk: t0.Chunk, Op: Reduce})
		}},
	}
	for _, c := range cases {
		p := good()
		c.edit(p)
		if err := p.Verify(); err == nil {
			t.Errorf("%s: Verify() = nil; want an error", c.name)
		}
	}
}

// TestCrossRackBytes is RAT's headline: on 2 racks × 4 workers RAT sends at
// most a quarter of PS's bytes across racks, and ring stays close to RAT.
func TestCrossRackBytes(t *testing.T) {
	const n = 8 * 1024
	topo := racks(4, 4)
	region := topo.RackRegion()
	ps := PS(8, n).CrossBytes(region)
	ring := Ring(8, n, topo).CrossBytes(region)
	rat := RAT(8, n, topo, 0).CrossBytes(region)
	t.Logf("cross-rack bytes for %d B per node: ps %d, ring %d, rat %d", 4*n, ps, ring, rat)
	// Each rack must send its partial sum out once and get the other's back:
	// 2 × 4n bytes is the least any allreduce can cross.
	if rat != 2*4*n {
		t.Errorf("rat crosses %d bytes; want the minimum %d", rat, 2*4*n)
	}
	if 4*rat > ps {
		t.Errorf("rat crosses %d bytes, more than a quarter of ps's %d", rat, ps)
	}
	// A ring crosses the boundary twice per step, 2(N−1) steps of n/N:
	// 2·2(N−1)/N · 4n = 1.75 × RAT here; both are far below PS.
	if ring != 2*2*7*4*n/8 || ring > 2*rat || 2*ring > ps {
		t.Errorf("ring crosses %d bytes; want %d (within 2× rat %d, under half of ps %d)", ring, 2*2*7*4*n/8, rat, ps)
	}
	// Per region pair: symmetric for all three.
	for _, p := range []*Plan{PS(8, n), Ring(8, n, topo), RAT(8, n, topo, 0)} {
		b := p.Bytes(region)
		if len(b) != 2 || b[Pair{"/r0", "/r1"}] != b[Pair{"/r1", "/r0"}] {
			t.Errorf("%s: bytes by region pair %v; want r0→r1 = r1→r0", p.Kind, b)
		}
	}
}

// TestRATLoadBalanced: rotating roots and aggregators over the trees gives
// every node the same load on symmetric topologies, and a bounded spread on
// uneven ones.
func TestRATLoadBalanced(t *testing.T) {
	cases := []struct {
		name   string
		topo   topology.Topology
		spread float64 // max/min of sent+received allowed
	}{
		{"2 racks x 4", racks(4, 4), 1},
		{"4 racks x 2", racks(2, 2, 2, 2), 1},
		{"2 pods x 2 racks x 2", pods(2, 2, 2), 1.0},
		{"3 racks x 3", racks(3, 3, 3), 1},
		{"uneven 3+5", racks(3, 5), 1.5},
	}
	for _, c := range cases {
		n := len(c.topo) * 1000
		p := RAT(len(c.topo), n, c.topo, 0)
		lo, hi := int64(math.MaxInt64), int64(0)
		for _, l := range p.Loads() {
			x := l.Sent + l.Received
			lo, hi = min(lo, x), max(hi, x)
			if l.Sent != l.Received {
				t.Errorf("%s: a node sends %d and receives %d; trees are symmetric", c.name, l.Sent, l.Received)
			}
		}
		if float64(hi) > c.spread*float64(lo) {
			t.Errorf("%s: node loads from %d to %d elements; want max/min ≤ %v (loads %v)", c.name, lo, hi, c.spread, p.Loads())
		}
		// One tree alone is unbalanced: the root carries the most.
		one := RAT(len(c.topo), n, c.topo, 1).Loads()
		if one[0].Received <= one[len(one)-1].Received {
			t.Errorf("%s: single tree's root receives %d, a leaf %d", c.name, one[0].Received, one[len(one)-1].Received)
		}
	}
}

// TestDependencyChain checks the number of dependent steps (RAT Table 1):
// ring 2(N−1), RAT 2(l+1) for l region levels, PS 2.
func TestDependencyChain(t *testing.T) {
	cases := []struct {
		p    *Plan
		want int
	}{
		{Ring(8, 100, racks(4, 4)), 14},
		{RAT(8, 100, racks(4, 4), 0), 4},
		{RAT(8, 100, pods(2, 2, 2), 0), 6},
		{RAT(8, 100, nil, 0), 2},
		{PS(8, 100), 2},
	}
	for _, c := range cases {
		if len(c.p.Steps) != c.want {
			t.Errorf("%s: %d steps; want %d", c.p.Kind, len(c.p.Steps), c.want)
		}
	}
}

// TestRATRegionsSendOnce: in every tree, each top-level region that does
// not hold the tree's root sends exactly one copy of the tree's chunk out
// (its partial sum) and receives one in (the total): the least traffic any
// allreduce can put across that region's boundary (RAT's first property).
// Checked for racks when racks are the top level and for pods above racks.
func TestRATRegionsSendOnce(t *testing.T) {
	for _, c := range []struct {
		name   string
		topo   topology.Topology
		region func(topology.Topology) func(int) string
	}{
		{"racks", racks(4, 3, 5), func(t topology.Topology) func(int) string { return t.Rack }},
		{"pods", pods(2, 2, 3), func(t topology.Topology) func(int) string { return t.Pod }},
		{"pods of uneven racks", append(racks(2, 3), topology.Topology{{Pod: "q", Rack: "a"}, {Pod: "q", Rack: "b"}, {Pod: "q", Rack: "b"}}...), func(t topology.Topology) func(int) string { return t.Pod }},
	} {
		nodes := len(c.topo)
		p := RAT(nodes, nodes*10, c.topo, 0)
		if err := p.Verify(); err != nil {
			t.Fatal(err)
		}
		region := c.region(c.topo)
		order := c.topo.Order(nodes)
		type key struct {
			region string
			chunk  int
		}
		out, in := map[key]int{}, map[key]int{}
		for _, step := range p.Steps {
			for _, tr := range step {
				a, b := region(tr.From), region(tr.To)
				if a != b {
					out[key{a, tr.Chunk}]++
					in[key{b, tr.Chunk}]++
				}
			}
		}
		for ch := range p.Chunks {
			for i := range nodes {
				r := region(i)
				if r == region(order[ch]) {
					continue
				}
				if k := (key{r, ch}); out[k] != 1 || in[k] != 1 {
					t.Errorf("%s: region %q, tree %d: %d transfers out and %d in; want 1 and 1", c.name, r, ch, out[k], in[k])
				}
			}
		}
	}
}

// TestRATTree: on 2 racks × 4, every RAT tree has one root, one aggregator
// in the other rack, which adds its rack's three others, and the root adds
// its own rack's three others and the other rack's aggregator.
func TestRATTree(t *testing.T) {
	topo := racks(4, 4)
	p := RAT(8, 64, topo, 0)
	roots := map[int]bool{}
	for c := range p.Chunks {
		root, ch := p.Tree(c)
		roots[root] = true
		if len(ch) != 2 || len(ch[root]) != 4 {
			t.Fatalf("tree %d: root %d, children %v; want the root adding 4 (3 in its rack, 1 aggregator) and one other aggregator", c, root, ch)
		}
		for agg, kids := range ch {
			if agg == root {
				continue
			}
			if topo.Rack(agg) == topo.Rack(root) || len(kids) != 3 || !slices.Contains(ch[root], agg) {
				t.Errorf("tree %d: aggregator %d adds %v; want 3 nodes of the other rack, and the root to add it", c, agg, kids)
			}
			for _, k := range kids {
				if topo.Rack(k) != topo.Rack(agg) {
					t.Errorf("tree %d: aggregator %d adds node %d of another rack", c, agg, k)
				}
			}
		}
	}
	if len(roots) != 8 {
		t.Errorf("roots %v; want every node a root once", roots)
	}
	if got := RingOrder(8, racks(4, 4)); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("ring order %v", got)
	}
}
