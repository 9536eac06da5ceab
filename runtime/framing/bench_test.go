package framing

import (
	"testing"

	"github.com/kelpie/kelpie/proto/pspb"
)

// echoServer plays a parameter server on b for the benchmarks: a push's
// payload is read into one reused buffer and acknowledged; a pull is
// answered from params with one writev. It allocates nothing per frame.
func echoServer(b *Conn, params []byte) {
	var req pspb.PSRequest
	var resp pspb.PSResponse
	buf := make([]byte, len(params))
	for {
		h, meta, err := b.ReadHeader()
		if err != nil {
			return
		}
		if err := DecodeRequest(meta, &req); err != nil {
			return
		}
		if err := b.ReadPayload(buf[:h.Payload]); err != nil {
			return
		}
		var out []byte
		if req.Op == pspb.Op_OP_PULL {
			out = params
		}
		resp.Version = req.Progress
		if err := b.WriteFrame(KindResponse, h.ID, AppendResponse(b.MetaBuf(), &resp), out); err != nil {
			return
		}
	}
}

// opClient is the worker's side of the benchmarks: one request in flight
// against an echoServer, everything it needs allocated up front.
type opClient struct {
	a    *Conn
	op   pspb.Op
	req  pspb.PSRequest
	resp pspb.PSResponse
	grad []byte
	dst  [][]byte // the worker's parameter slices
}

func newOpClient(t testing.TB, op pspb.Op, size int) *opClient {
	a, b := pipe(t)
	go echoServer(b, make([]byte, size))
	return &opClient{a: a, op: op, req: pspb.PSRequest{Op: op, Worker: 1, Blocks: []uint32{0}},
		grad: make([]byte, size), dst: [][]byte{make([]byte, size/2), make([]byte, size-size/2)}}
}

// do makes request i and reads its answer (a pull's straight into dst).
func (c *opClient) do(i int) error {
	c.req.Progress = int64(i)
	var payload []byte
	if c.op == pspb.Op_OP_PUSH {
		payload = c.grad
	}
	if err := c.a.WriteFrame(KindRequest, uint64(i), AppendRequest(c.a.MetaBuf(), &c.req), payload); err != nil {
		return err
	}
	h, meta, err := c.a.ReadHeader()
	if err != nil {
		return err
	}
	if err := DecodeResponse(meta, &c.resp); err != nil {
		return err
	}
	if h.Payload > 0 {
		return c.a.ReadPayloadInto(c.dst)
	}
	return c.a.ReadPayload(nil)
}

func benchOp(bm *testing.B, op pspb.Op, size int) {
	c := newOpClient(bm, op, size)
	bm.SetBytes(int64(size))
	bm.ReportAllocs()
	bm.ResetTimer()
	for i := range bm.N {
		if err := c.do(i); err != nil {
			bm.Fatal(err)
		}
	}
}

// TestOpAllocs holds the README's claim for the transport alone: a 1 MiB
// push or pull and its answer, both ends (the echo server runs in this
// process), allocate nothing.
func TestOpAllocs(t *testing.T) {
	for _, op := range []pspb.Op{pspb.Op_OP_PUSH, pspb.Op_OP_PULL} {
		c := newOpClient(t, op, 1<<20)
		i := 0
		for ; i < 10; i++ { // warm up: buffers grow to their size once
			if err := c.do(i); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		n := testing.AllocsPerRun(200, func() {
			if e := c.do(i); e != nil && err == nil {
				err = e
			}
			i++
		})
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%v 1 MiB round trip: %v allocations; want 0", op, n)
		}
	}
}

// BenchmarkPush1MB: one 1 MiB push and its acknowledgement, one in flight.
func BenchmarkPush1MB(b *testing.B) { benchOp(b, pspb.Op_OP_PUSH, 1<<20) }

// BenchmarkPull1MB: one 1 MiB pull read straight into the parameters.
func BenchmarkPull1MB(b *testing.B) { benchOp(b, pspb.Op_OP_PULL, 1<<20) }
