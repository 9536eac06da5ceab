package wire

import (
	"testing"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/pspb"
)

func TestCeilClass(t *testing.T) {
	for _, tc := range []struct{ n, size int }{
		{1, 256},
		{256, 256},
		{257, 256 + 32},
		{4096, 4096},
		{4097, 4096 + 512},
		{16 << 10, 16 << 10},
		{401408, 393216 + 32768}, // 784×128 floats: 2^18 + 5·2^15 = 425,984
		{1 << 20, 1 << 20},
		{1<<21 - 1, 1 << 21},
		{4 << 20, 4 << 20},
	} {
		_, size, ok := ceilClass(tc.n)
		if !ok || size != tc.size {
			t.Errorf("ceilClass(%d) = %d, %v; want %d, true", tc.n, size, ok, tc.size)
		}
	}
	if _, _, ok := ceilClass(1<<30 + 1); ok {
		t.Errorf("ceilClass(1 GiB + 1) is pooled; want not")
	}
}

func TestClassesAgree(t *testing.T) {
	// A buffer made for n is filed where a later request for n looks, and
	// every class holds what it promises.
	for n := 1; n < 1<<24; n = n*5/4 + 1 {
		idx, size, _ := ceilClass(n)
		if size < n || size > n+n/8+256 {
			t.Fatalf("ceilClass(%d) size %d: not in [n, n+12.5%%]", n, size)
		}
		if f, ok := floorClass(size); !ok || f != idx {
			t.Fatalf("floorClass(%d) = %d, %v; want %d (ceilClass of %d)", size, f, ok, idx, n)
		}
		if f, ok := floorClass(size + 1); ok && f < idx {
			t.Fatalf("floorClass(%d) = %d; want >= %d", size+1, f, idx)
		}
	}
}

func TestRecycleReuses(t *testing.T) {
	const n = 1 << 20
	reused := false
	// sync.Pool may drop an item (always possible, often under -race): try
	// a few times.
	for range 20 {
		b := getBuffer(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("getBuffer(%d): len %d cap %d", n, len(b), cap(b))
		}
		p := unsafe.SliceData(b)
		Recycle(b[:10])
		if unsafe.SliceData(getBuffer(n)) == p {
			reused = true
			break
		}
	}
	if !reused {
		t.Errorf("a recycled buffer never came back")
	}
}

// TestRecycleAllocates nothing: a buffer taken and given back, a nil or
// small slice given back, cost no allocation once the pool is warm (the
// pool's slice headers are reused, not allocated per Recycle).
func TestRecycleAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under -race")
	}
	Recycle(Buffer(4096))
	small := make([]byte, 8)
	if n := testing.AllocsPerRun(1000, func() {
		b := Buffer(4096)
		Recycle(b)
		Recycle(nil)
		Recycle(small)
	}); n != 0 {
		t.Errorf("Buffer+Recycle: %v allocations per run; want 0", n)
	}
}

// TestRoundTripFramed cuts the encoded message into 16 KB pieces, as gRPC
// hands over a message read from HTTP/2 frames, so the pooled decoding
// reads its header and payload across pieces.
func TestRoundTripFramed(t *testing.T) {
	c := codecUnderTest(t)
	for _, n := range []int{PoolThreshold/4 - 1, PoolThreshold / 4, 100000, 1 << 20} {
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(i%1000) - 3
		}
		in := &pspb.PSResponse{Id: 9, Version: 4, Delayed: true, Data: AsBytes(vals)}
		enc, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		flat := enc.Materialize()
		var framed mem.BufferSlice
		for len(flat) > 0 {
			k := min(16<<10, len(flat))
			framed = append(framed, mem.SliceBuffer(flat[:k]))
			flat = flat[k:]
		}
		var got pspb.PSResponse
		if err := c.Unmarshal(framed, &got); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if !proto.Equal(in, &got) {
			t.Fatalf("n=%d: framed round trip differs", n)
		}
		if uintptr(unsafe.Pointer(unsafe.SliceData(got.Data)))%4 != 0 {
			t.Errorf("n=%d: payload not 4-byte aligned", n)
		}
		Recycle(got.Data)
	}
}

func TestBufferPool(t *testing.T) {
	p := BufferPool()
	for _, n := range []int{1, 9, 16 << 10, 3 << 20} {
		b := p.Get(n)
		if len(*b) != n {
			t.Errorf("Get(%d) has length %d", n, len(*b))
		}
		p.Put(b)
	}
}

// TestNewPayloadRecycledAfterSend: a payload from NewPayload is marshalled
// as a reference-counted buffer that returns to the pool when gRPC frees
// it; any other payload is a plain view.
func TestNewPayloadRecycledAfterSend(t *testing.T) {
	owned := NewPayload(PoolThreshold)
	if b := sendBuffer(owned); b.Len() != PoolThreshold {
		t.Fatalf("owned payload: buffer of %d bytes", b.Len())
	} else {
		if _, plain := b.(mem.SliceBuffer); plain {
			t.Error("a payload from NewPayload was sent as a plain view: it would never be recycled")
		}
		b.Free()
	}
	// Marshalled once: a second send of the same bytes is a plain view.
	if _, plain := sendBuffer(owned).(mem.SliceBuffer); !plain {
		t.Error("the same payload was handed to gRPC as pooled twice")
	}
	other := make([]byte, PoolThreshold)
	if _, plain := sendBuffer(other).(mem.SliceBuffer); !plain {
		t.Error("a caller's own payload was sent as a pooled buffer: gRPC would recycle memory it does not own")
	}
}
