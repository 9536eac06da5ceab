package tensorwire

import (
	"testing"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// echoServer plays a parameter server on b for the benchmarks: a push's
// payload is read into one reused buffer and acknowledged; a pull is
// answered from params with one writev. It allocates nothing per frame.
func echoServer(b *Conn, params []byte) {
	var req kelpiepb.PSRequest
	var resp kelpiepb.PSResponse
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
		if req.Op == kelpiepb.Op_OP_PULL {
			out = params
		}
		resp.Version = req.Progress
		if err := b.WriteFrame(KindResponse, h.ID, AppendResponse(b.MetaBuf(), &resp), out); err != nil {
			return
		}
	}
}

func benchOp(bm *testing.B, op kelpiepb.Op, size int) {
	a, b := pipe(bm)
	params := make([]byte, size)
	go echoServer(b, params)
	grad := make([]byte, size)
	dst := [][]byte{make([]byte, size/2), make([]byte, size-size/2)} // the worker's parameter slices
	req := &kelpiepb.PSRequest{Op: op, Worker: 1, Blocks: []uint32{0}}
	var resp kelpiepb.PSResponse
	bm.SetBytes(int64(size))
	bm.ReportAllocs()
	bm.ResetTimer()
	for i := range bm.N {
		req.Progress = int64(i)
		var payload []byte
		if op == kelpiepb.Op_OP_PUSH {
			payload = grad
		}
		if err := a.WriteFrame(KindRequest, uint64(i), AppendRequest(a.MetaBuf(), req), payload); err != nil {
			bm.Fatal(err)
		}
		h, meta, err := a.ReadHeader()
		if err != nil {
			bm.Fatal(err)
		}
		if err := DecodeResponse(meta, &resp); err != nil {
			bm.Fatal(err)
		}
		if h.Payload > 0 {
			err = a.ReadPayloadInto(dst)
		} else {
			err = a.ReadPayload(nil)
		}
		if err != nil {
			bm.Fatal(err)
		}
	}
}

// BenchmarkPush1MB: one 1 MiB push and its acknowledgement, one in flight.
func BenchmarkPush1MB(b *testing.B) { benchOp(b, kelpiepb.Op_OP_PUSH, 1<<20) }

// BenchmarkPull1MB: one 1 MiB pull read straight into the parameters.
func BenchmarkPull1MB(b *testing.B) { benchOp(b, kelpiepb.Op_OP_PULL, 1<<20) }
