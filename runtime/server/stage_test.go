package server

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/wire"
)

// bigFloats is the length of each of bigServer's two dense blocks: large
// enough to be staged (stage.go), not a whole number of chunks or of the
// kernels' 32 values.
const bigFloats = 3*stageChunk + 45

// bigServer is one server holding two dense blocks of bigFloats values
// (ids 0 and 1), with the given optimizer.
func bigServer(t *testing.T, sc syncmodel.Config, o optim.Config) *Server {
	t.Helper()
	return serverOf(t, sc, o, bigFloats)
}

// serverOf is bigServer with blocks of n values.
func serverOf(t *testing.T, sc syncmodel.Config, o optim.Config, n int) *Server {
	t.Helper()
	bs, err := blocks.Layout([]blocks.Tensor{{Name: "w", Rows: 2, Cols: n}}, 4*int64(n), 1, blocks.RoundRobin)
	if err != nil {
		t.Fatal(err)
	}
	tab, _ := blocks.Assign(bs, 1, blocks.RoundRobin, 1)
	s, err := New(Config{Name: "server-0", Sync: sc, Optim: o, Workers: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	s.Install(tab, 0, func(b blocks.Block) []float32 {
		v := make([]float32, b.Floats())
		for i := range v {
			v[i] = float32(i%13) / 8
		}
		return v
	})
	return s
}

// grad is push k's gradient over both blocks.
func grad(k int) []byte {
	g := make([]float32, 2*bigFloats)
	for i := range g {
		g[i] = float32((i*7+k)%29)/16 - 0.9
	}
	return wire.AsBytes(g)
}

func listenFramed(t *testing.T, s *Server) string {
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

// TestStagedPushEqualsInPlace: large pushes over the framed transport,
// their updates computed as the payload arrives, leave every value and the
// optimizer state bit for bit as the same pushes applied in place do (a
// server handed whole requests), for every optimizer, with pulls between
// them; and the pushes were staged.
func TestStagedPushEqualsInPlace(t *testing.T) {
	for _, kind := range []string{optim.SGD, optim.Momentum, optim.Adam} {
		t.Run(kind, func(t *testing.T) {
			o := optim.Config{Kind: kind, LR: 0.01}
			staged := bigServer(t, syncmodel.Config{Model: syncmodel.ASP}, o)
			ref := bigServer(t, syncmodel.Config{Model: syncmodel.ASP}, o)
			c, err := psclient.DialWith(context.Background(), listenFramed(t, staged), psclient.Options{Transport: psclient.TransportTCP, Credentials: framing.SharedSecret(nil)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for k := 1; k <= 4; k++ {
				w := int32(k % 2)
				req := &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: w, Blocks: []uint32{0, 1}, Progress: int64(k), Data: grad(k)}
				if k == 3 {
					req.Op = pspb.Op_OP_PUSH_PULL
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("push %d: %v", k, err)
				}
				wire.Recycle(resp.Data)
				if err := ref.handle(&pspb.PSRequest{Op: req.Op, Worker: w, Blocks: req.Blocks, Progress: req.Progress, Data: grad(k)},
					func(r *Response) { r.Done() }, nil); err != nil {
					t.Fatal(err)
				}
				// A pull between pushes lends the values (copy on write).
				if _, err := c.Do(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Worker: w, Blocks: []uint32{1}, Progress: int64(k)}); err != nil {
					t.Fatal(err)
				}
			}
			got, want := staged.Snapshot(), ref.Snapshot()
			for id := range want {
				if !slices.Equal(got[id], want[id]) {
					t.Errorf("block %d differs from the in-place server's", id)
				}
				gs, ws := staged.blocks[id].opt, ref.blocks[id].opt
				if gs.Step != ws.Step || !slices.Equal(gs.M, ws.M) || !slices.Equal(gs.V, ws.V) {
					t.Errorf("block %d: optimizer state differs from the in-place server's", id)
				}
			}
			staged.mu.Lock()
			n, left := staged.stats.Pushes, len(staged.staged)
			staged.mu.Unlock()
			if n != 4 || staged.stagedPushes != 4 || left != 0 {
				t.Errorf("%d pushes, %d staged, %d staged updates left over; want 4, 4, 0", n, staged.stagedPushes, left)
			}
		})
	}
}

// TestStagedPushTruncated: a push whose connection ends in the middle of
// its payload leaves no trace: the values are unchanged, the push is not
// counted and nothing staged is left behind; the connection's end is
// logged as a bad frame.
func TestStagedPushTruncated(t *testing.T) {
	s := bigServer(t, syncmodel.Config{Model: syncmodel.ASP}, optim.Config{Kind: optim.Momentum, LR: 0.5})
	before := s.Snapshot()
	// Past the first block and into the second: ranges of both computed.
	pushTruncated(t, s, &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0, 1}, Progress: 1}, grad(1))
	// The session has ended (the log comes after): nothing more happens.
	if got := s.Snapshot(); !slices.Equal(got[0], before[0]) || !slices.Equal(got[1], before[1]) {
		t.Error("a truncated push changed the values")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stats.Pushes != 0 || s.stats.BytesIn != 0 || len(s.staged) != 0 || s.stagedPushes != 0 {
		t.Errorf("after a truncated push: %d pushes, %d bytes in, %d staged updates, %d installed; want none",
			s.stats.Pushes, s.stats.BytesIn, len(s.staged), s.stagedPushes)
	}
	for id, b := range s.blocks {
		if b.opt.V != nil && slices.ContainsFunc(b.opt.V, func(v float32) bool { return v != 0 }) {
			t.Errorf("block %d: momentum changed by a truncated push", id)
		}
	}
}

// pushTruncated sends s req with the first three quarters of payload g
// over a framed connection, closes it and waits for the server to log the
// truncated payload.
func pushTruncated(t *testing.T, s *Server, req *pspb.PSRequest, g []byte) {
	t.Helper()
	logs := make(chan string, 16)
	s.cfg.Logf = func(format string, a ...any) {
		select {
		case logs <- fmt.Sprintf(format, a...):
		default:
		}
	}
	nc, err := net.Dial("tcp", listenFramed(t, s))
	if err != nil {
		t.Fatal(err)
	}
	tc := framing.NewConn(nc)
	if _, err := framing.ClientHandshake(tc, framing.SharedSecret(nil), nil); err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, framing.HeaderSize)
	meta := framing.AppendRequest(nil, req)
	framing.PutHeader(frame, framing.Header{Kind: framing.KindRequest, ID: 1, MetaLen: uint32(len(meta)), Payload: uint32(len(g))})
	frame = append(append(frame, meta...), g[:len(g)*3/4]...)
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	waitLog(t, logs, "truncated payload")
}

// TestStagedPushBlockChanged: a block that changes while a push is being
// staged against it (another worker's push) makes the staged update void;
// the push is then applied in place, so the result is the two pushes in
// the order they were handled, as without staging.
func TestStagedPushBlockChanged(t *testing.T) {
	o := optim.Config{Kind: optim.Momentum, LR: 0.25}
	s := bigServer(t, syncmodel.Config{Model: syncmodel.ASP}, o)
	ref := bigServer(t, syncmodel.Config{Model: syncmodel.ASP}, o)
	done := func(r *Response) { r.Done() }
	late := &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 0, Blocks: []uint32{0, 1}, Progress: 1, Data: grad(1)}
	st := s.beginStage(late)
	if st == nil {
		t.Fatal("a large push to dense blocks was not staged")
	}
	g := wire.AsFloats(late.Data)
	s.stageRange(st, &st.blocks[0], g[:bigFloats], 0, stageChunk)
	// Another worker's push lands in the middle.
	if err := s.handle(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 1, Blocks: []uint32{0, 1}, Progress: 1, Data: grad(2)}, done, nil); err != nil {
		t.Fatal(err)
	}
	s.stageRange(st, &st.blocks[0], g[:bigFloats], stageChunk, 2*stageChunk)
	if st.valid {
		t.Fatal("a staged update outlived a change of its block")
	}
	s.mu.Lock()
	s.dropStage(st)
	s.mu.Unlock()
	// The same, with the whole update staged before the other push: it is
	// computed against values that have moved on, so not installed.
	late2 := &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 0, Blocks: []uint32{0, 1}, Progress: 2, Data: grad(3)}
	st = s.beginStage(late2)
	g = wire.AsFloats(late2.Data)
	for i := range st.blocks {
		s.stageRange(st, &st.blocks[i], g[i*bigFloats:(i+1)*bigFloats], 0, bigFloats)
	}
	s.mu.Lock()
	s.staged[late2] = st
	s.mu.Unlock()
	if err := s.handle(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 1, Blocks: []uint32{1}, Progress: 2, Data: grad(4)[:4*bigFloats]}, done, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.handle(late, done, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.handle(late2, done, nil); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*pspb.PSRequest{
		{Worker: 1, Blocks: []uint32{0, 1}, Progress: 1, Data: grad(2)},
		{Worker: 1, Blocks: []uint32{1}, Progress: 2, Data: grad(4)[:4*bigFloats]},
		{Worker: 0, Blocks: []uint32{0, 1}, Progress: 1, Data: grad(1)},
		{Worker: 0, Blocks: []uint32{0, 1}, Progress: 2, Data: grad(3)},
	} {
		r.Op = pspb.Op_OP_PUSH
		if err := ref.handle(r, done, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, want := s.Snapshot(), ref.Snapshot()
	for id := range want {
		if !slices.Equal(got[id], want[id]) {
			t.Errorf("block %d differs from the pushes applied in place in order", id)
		}
	}
	if s.stagedPushes != 0 || len(s.staged) != 0 {
		t.Errorf("%d staged updates installed, %d left; want none", s.stagedPushes, len(s.staged))
	}
}

// TestStagedOnlyWhereApplied: bsp and drop sum pushes before applying
// them, and a server with injected slowness charges a request's delay
// before handling it: none of them stages.
func TestStagedOnlyWhereApplied(t *testing.T) {
	o := optim.Config{Kind: optim.SGD, LR: 1}
	req := &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0, 1}, Progress: 1, Data: grad(1)}
	for _, sc := range []syncmodel.Config{{Model: syncmodel.BSP}, {Model: syncmodel.Drop, DropWaitFor: 1}} {
		if st := bigServer(t, sc, o).beginStage(req); st != nil {
			t.Errorf("%s: a push was staged", sc.Model)
		}
	}
	s := bigServer(t, syncmodel.Config{Model: syncmodel.SSP, Staleness: 2}, o)
	if st := s.beginStage(req); st == nil {
		t.Error("ssp: a large push was not staged")
	}
	small := &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Data: make([]byte, 4*bigFloats)} // < stageMin
	if st := s.beginStage(small); st != nil {
		t.Error("a push under stageMin was staged")
	}
	large := &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Data: make([]byte, stageMax+128)}
	if st := serverOf(t, syncmodel.Config{Model: syncmodel.ASP}, o, stageMax/4+32).beginStage(large); st != nil {
		t.Error("a push over stageMax was staged")
	}
	s.cfg.Straggler = straggler.ForNode([]straggler.Injection{{Node: "server-0", Kind: straggler.Bandwidth, Rate: 1e9}}, "server-0")
	if st := s.beginStage(req); st != nil {
		t.Error("a server with injected slowness staged a push")
	}
}
