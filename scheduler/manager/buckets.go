package manager

import (
	"math"
	"sync/atomic"
)

// buckets is one node's heatmap columns: a ring of cells indexed by
// absolute column (time since the job's bucket 0, in bucket widths), so
// time moving on copies nothing. The report path (one writer, the job's
// actor) adds to the current column; views read without any lock:
// every value is atomic, and each cell records which column it holds, so a
// cell being reused for a newer column reads as empty. A view may see a
// cell of the current column between two of a report's additions; it never
// sees another column's numbers.
//
// A cell is 16 bytes (a 20,000-node job keeps some 2.6 million): the sum,
// and the column and count in 32 bits each. The bytes moved, which only
// servers' comm samples carry, are a ring of their own beside the cells,
// made on the first bytes added (workers never have one).
type buckets struct {
	cells []cell
	bytes atomic.Pointer[[]atomic.Uint64] // float64 bits, by cell; nil: no bytes added yet
}

type cell struct {
	sum atomic.Uint64 // float64 bits: BPT or comm seconds
	// col is the column held as colTag's tag; 0: none, colResetting:
	// being reset. Tags repeat every 2³²−2 columns: a cell not written for
	// that long (136 years of one-second buckets) could read as current.
	col   atomic.Uint32
	count atomic.Uint32 // samples added (at most 2³²−1 a column)
}

const colResetting = math.MaxUint32

// colTag is the tag a cell holds for column col (≥ 0): never 0 (none) or
// colResetting.
func colTag(col int) uint32 { return uint32(col%(math.MaxUint32-1)) + 1 }

func newBuckets(cols int) *buckets { return &buckets{cells: make([]cell, cols)} }

// add adds samples to column col (≥ 0). Only one goroutine at a time adds.
func (b *buckets) add(col int, seconds float64, n int, bytes float64) {
	i := col % len(b.cells)
	c := &b.cells[i]
	ring := b.bytes.Load()
	if ring == nil && bytes != 0 {
		r := make([]atomic.Uint64, len(b.cells)) // zero: no bytes in any column so far
		ring = &r
		b.bytes.Store(ring)
	}
	if tag := colTag(col); c.col.Load() != tag {
		c.col.Store(colResetting)
		c.sum.Store(0)
		if ring != nil {
			(*ring)[i].Store(0)
		}
		c.count.Store(0)
		c.col.Store(tag)
	}
	c.sum.Store(math.Float64bits(math.Float64frombits(c.sum.Load()) + seconds))
	if ring != nil {
		by := &(*ring)[i]
		by.Store(math.Float64bits(math.Float64frombits(by.Load()) + bytes))
	}
	c.count.Add(uint32(n))
}

// get reads column col; ok is false when the ring holds no samples of it.
func (b *buckets) get(col int) (sum float64, count int, bytes float64, ok bool) {
	if col < 0 {
		return 0, 0, 0, false
	}
	i := col % len(b.cells)
	c := &b.cells[i]
	want := colTag(col)
	if c.col.Load() != want {
		return 0, 0, 0, false
	}
	sum, count = math.Float64frombits(c.sum.Load()), int(c.count.Load())
	if ring := b.bytes.Load(); ring != nil {
		bytes = math.Float64frombits((*ring)[i].Load())
	}
	if c.col.Load() != want || count == 0 {
		return 0, 0, 0, false
	}
	return sum, count, bytes, true
}
