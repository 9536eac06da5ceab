// Package blocks cuts a model's tensors into parameter blocks and assigns the
// blocks to parameter servers (PSLD §3: blocks of at most 4 MiB by default;
// large tensors are split, small ones stay whole).
//
// Three assignment strategies match what the papers compare against:
// round-robin by count (TensorFlow's default), MXNet-style (tensors larger
// than the block size are split evenly over all servers, small ones go to a
// random server), and size-balanced (largest block first to the least loaded
// server). The result is a versioned Table that workers follow; PSLD's
// measured assignment lives with the scheduler's policies and produces a
// Table of the same shape.
//
// The package is pure: no I/O, randomness comes from a seed.
package blocks

import (
	"fmt"
	"math/rand/v2"
	"sort"
)

// Tensor is what the layout needs to know of a model tensor.
type Tensor struct {
	Name       string
	Rows, Cols int
	Sparse     bool // an embedding table addressed by row key
}

// Len is the tensor's element count.
func (t Tensor) Len() int64 { return int64(t.Rows) * int64(t.Cols) }

// Block is a contiguous slice of one tensor. For a sparse tensor Offset and
// Length count rows; for a dense one, elements.
type Block struct {
	ID     int
	Tensor int
	Offset int64
	Length int64
	Sparse bool
	Cols   int // row width of a sparse block (1 for dense)
}

// Floats is the number of float32 values the block holds.
func (b Block) Floats() int64 {
	if b.Sparse {
		return b.Length * int64(b.Cols)
	}
	return b.Length
}

// Bytes is the block's size in bytes.
func (b Block) Bytes() int64 { return b.Floats() * 4 }

// Strategy names an assignment strategy.
type Strategy string

// Assignment strategies.
const (
	RoundRobin   Strategy = "round-robin"
	MXNet        Strategy = "mxnet"
	SizeBalanced Strategy = "size-balanced"
)

// Layout cuts tensors into blocks of at most blockBytes. With the MXNet
// strategy a tensor larger than blockBytes is instead split into exactly
// `servers` even pieces, as MXNet's kvstore does. A sparse table is cut by
// rows into at least `servers` ranges so its rows spread over every server
// (even key slicing, FluentPS §III-A).
func Layout(tensors []Tensor, blockBytes int64, servers int, s Strategy) ([]Block, error) {
	if blockBytes < 4 {
		return nil, fmt.Errorf("blocks: block size %d bytes is smaller than one float", blockBytes)
	}
	if servers < 1 {
		return nil, fmt.Errorf("blocks: %d servers", servers)
	}
	var out []Block
	add := func(b Block) {
		b.ID = len(out)
		out = append(out, b)
	}
	for ti, t := range tensors {
		if t.Rows <= 0 || t.Cols <= 0 {
			return nil, fmt.Errorf("blocks: tensor %q has shape %dx%d", t.Name, t.Rows, t.Cols)
		}
		if t.Sparse {
			rowBytes := int64(t.Cols) * 4
			perBlock := max(blockBytes/rowBytes, 1)
			pieces := max((int64(t.Rows)+perBlock-1)/perBlock, int64(servers))
			pieces = min(pieces, int64(t.Rows))
			for _, r := range split(int64(t.Rows), pieces) {
				add(Block{Tensor: ti, Offset: r[0], Length: r[1], Sparse: true, Cols: t.Cols})
			}
			continue
		}
		n := t.Len()
		per := max(blockBytes/4, 1)
		var pieces int64
		switch {
		case n <= per:
			pieces = 1
		case s == MXNet:
			pieces = min(int64(servers), n)
		default:
			pieces = (n + per - 1) / per
		}
		for _, r := range split(n, pieces) {
			add(Block{Tensor: ti, Offset: r[0], Length: r[1], Cols: 1})
		}
	}
	return out, nil
}

// split cuts n into k near-equal [offset, length) ranges.
func split(n, k int64) [][2]int64 {
	out := make([][2]int64, 0, k)
	var off int64
	for i := range k {
		l := n / k
		if i < n%k {
			l++
		}
		out = append(out, [2]int64{off, l})
		off += l
	}
	return out
}

// Table is a versioned assignment of blocks to servers.
type Table struct {
	Version  uint64
	Blocks   []Block
	ServerOf []int // block ID -> server index
	Servers  int
}

// Assign places blocks on servers with a strategy. seed drives MXNet's random
// placement of small tensors.
func Assign(bs []Block, servers int, s Strategy, seed int64) (Table, error) {
	if servers < 1 {
		return Table{}, fmt.Errorf("blocks: %d servers", servers)
	}
	t := Table{Version: 1, Blocks: bs, ServerOf: make([]int, len(bs)), Servers: servers}
	switch s {
	case RoundRobin, "":
		for i := range bs {
			t.ServerOf[i] = i % servers
		}
	case MXNet:
		rng := rand.New(rand.NewPCG(uint64(seed), 0x6d786e6574))
		// Pieces of a split tensor go one per server; whole tensors go to a
		// random server.
		pieceOf := map[int]int{}
		for i, b := range bs {
			split := len(bs) > 0 && countTensor(bs, b.Tensor) > 1
			if split {
				t.ServerOf[i] = pieceOf[b.Tensor] % servers
				pieceOf[b.Tensor]++
			} else {
				t.ServerOf[i] = rng.IntN(servers)
			}
		}
	case SizeBalanced:
		order := make([]int, len(bs))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return bs[order[a]].Bytes() > bs[order[b]].Bytes() })
		load := make([]int64, servers)
		for _, i := range order {
			best := 0
			for r := 1; r < servers; r++ {
				if load[r] < load[best] {
					best = r
				}
			}
			t.ServerOf[i] = best
			load[best] += bs[i].Bytes()
		}
	default:
		return Table{}, fmt.Errorf("blocks: unknown assignment strategy %q", s)
	}
	return t, nil
}

func countTensor(bs []Block, tensor int) int {
	n := 0
	for _, b := range bs {
		if b.Tensor == tensor {
			n++
		}
	}
	return n
}

// Load is the bytes each server holds under the table.
func (t Table) Load() []int64 {
	load := make([]int64, t.Servers)
	for i, b := range t.Blocks {
		load[t.ServerOf[i]] += b.Bytes()
	}
	return load
}

// OnServer lists the block IDs a server holds, in ID order.
func (t Table) OnServer(r int) []int {
	var ids []int
	for i, s := range t.ServerOf {
		if s == r {
			ids = append(ids, i)
		}
	}
	return ids
}

// SparseBlock finds the block of a sparse tensor that holds row key k, or -1.
func (t Table) SparseBlock(tensor int, k uint64) int {
	// Blocks of one tensor are contiguous and ordered by offset.
	lo, hi := -1, -1
	for i, b := range t.Blocks {
		if b.Tensor == tensor {
			if lo < 0 {
				lo = i
			}
			hi = i
		}
	}
	if lo < 0 {
		return -1
	}
	seg := t.Blocks[lo : hi+1]
	j := sort.Search(len(seg), func(i int) bool { return uint64(seg[i].Offset+seg[i].Length) > k })
	if j == len(seg) || uint64(seg[j].Offset) > k {
		return -1
	}
	return lo + j
}

// Rebalance moves as few bytes as it can so that the active servers hold
// near-equal loads: blocks on inactive servers (being removed) move first,
// then the largest blocks of the most loaded servers go to the least loaded,
// as long as a move narrows the gap. servers is the size of the new table
// (it may exceed t.Servers when servers are added). The result has version
// t.Version+1.
func Rebalance(t Table, servers int, active []int) (Table, error) {
	if len(active) == 0 {
		return Table{}, fmt.Errorf("blocks: no active server to hold the blocks")
	}
	isActive := make([]bool, servers)
	for _, r := range active {
		if r < 0 || r >= servers {
			return Table{}, fmt.Errorf("blocks: active server %d outside 0..%d", r, servers-1)
		}
		isActive[r] = true
	}
	out := Table{Version: t.Version + 1, Blocks: t.Blocks, ServerOf: append([]int(nil), t.ServerOf...), Servers: servers}
	load := make([]int64, servers)
	for i, b := range t.Blocks {
		load[out.ServerOf[i]] += b.Bytes()
	}
	least := func() int {
		best := -1
		for _, r := range active {
			if best < 0 || load[r] < load[best] {
				best = r
			}
		}
		return best
	}
	// Evacuate inactive servers, largest blocks first.
	order := make([]int, len(t.Blocks))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return t.Blocks[order[a]].Bytes() > t.Blocks[order[b]].Bytes() })
	for _, i := range order {
		if r := out.ServerOf[i]; !isActive[r] {
			dst := least()
			load[r] -= t.Blocks[i].Bytes()
			load[dst] += t.Blocks[i].Bytes()
			out.ServerOf[i] = dst
		}
	}
	// Level: move a block from the most to the least loaded server while
	// that lowers the larger of the two loads.
	for moves := 0; moves < len(t.Blocks)*len(active); moves++ {
		hi, lo := -1, least()
		for _, r := range active {
			if hi < 0 || load[r] > load[hi] {
				hi = r
			}
		}
		best, bestMax := -1, load[hi]
		for _, i := range order {
			if out.ServerOf[i] != hi {
				continue
			}
			b := t.Blocks[i].Bytes()
			if m := max(load[hi]-b, load[lo]+b); m < bestMax {
				best, bestMax = i, m
			}
		}
		if best < 0 {
			break
		}
		load[hi] -= t.Blocks[best].Bytes()
		load[lo] += t.Blocks[best].Bytes()
		out.ServerOf[best] = lo
	}
	return out, nil
}
