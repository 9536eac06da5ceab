package manager

import (
	"math"
	"sync"
	"testing"
	"unsafe"
)

// TestBucketCellSize: a cell is 16 bytes (the heatmap's memory at 20,000
// nodes is cells × columns × this).
func TestBucketCellSize(t *testing.T) {
	if s := unsafe.Sizeof(cell{}); s != 16 {
		t.Errorf("a cell is %d bytes, want 16", s)
	}
}

// TestBucketsBytes: a ring with no bytes added has no bytes ring and
// reads 0; bytes first added in the middle of a column count from there
// (the earlier additions had none), and a reused cell starts from 0.
func TestBucketsBytes(t *testing.T) {
	b := newBuckets(4)
	b.add(1, 0.5, 2, 0)
	if b.bytes.Load() != nil {
		t.Error("a bytes ring made for a node that moved none")
	}
	if sum, n, by, ok := b.get(1); !ok || sum != 0.5 || n != 2 || by != 0 {
		t.Errorf("get(1) = %v, %d, %v, %v; want 0.5, 2, 0, true", sum, n, by, ok)
	}
	b.add(1, 0.25, 1, 300)
	if sum, n, by, ok := b.get(1); !ok || sum != 0.75 || n != 3 || by != 300 {
		t.Errorf("get(1) = %v, %d, %v, %v; want 0.75, 3, 300, true", sum, n, by, ok)
	}
	b.add(5, 1, 1, 0) // column 1's cell, reused
	if sum, n, by, ok := b.get(5); !ok || sum != 1 || n != 1 || by != 0 {
		t.Errorf("get(5) = %v, %d, %v, %v; want 1, 1, 0, true", sum, n, by, ok)
	}
}

func TestColTag(t *testing.T) {
	for _, col := range []int{0, 1, math.MaxUint32 - 3, math.MaxUint32 - 2, math.MaxUint32 - 1, math.MaxUint32, 1 << 40} {
		if tag := colTag(col); tag == 0 || tag == colResetting {
			t.Errorf("colTag(%d) = %d, a reserved tag", col, tag)
		}
	}
	if colTag(5) == colTag(6) {
		t.Error("neighbouring columns share a tag")
	}
}

// TestBucketsOneWriterManyReaders: readers racing the writer never read
// another column's numbers (column c gets three samples of c seconds and
// one byte each: read as column c, a cell holds 1 to 3 of them, its sum,
// count and bytes possibly from different additions of the column).
func TestBucketsOneWriterManyReaders(t *testing.T) {
	const cols, last = 4, 4000
	b := newBuckets(cols)
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				for c := range last {
					sum, n, by, ok := b.get(c)
					if k := sum / max(float64(c), 1); ok && (k > 3 || k != math.Trunc(k) || c > 0 && k < 1 || n < 1 || n > 3 || by < 1 || by > 3) {
						t.Errorf("column %d read as sum %v, %d samples, %v bytes", c, sum, n, by)
						return
					}
				}
			}
		}()
	}
	for c := range last {
		for range 3 {
			b.add(c, float64(c), 1, 1)
		}
	}
	close(done)
	wg.Wait()
}
