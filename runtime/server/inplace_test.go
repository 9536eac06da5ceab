package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/wire"
)

// hugeFloats is the length of each of hugeServer's two dense blocks: too
// large to stage (applied in place as it arrives, inplace.go), not a whole
// number of chunks or of the kernels' 32 values.
const hugeFloats = stageMax/4 + stageChunk/2 + 45

// hugeServer is one asp server holding two dense blocks of hugeFloats
// values (ids 0 and 1), with SGD, workers 0 and 1 in its barrier.
func hugeServer(t *testing.T) *Server {
	t.Helper()
	return serverOf(t, syncmodel.Config{Model: syncmodel.ASP}, optim.Config{Kind: optim.SGD, LR: 0.375}, hugeFloats)
}

// hugeGrad is push k's gradient of one block.
func hugeGrad(k int) []byte {
	g := make([]float32, hugeFloats)
	for i := range g {
		g[i] = float32((i*7+k)%29)/16 - 0.9
	}
	return wire.AsBytes(g)
}

// TestInPlacePushEqualsApply: pushes too large to stage, applied to their
// block in place as they arrive over the framed transport, leave every
// value bit for bit as the same pushes handed whole to a server do, with
// pulls between them; a duplicate push and one from a worker outside the
// barrier are taken back (the values stay as the reference's, which
// ignores or refuses them); and the others were applied in place.
func TestInPlacePushEqualsApply(t *testing.T) {
	s, ref := hugeServer(t), hugeServer(t)
	c, err := psclient.DialWith(context.Background(), listenFramed(t, s), psclient.Options{Transport: psclient.TransportTCP, Credentials: framing.SharedSecret(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pushes := []struct {
		worker   int32
		block    uint32
		progress int64
		refused  bool
	}{{0, 0, 0, false}, {1, 0, 0, false}, {0, 1, 1, false}, {0, 0, 2, false}, {0, 0, 2, false /* a duplicate: dropped */}, {7, 0, 2, true}, {1, 0, 2, false}}
	for k, p := range pushes {
		op := pspb.Op_OP_PUSH
		if k%3 == 2 {
			op = pspb.Op_OP_PUSH_PULL // its pull reads the block once the push is settled
		}
		req := &pspb.PSRequest{Op: op, Worker: p.worker, Blocks: []uint32{p.block}, Progress: p.progress, Data: hugeGrad(k)}
		resp, err := c.Do(req)
		refResp, refErr := ref.unary(context.Background(), &pspb.PSRequest{Op: op, Worker: p.worker, Blocks: req.Blocks, Progress: p.progress, Data: hugeGrad(k)})
		if (err != nil) != p.refused || (refErr != nil) != p.refused {
			t.Fatalf("push %d: error %v (reference: %v); want one: %v", k, err, refErr, p.refused)
		}
		if err == nil && !slices.Equal(resp.Data, refResp.Data) {
			t.Fatalf("push %d (%v): the response carries other values than the reference's", k, op)
		}
		// A pull between pushes lends the values (copy on write).
		if _, err := c.Do(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Worker: 0, Blocks: []uint32{0}, Progress: 0}); err != nil {
			t.Fatal(err)
		}
	}
	got, want := s.Snapshot(), ref.Snapshot()
	for id := range want {
		if !slices.Equal(got[id], want[id]) {
			t.Errorf("block %d differs from the server handed whole pushes", id)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inPlacePushes != 5 || s.stats.Pushes != 7 || len(s.writing) != 0 {
		t.Errorf("%d pushes applied in place of %d counted, %d still being written; want 5 of 7, none", s.inPlacePushes, s.stats.Pushes, len(s.writing))
	}
}

// TestInPlacePushTruncated: a push whose connection ends in the middle of
// its payload, after some of it was applied in place, is taken back: the
// values are bit for bit as before, the push is not counted and the block
// is free again; the connection's end is logged as a bad frame.
func TestInPlacePushTruncated(t *testing.T) {
	s := hugeServer(t)
	before := s.Snapshot()
	pushTruncated(t, s, &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{1}, Progress: 0}, hugeGrad(1)) // several chunks applied
	if got := s.Snapshot(); !slices.Equal(got[0], before[0]) || !slices.Equal(got[1], before[1]) {
		t.Error("a truncated push changed the values")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stats.Pushes != 0 || s.inPlacePushes != 0 || len(s.writing) != 0 {
		t.Errorf("after a truncated push: %d pushes, %d applied in place, %d blocks being written; want none", s.stats.Pushes, s.inPlacePushes, len(s.writing))
	}
}

// TestInPlaceBlockWaits: while a push is being applied in place (half of
// it so far), a pull of its block, a push to it and a snapshot wait, and
// then see the whole push; a pull of the other block does not wait.
func TestInPlaceBlockWaits(t *testing.T) {
	s, ref := hugeServer(t), hugeServer(t)
	done := func(r *Response) { r.Done() }
	push := &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 0, Blocks: []uint32{0}, Progress: 0, Data: hugeGrad(1)}
	ip := s.beginInPlace(push, len(push.Data))
	if ip == nil {
		t.Fatal("a push too large to stage was not applied in place")
	}
	g := wire.AsFloats(push.Data)
	half := stageChunk * 2
	s.mu.Lock()
	optim.ApplyRangeUndoable(ip.opt, ip.b.vals, g, 0, half)
	s.mu.Unlock()
	ip.done = half

	pulled := make(chan []float32, 1)
	go func() {
		_ = s.handle(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Worker: 1, Blocks: []uint32{0}, Progress: 0}, func(r *Response) {
			r.Flatten()
			pulled <- slices.Clone(wire.AsFloats(r.Data))
		}, nil)
	}()
	pushed := make(chan error, 1)
	go func() {
		pushed <- s.handle(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 1, Blocks: []uint32{0}, Progress: 0, Data: hugeGrad(2)}, done, nil)
	}()
	snap := make(chan map[int][]float32, 1)
	go func() { snap <- s.Snapshot() }()
	// The other block is free.
	other := make(chan struct{})
	if err := s.handle(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Worker: 1, Blocks: []uint32{1}, Progress: 0}, func(r *Response) { r.Done(); close(other) }, nil); err != nil {
		t.Fatal(err)
	}
	<-other
	select {
	case <-pulled:
		t.Fatal("a pull of a block half written was answered")
	case <-pushed:
		t.Fatal("a push to a block half written was handled")
	case <-snap:
		t.Fatal("a snapshot was taken of a block half written")
	case <-time.After(50 * time.Millisecond):
	}
	s.mu.Lock()
	optim.ApplyRangeUndoable(ip.opt, ip.b.vals, g, half, hugeFloats)
	s.mu.Unlock()
	ip.done = hugeFloats
	if err := s.handle(push, done, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1} {
		if err := ref.handle(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 0, Blocks: []uint32{0}, Progress: 0, Data: hugeGrad(k)}, done, nil); err != nil {
			t.Fatal(err)
		}
	}
	afterFirst := ref.Snapshot()[0]
	if err := ref.handle(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 1, Blocks: []uint32{0}, Progress: 0, Data: hugeGrad(2)}, done, nil); err != nil {
		t.Fatal(err)
	}
	got, want := <-pulled, ref.Snapshot()[0]
	if !slices.Equal(got, afterFirst) && !slices.Equal(got, want) {
		t.Error("the pull that waited saw neither the whole first push nor both")
	}
	if !slices.Equal((<-snap)[0], afterFirst) && !slices.Equal(s.Snapshot()[0], want) {
		t.Error("the snapshot that waited saw a half-written block")
	}
	if !slices.Equal(s.Snapshot()[0], want) {
		t.Error("the two pushes differ from the same pushes handed whole in order")
	}
}

// TestInPlaceOnlyWhereSafe: a push is applied in place only with asp and
// SGD, to one dense block, by a push (or push and pull), on a server without injected
// slowness, no table change under way and the block not already being
// written; a push that fits the staged path is staged instead.
func TestInPlaceOnlyWhereSafe(t *testing.T) {
	sgd := optim.Config{Kind: optim.SGD, LR: 1}
	req := func() *pspb.PSRequest {
		return &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 0, Data: make([]byte, 4*hugeFloats)}
	}
	for _, tc := range []struct {
		what string
		sc   syncmodel.Config
		o    optim.Config
		edit func(*Server, *pspb.PSRequest)
	}{
		{"bsp", syncmodel.Config{Model: syncmodel.BSP}, sgd, nil},
		{"ssp", syncmodel.Config{Model: syncmodel.SSP, Staleness: 2}, sgd, nil},
		{"momentum", syncmodel.Config{Model: syncmodel.ASP}, optim.Config{Kind: optim.Momentum, LR: 1}, nil},
		{"adam", syncmodel.Config{Model: syncmodel.ASP}, optim.Config{Kind: optim.Adam, LR: 1}, nil},
		{"pull", syncmodel.Config{Model: syncmodel.ASP}, sgd, func(_ *Server, r *pspb.PSRequest) { r.Op = pspb.Op_OP_PULL }},
		{"two blocks", syncmodel.Config{Model: syncmodel.ASP}, sgd, func(_ *Server, r *pspb.PSRequest) {
			r.Blocks, r.Data = []uint32{0, 1}, make([]byte, 8*hugeFloats)
		}},
		{"staged size", syncmodel.Config{Model: syncmodel.ASP}, sgd, func(_ *Server, r *pspb.PSRequest) { r.Data = r.Data[:stageMax] }},
		{"slowness", syncmodel.Config{Model: syncmodel.ASP}, sgd, func(s *Server, _ *pspb.PSRequest) {
			s.cfg.Straggler = straggler.ForNode([]straggler.Injection{{Node: "server-0", Kind: straggler.Bandwidth, Rate: 1e9}}, "server-0")
		}},
		{"table change", syncmodel.Config{Model: syncmodel.ASP}, sgd, func(s *Server, _ *pspb.PSRequest) { s.el.outgoing = map[int]int{1: 1} }},
		{"busy", syncmodel.Config{Model: syncmodel.ASP}, sgd, func(s *Server, _ *pspb.PSRequest) {
			if s.beginInPlace(req(), 4*hugeFloats) == nil {
				panic("no first push in place")
			}
		}},
	} {
		s := serverOf(t, tc.sc, tc.o, hugeFloats)
		r := req()
		if tc.edit != nil {
			tc.edit(s, r)
		}
		if ip := s.beginInPlace(r, len(r.Data)); ip != nil {
			t.Errorf("%s: a push was applied in place", tc.what)
		}
	}
	if s := hugeServer(t); s.beginInPlace(req(), 4*hugeFloats) == nil {
		t.Error("asp, sgd: a large push was not applied in place")
	}
	pp := req()
	pp.Op = pspb.Op_OP_PUSH_PULL
	if s := hugeServer(t); s.beginInPlace(pp, 4*hugeFloats) == nil {
		t.Error("asp, sgd: a large push and pull was not applied in place")
	}
}
