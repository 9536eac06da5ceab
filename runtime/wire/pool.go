package wire

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Buffers are pooled by size class: 2^e + k·2^(e-3) bytes for k = 0..7, so a
// buffer is at most 12.5 % larger than asked for and any stable size (a
// block of 401,408 bytes as well as one of 4 MiB) comes back to the same
// class. Pooled memory is not zeroed: every user overwrites what it reads.
const (
	minClassExp = 8  // 256 B: smaller buffers are not pooled
	maxClassExp = 30 // 1 GiB
	stepsPerExp = 8
)

// PoolThreshold is the smallest payload the codec receives into a pooled
// buffer (see Recycle); smaller payloads are plain allocations, for which a
// pool would cost more than it saves.
const PoolThreshold = 64 << 10

var classes [(maxClassExp-minClassExp)*stepsPerExp + 1]sync.Pool

// ceilClass is the smallest class that holds n bytes: its index and size;
// ok is false when n is outside the pooled range.
func ceilClass(n int) (idx, size int, ok bool) {
	if n <= 1<<minClassExp {
		return 0, 1 << minClassExp, n > 0
	}
	e := bits.Len(uint(n)) - 1 // 2^e <= n < 2^(e+1)
	step := 1 << (e - 3)
	k := (n - 1<<e + step - 1) / step
	if k == stepsPerExp {
		e, k = e+1, 0
	}
	if e > maxClassExp || e == maxClassExp && k > 0 {
		return 0, 0, false
	}
	return (e-minClassExp)*stepsPerExp + k, 1<<e + k<<(e-3), true
}

// floorClass is the largest class no bigger than c bytes.
func floorClass(c int) (idx int, ok bool) {
	if c < 1<<minClassExp {
		return 0, false
	}
	e := bits.Len(uint(c)) - 1
	if e >= maxClassExp {
		return (maxClassExp - minClassExp) * stepsPerExp, true
	}
	k := (c - 1<<e) >> (e - 3)
	return (e-minClassExp)*stepsPerExp + k, true
}

// getBuffer returns a buffer of length n from the pool; its contents are
// whatever the last user left.
func getBuffer(n int) []byte {
	idx, size, ok := ceilClass(n)
	if !ok {
		return make([]byte, n)
	}
	if p, _ := classes[idx].Get().(*[]byte); p != nil {
		b := (*p)[:n]
		*p = nil
		boxes.Put(p)
		return b
	}
	return make([]byte, n, size)
}

// boxes holds the *[]byte a pool class stores its buffers in, emptied: the
// next Recycle reuses one instead of allocating a slice header on the
// heap for each buffer it puts back.
var boxes = sync.Pool{New: func() any { return new([]byte) }}

func putBuffer(p *[]byte) {
	if idx, ok := floorClass(cap(*p)); ok {
		*p = (*p)[:cap(*p)]
		classes[idx].Put(p)
	}
}

// Recycle hands a payload the codec received (a PSRequest's or PSResponse's
// Data) back to its pool, to be reused by a later message. Call it only when
// nothing refers to the payload or a view of it any more (AsFloats views
// it). Payloads below PoolThreshold, and slices of other origin, may be
// passed too: they are pooled or dropped by their capacity, which is safe
// under the same condition. Not recycling is always safe; it only leaves
// the buffer to the garbage collector.
func Recycle(b []byte) {
	if cap(b) < 1<<minClassExp {
		return
	}
	p := boxes.Get().(*[]byte)
	*p = b
	putBuffer(p)
}

// bufferPool is the pool as a gRPC mem.BufferPool, for the transport's own
// read buffers (16 KB HTTP/2 frames). gRPC's default pool zeroes every
// buffer it hands out; this one does not, which saves clearing each byte
// received once more (gRPC fills what it takes from the pool).
type bufferPool struct{}

func (bufferPool) Get(n int) *[]byte {
	b := getBuffer(n)
	return &b
}

func (bufferPool) Put(p *[]byte) { putBuffer(p) }

// BufferPool is the data plane's gRPC buffer pool (see psclient's dial and
// server options).
func BufferPool() mem.BufferPool { return bufferPool{} }

// outgoing holds the payloads from NewPayload not yet marshalled, by the
// address of their first byte.
var outgoing sync.Map

// NewPayload returns a pooled buffer of n bytes for the payload of a
// message about to be sent (a server's pull response). The codec hands it
// to gRPC as a reference-counted buffer that goes back to the pool once
// the transport has written it, so the caller must not touch it after the
// send. A buffer that is never sent is simply left to the garbage
// collector.
func NewPayload(n int) []byte {
	b := getBuffer(n)
	if n >= PoolThreshold {
		outgoing.Store(&b[0], struct{}{})
	}
	return b
}

// sendBuffer is the payload's gRPC buffer: a recycling one for a payload
// from NewPayload, a plain view otherwise.
func sendBuffer(payload []byte) mem.Buffer {
	if len(payload) >= PoolThreshold {
		if _, ok := outgoing.LoadAndDelete(&payload[0]); ok {
			return mem.NewBuffer(&payload, bufferPool{})
		}
	}
	return mem.SliceBuffer(payload)
}

// Buffer returns a pooled buffer of n bytes (contents undefined) for a
// transport other than gRPC; give it back with Recycle.
func Buffer(n int) []byte { return getBuffer(n) }
