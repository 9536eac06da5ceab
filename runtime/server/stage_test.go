package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/blocks"
	"github.com/kelpie/kelpie/runtime/optim"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/syncmodel"
	"github.com/kelpie/kelpie/runtime/tensorwire"
	"github.com/kelpie/kelpie/runtime/wire"
)

// denseServer is a single server holding one dense block per length in
// lens, with initial values that round differently at every element.
func denseServer(t testing.TB, sc syncmodel.Config, opt optim.Config, lens ...int) *Server {
	t.Helper()
	var ts []blocks.Tensor
	for i, n := range lens {
		ts = append(ts, blocks.Tensor{Name: fmt.Sprintf("t%d", i), Rows: 1, Cols: n})
	}
	bs, err := blocks.Layout(ts, 1<<30, 1, blocks.RoundRobin)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := blocks.Assign(bs, 1, blocks.RoundRobin, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Name: "server-0", Sync: sc, Optim: opt, Workers: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	s.Install(tab, 0, func(b blocks.Block) []float32 {
		v := make([]float32, b.Floats())
		for i := range v {
			v[i] = float32(i%23)*0.173 - 1.9
		}
		return v
	})
	for i, n := range lens {
		if got := len(s.blocks[i].vals); got != n {
			t.Fatalf("block %d has %d values, want %d", i, got, n)
		}
	}
	return s
}

// gradient is a push's payload over blocks of lens, different per seed.
func gradient(seed int, lens ...int) []byte {
	n := 0
	for _, l := range lens {
		n += l
	}
	g := make([]float32, n)
	for i := range g {
		g[i] = float32((i*7+seed*13)%31)*0.0371 - 0.52
	}
	return wire.AsBytes(g)
}

func blockIDs(lens []int) []uint32 {
	ids := make([]uint32, len(lens))
	for i := range ids {
		ids[i] = uint32(i)
	}
	return ids
}

func sameParams(t *testing.T, what string, got, want map[int][]float32) {
	t.Helper()
	for id, w := range want {
		g := got[id]
		if len(g) != len(w) {
			t.Fatalf("%s: block %d has %d values, want %d", what, id, len(g), len(w))
		}
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("%s: block %d [%d] = %v, want %v", what, id, i, g[i], w[i])
			}
		}
	}
}

// serveFramed listens for framed connections to s on loopback.
func serveFramed(t testing.TB, s *Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.Listen(lis, Framed{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return lis.Addr().String()
}

// TestStagedPushMatchesWholeApply: large pushes over the framed transport,
// updated as they arrive, leave bit for bit the parameters the whole-buffer
// apply leaves, over block sizes that are no multiple of a read or of the
// vector unit, several blocks per push, and a push-pull.
func TestStagedPushMatchesWholeApply(t *testing.T) {
	sgd := optim.Config{Kind: optim.SGD, LR: 0.61}
	for _, lens := range [][]int{{100003}, {70001, 65537}, {stageRead/4 + 1, 33, 2*stageRead/4 - 5}} {
		t.Run(fmt.Sprint(lens), func(t *testing.T) {
			staged := denseServer(t, syncmodel.Config{Model: syncmodel.ASP}, sgd, lens...)
			whole := denseServer(t, syncmodel.Config{Model: syncmodel.ASP}, sgd, lens...)
			c, err := psclient.DialWith(context.Background(), serveFramed(t, staged), psclient.Options{Credentials: tensorwire.SharedSecret(nil)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 3 {
				op := kelpiepb.Op_OP_PUSH
				if i == 2 {
					op = kelpiepb.Op_OP_PUSH_PULL
				}
				req := &kelpiepb.PSRequest{Op: op, Blocks: blockIDs(lens), Progress: int64(i + 1), Data: gradient(i, lens...)}
				if len(req.Data) < stageMin {
					t.Fatalf("a push of %d bytes is not staged", len(req.Data))
				}
				if _, err := c.Do(req); err != nil {
					t.Fatal(err)
				}
				pushNowReq(t, whole, &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: blockIDs(lens), Progress: int64(i + 1), Data: gradient(i, lens...)})
				if i == 0 {
					staged.mu.Lock()
					adopted := staged.blocks[0].pooled // only an adopted push gives a block pooled values here
					staged.mu.Unlock()
					if !adopted {
						t.Fatal("the push was not staged")
					}
				}
			}
			sameParams(t, "staged", staged.Snapshot(), whole.Snapshot())
			st, _ := staged.Stats(context.Background(), nil)
			if st.Pushes != 3 || st.BytesIn != 3*int64(len(gradient(0, lens...))) {
				t.Errorf("counters: %d pushes, %d bytes in", st.Pushes, st.BytesIn)
			}
		})
	}
}

func pushNowReq(t *testing.T, s *Server, req *kelpiepb.PSRequest) {
	t.Helper()
	if err := s.handle(req, func(r *Response) { r.Done() }, nil); err != nil {
		t.Fatal(err)
	}
}

// TestStagedPushTruncated: a push whose frame ends after some of its parts
// were updated closes the connection with a logged reason and leaves the
// parameters and counters as they were.
func TestStagedPushTruncated(t *testing.T) {
	lens := []int{100003, 70001}
	s := denseServer(t, syncmodel.Config{Model: syncmodel.ASP}, optim.Config{Kind: optim.SGD, LR: 1}, lens...)
	logs := make(chan string, 16)
	s.cfg.Logf = func(format string, a ...any) {
		select {
		case logs <- fmt.Sprintf(format, a...):
		default:
		}
	}
	before := s.Snapshot()
	nc, err := net.Dial("tcp", serveFramed(t, s))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tc := tensorwire.NewConn(nc)
	if _, err := tensorwire.ClientHandshake(tc, tensorwire.SharedSecret(nil), nil); err != nil {
		t.Fatal(err)
	}
	req := &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: blockIDs(lens), Progress: 1}
	meta := tensorwire.AppendRequest(nil, req)
	g := gradient(1, lens...)
	hdr := make([]byte, tensorwire.HeaderSize)
	tensorwire.PutHeader(hdr, tensorwire.Header{Kind: tensorwire.KindRequest, ID: 1, MetaLen: uint32(len(meta)), Payload: uint32(len(g))})
	// Past the first block and into the second, mid-piece.
	cut := 4*lens[0] + 4*1000 + 2
	if _, err := nc.Write(append(append(hdr, meta...), g[:cut]...)); err != nil {
		t.Fatal(err)
	}
	nc.(*net.TCPConn).CloseWrite()
	if _, err := io.ReadAll(nc); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Logf("read after the cut: %v", err)
	}
	waitLog(t, logs, "truncated payload")
	sameParams(t, "after a truncated push", s.Snapshot(), before)
	st, _ := s.Stats(context.Background(), nil)
	if st.Pushes != 0 || st.BytesIn != 0 {
		t.Errorf("counters after a truncated push: %d pushes, %d bytes in", st.Pushes, st.BytesIn)
	}
}

// TestStagedPushAfterAChange: a push staged over values that another push
// changed before it was handled applies its whole gradient over the new
// values (the same result as without staging), and one whose staged
// values are still current is adopted.
func TestStagedPushAfterAChange(t *testing.T) {
	lens := []int{100003}
	sgd := optim.Config{Kind: optim.SGD, LR: 0.3}
	asp := syncmodel.Config{Model: syncmodel.ASP}
	s := denseServer(t, asp, sgd, lens...)
	ref := denseServer(t, asp, sgd, lens...)
	g1, g2 := gradient(1, lens...), gradient(2, lens...)

	req := &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Data: wire.Buffer(len(g1))}
	st := s.stage(req, new(staged))
	if st == nil {
		t.Fatal("a large SGD push under ASP was not staged")
	}
	copy(req.Data, g1)
	s.advance(st, wire.AsFloats(req.Data), len(g1)/8) // half of it arrived
	pushNowReq(t, s, &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Worker: 1, Data: g2})
	s.advance(st, wire.AsFloats(req.Data), len(g1)/4)
	if !st.failed {
		t.Error("staging went on over changed values")
	}
	if _, err := s.handleHeld(req, st, func(r *Response) { r.Done() }, nil); err != nil {
		t.Fatal(err)
	}
	st.release()
	pushNowReq(t, ref, &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Worker: 1, Data: g2})
	pushNowReq(t, ref, &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Data: g1})
	sameParams(t, "after a change under staging", s.Snapshot(), ref.Snapshot())

	// Staged while a pull holds the values: adopted; the pull keeps the old ones.
	held := pullNow(t, s, 2)
	old := append([]float32(nil), payloadFloats(held)...)
	req = &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 2, Data: wire.Buffer(len(g1))}
	st = s.stage(req, new(staged))
	copy(req.Data, g1)
	s.advance(st, wire.AsFloats(req.Data), len(g1)/4)
	gen := s.blocks[0].gen
	if _, err := s.handleHeld(req, st, func(r *Response) { r.Done() }, nil); err != nil {
		t.Fatal(err)
	}
	st.release()
	if s.blocks[0].gen != gen+1 || st.out[0] != nil {
		t.Error("the staged values were not adopted")
	}
	pushNowReq(t, ref, &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 2, Data: g1})
	sameParams(t, "adopted", s.Snapshot(), ref.Snapshot())
	sameParams(t, "the lent values", map[int][]float32{0: payloadFloats(held)}, map[int][]float32{0: old})
	held.Done()
}

// TestNotStaged: pushes staging must leave to the whole-gradient path.
func TestNotStaged(t *testing.T) {
	lens := []int{100003}
	asp := syncmodel.Config{Model: syncmodel.ASP}
	for name, s := range map[string]*Server{
		"bsp":      denseServer(t, syncmodel.Config{Model: syncmodel.BSP}, optim.Config{Kind: optim.SGD, LR: 1}, lens...),
		"momentum": denseServer(t, asp, optim.Config{Kind: optim.Momentum, LR: 1}, lens...),
		"adam":     denseServer(t, asp, optim.Config{Kind: optim.Adam, LR: 1}, lens...),
	} {
		req := &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Data: wire.Buffer(4 * lens[0])}
		if s.stage(req, new(staged)) != nil {
			t.Errorf("%s: staged", name)
		}
	}
	s := denseServer(t, asp, optim.Config{Kind: optim.SGD, LR: 1}, 1000)
	if s.stage(&kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Data: wire.Buffer(4000)}, new(staged)) != nil {
		t.Error("a small push was staged")
	}
	if s.stage(&kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PULL, Blocks: []uint32{0}, Progress: 1}, new(staged)) != nil {
		t.Error("a pull was staged")
	}
}

// BenchmarkFramedPush: one dense push at a time over the framed transport
// on loopback, updated as it arrives (staged) and after it is in (whole),
// in the same run.
func BenchmarkFramedPush(b *testing.B) {
	for _, size := range []int{1 << 20, 4 << 20} {
		for _, mode := range []string{"staged", "whole"} {
			b.Run(fmt.Sprintf("%dK/%s", size>>10, mode), func(b *testing.B) {
				if mode == "whole" {
					defer func(m int) { stageMin = m }(stageMin)
					stageMin = 1 << 62
				}
				s := denseServer(b, syncmodel.Config{Model: syncmodel.ASP}, optim.Config{Kind: optim.SGD, LR: 1}, size/4)
				c, err := psclient.DialWith(context.Background(), serveFramed(b, s), psclient.Options{Credentials: tensorwire.SharedSecret(nil)})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				req := &kelpiepb.PSRequest{Op: kelpiepb.Op_OP_PUSH, Blocks: []uint32{0}, Data: make([]byte, size)}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					req.Progress = int64(i + 1)
					if _, err := c.Do(req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
