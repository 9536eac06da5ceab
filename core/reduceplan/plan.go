// Package reduceplan plans how a vector of float32 gradients is summed across a job's
// workers without parameter servers: ring allreduce (scatter-reduce then
// all-gather) and RAT, the Resilient Allreduce Tree (RAT §3, Alg. 1): one
// aggregator per oversubscribed region at each level (rack, then pod) and a
// root, reduce up then broadcast down, over several trees whose roots and
// aggregators rotate so every node carries the same load.
//
// A Plan is data: the vector's chunks and, step by step, which node sends
// which chunk to whom and whether the receiver adds it (reduce) or takes it
// (copy). Ring, RAT and PS (co-located shards: push to the owner, copy back)
// all produce Plans, so their properties — every element reduced exactly
// once, every node ending with the sum, per-node load, bytes crossing each
// pair of regions — are checked by the same pure functions (Verify, Simulate,
// Load, Bytes) with no network. Plans are pure data, read by the scheduler (the
// console's exchange view) as well as the workers; runtime/allreduce's Exchange runs a Plan
// over real connections between worker processes.
package reduceplan

import (
	"fmt"
	"slices"
)

// Op says what the receiver of a transfer does with the chunk.
type Op uint8

// Transfer operations.
const (
	// Reduce adds the chunk into the receiver's copy.
	Reduce Op = iota + 1
	// Copy replaces the receiver's copy with the chunk.
	Copy
)

func (o Op) String() string {
	switch o {
	case Reduce:
		return "reduce"
	case Copy:
		return "copy"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Range is a contiguous run of the vector: elements [Off, Off+Len).
type Range struct{ Off, Len int }

// Transfer is one chunk sent from one node to another in a step.
type Transfer struct {
	From, To int
	Chunk    int
	Op       Op
}

// Plan is an allreduce of a vector of Len elements among Nodes nodes. The
// transfers of a step run concurrently; a node sends in step s what it holds
// after every transfer of steps before s.
type Plan struct {
	Kind   string
	Nodes  int
	Len    int
	Chunks []Range
	Steps  [][]Transfer
}

// Split cuts n elements into k contiguous near-equal ranges (the first n%k
// one longer). k is capped at n when n > 0 so that no range is empty.
func Split(n, k int) []Range {
	if k < 1 {
		k = 1
	}
	if n > 0 && k > n {
		k = n
	}
	out := make([]Range, k)
	off := 0
	for i := range out {
		l := n / k
		if i < n%k {
			l++
		}
		out[i] = Range{off, l}
		off += l
	}
	return out
}

// Verify checks the plan symbolically: it tracks, for every node and chunk,
// how many times each node's input is contained in the node's copy. A reduce
// must add disjoint contributions (an element reduced twice fails), nothing
// may be copied twice into one place in a step, no node may send and receive
// the same chunk in one step (so a sender never needs a snapshot), and at the
// end every node must hold every node's input exactly once in every chunk.
func (p *Plan) Verify() error {
	if p.Nodes < 1 {
		return fmt.Errorf("allreduce: %s plan has %d nodes", p.Kind, p.Nodes)
	}
	off := 0
	for c, r := range p.Chunks {
		if r.Off != off || r.Len < 0 {
			return fmt.Errorf("allreduce: %s plan: chunk %d is %+v; want offset %d", p.Kind, c, r, off)
		}
		off += r.Len
	}
	if off != p.Len {
		return fmt.Errorf("allreduce: %s plan: chunks cover %d of %d elements", p.Kind, off, p.Len)
	}
	n, nc := p.Nodes, len(p.Chunks)
	// have[node][chunk][src] = times src's input is in node's copy of chunk.
	have := make([][][]int, n)
	for i := range have {
		have[i] = make([][]int, nc)
		for c := range have[i] {
			have[i][c] = make([]int, n)
			have[i][c][i] = 1
		}
	}
	type key struct{ node, chunk int }
	for s, step := range p.Steps {
		sends, copies := map[key]bool{}, map[key]int{}
		for _, t := range step {
			if t.From < 0 || t.From >= n || t.To < 0 || t.To >= n || t.From == t.To {
				return fmt.Errorf("allreduce: %s plan: step %d: transfer %d→%d out of range or to itself", p.Kind, s, t.From, t.To)
			}
			if t.Chunk < 0 || t.Chunk >= nc {
				return fmt.Errorf("allreduce: %s plan: step %d: chunk %d of %d", p.Kind, s, t.Chunk, nc)
			}
			if t.Op != Reduce && t.Op != Copy {
				return fmt.Errorf("allreduce: %s plan: step %d: %v", p.Kind, s, t.Op)
			}
			sends[key{t.From, t.Chunk}] = true
			if t.Op == Copy {
				copies[key{t.To, t.Chunk}]++
			}
		}
		next := make(map[key][]int)
		for _, t := range step {
			k := key{t.To, t.Chunk}
			if sends[k] {
				return fmt.Errorf("allreduce: %s plan: step %d: node %d both sends and receives chunk %d", p.Kind, s, t.To, t.Chunk)
			}
			if copies[k] > 1 || (copies[k] == 1 && t.Op == Reduce) {
				return fmt.Errorf("allreduce: %s plan: step %d: node %d gets chunk %d copied while it is written otherwise", p.Kind, s, t.To, t.Chunk)
			}
			cur, ok := next[k]
			if !ok {
				cur = slices.Clone(have[t.To][t.Chunk])
				if t.Op == Copy {
					clear(cur)
				}
			}
			src := have[t.From][t.Chunk]
			for j := range cur {
				cur[j] += src[j]
				if t.Op == Reduce && cur[j] > 1 {
					return fmt.Errorf("allreduce: %s plan: step %d: node %d reduces node %d's input into chunk %d twice", p.Kind, s, t.To, j, t.Chunk)
				}
			}
			next[k] = cur
		}
		for k, v := range next {
			have[k.node][k.chunk] = v
		}
	}
	for i := range have {
		for c := range have[i] {
			for j, x := range have[i][c] {
				if x != 1 {
					return fmt.Errorf("allreduce: %s plan: node %d ends with node %d's input %d times in chunk %d; want once", p.Kind, i, j, x, c)
				}
			}
		}
	}
	return nil
}

// Simulate runs the plan in memory on one vector per node (modified in
// place) with the same arithmetic order as Exchange: within a step, a node
// applies what it receives in the order the plan lists the transfers.
func (p *Plan) Simulate(vecs [][]float32) error {
	if len(vecs) != p.Nodes {
		return fmt.Errorf("allreduce: simulate: %d vectors for %d nodes", len(vecs), p.Nodes)
	}
	for i, v := range vecs {
		if len(v) != p.Len {
			return fmt.Errorf("allreduce: simulate: node %d has %d elements; plan has %d", i, len(v), p.Len)
		}
	}
	for _, step := range p.Steps {
		// Senders never receive the chunk they send in the same step
		// (Verify), so reading the sender's copy as it is now is correct.
		for _, t := range step {
			r := p.Chunks[t.Chunk]
			src := vecs[t.From][r.Off : r.Off+r.Len]
			dst := vecs[t.To][r.Off : r.Off+r.Len]
			t.Op.Apply(dst, src)
		}
	}
	return nil
}

// Apply does to the receiver's copy dst what the operation says with the chunk src.
func (op Op) Apply(dst, src []float32) {
	if op == Copy {
		copy(dst, src)
		return
	}
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// Load is what one node sends and receives over a whole plan, in elements.
type Load struct{ Sent, Received int64 }

// Loads returns every node's load.
func (p *Plan) Loads() []Load {
	out := make([]Load, p.Nodes)
	for _, step := range p.Steps {
		for _, t := range step {
			l := int64(p.Chunks[t.Chunk].Len)
			out[t.From].Sent += l
			out[t.To].Received += l
		}
	}
	return out
}

// Pair is an ordered pair of regions, sender's first.
type Pair struct{ From, To string }

// Bytes returns the bytes (4 per element) the plan sends between regions,
// by ordered region pair; transfers within one region are left out.
func (p *Plan) Bytes(region func(node int) string) map[Pair]int64 {
	out := map[Pair]int64{}
	for _, step := range p.Steps {
		for _, t := range step {
			a, b := region(t.From), region(t.To)
			if a != b {
				out[Pair{a, b}] += 4 * int64(p.Chunks[t.Chunk].Len)
			}
		}
	}
	return out
}

// CrossBytes is the total of Bytes over every region pair.
func (p *Plan) CrossBytes(region func(node int) string) int64 {
	var sum int64
	for _, b := range p.Bytes(region) {
		sum += b
	}
	return sum
}

// compact drops empty steps.
func (p *Plan) compact() {
	steps := p.Steps[:0]
	for _, s := range p.Steps {
		if len(s) > 0 {
			steps = append(steps, s)
		}
	}
	p.Steps = steps
}
