package server

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/syncmodel"
)

// FuzzRequest decodes arbitrary bytes as a parameter-server request and
// hands it to a server's handler (push, pull, join, leave, any op): no
// request may panic the server or block its handler (a pull the sync
// condition holds waits in the server's queue, not in the call).
func FuzzRequest(f *testing.F) {
	seed := func(m *kelpiepb.PSRequest) {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	seed(&kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH_PULL, Worker: 0, Progress: 0, Blocks: []uint32{0}, RowKeys: []uint64{1},
		Data: floats(0.25, 0.5, 0, 0, 0.5, 0.5)})
	seed(&kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PULL, Worker: 1, Progress: -1, Blocks: []uint32{0}, PullRowKeys: []uint64{0, 5}})
	seed(&kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Worker: 0, Progress: 1 << 50, Blocks: []uint32{0, 0}, Data: floats(1, 2, 3, 4, 5, 6, 7, 8)})
	seed(&kelpiepb.PSRequest{Op: kelpiepb.Op_OP_LEAVE, Worker: 1, Progress: 3})
	seed(&kelpiepb.PSRequest{Op: kelpiepb.Op_OP_JOIN, Worker: 7, Progress: -5})
	seed(&kelpiepb.PSRequest{Op: kelpiepb.Op(99), RowKeys: []uint64{1 << 63}, Data: []byte{1, 2, 3}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req kelpiepb.PSRequest
		if proto.Unmarshal(data, &req) != nil {
			return // gRPC refuses what does not decode
		}
		for _, sc := range []syncmodel.Config{{Model: syncmodel.ASP}, {Model: syncmodel.BSP, Pull: syncmodel.Lazy}} {
			s := newServer(t, sc)
			r := proto.CloneOf(&req)
			done := make(chan struct{})
			got := func(r *Response) { r.Done() }
			go func() {
				defer close(done)
				_ = s.handle(r, got, nil)
			}()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("%v: handle(%v) did not return", sc.Model, r)
			}
		}
	})
}
