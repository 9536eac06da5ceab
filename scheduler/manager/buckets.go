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
type buckets struct{ cells []cell }

type cell struct {
	col        atomic.Int64  // the absolute column held, plus one; 0: none, -1: being reset
	sum, bytes atomic.Uint64 // float64 bits: BPT or comm seconds; bytes moved
	count      atomic.Int64
}

func newBuckets(cols int) *buckets { return &buckets{cells: make([]cell, cols)} }

// add adds samples to column col (≥ 0). Only one goroutine at a time adds.
func (b *buckets) add(col int, seconds float64, n int, bytes float64) {
	c := &b.cells[col%len(b.cells)]
	if c.col.Load() != int64(col)+1 {
		c.col.Store(-1)
		c.sum.Store(0)
		c.bytes.Store(0)
		c.count.Store(0)
		c.col.Store(int64(col) + 1)
	}
	c.sum.Store(math.Float64bits(math.Float64frombits(c.sum.Load()) + seconds))
	c.bytes.Store(math.Float64bits(math.Float64frombits(c.bytes.Load()) + bytes))
	c.count.Add(int64(n))
}

// get reads column col; ok is false when the ring holds no samples of it.
func (b *buckets) get(col int) (sum float64, count int, bytes float64, ok bool) {
	if col < 0 {
		return 0, 0, 0, false
	}
	c := &b.cells[col%len(b.cells)]
	want := int64(col) + 1
	if c.col.Load() != want {
		return 0, 0, 0, false
	}
	sum, count, bytes = math.Float64frombits(c.sum.Load()), int(c.count.Load()), math.Float64frombits(c.bytes.Load())
	if c.col.Load() != want || count == 0 {
		return 0, 0, 0, false
	}
	return sum, count, bytes, true
}
