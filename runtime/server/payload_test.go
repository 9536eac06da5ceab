package server

import (
	"sync"
	"testing"

	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/wire"
)

// pullNow runs a pull through the handler and returns its response, its
// payload still lent (Done not called).
func pullNow(t *testing.T, s *Server, progress int64) *Response {
	t.Helper()
	var got *Response
	if err := s.handle(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Blocks: []uint32{0}, Progress: progress}, func(r *Response) { got = r }, nil); err != nil || got == nil {
		t.Fatalf("pull: %v (answered %v)", err, got != nil)
	}
	return got
}

func pushNow(t *testing.T, s *Server, progress int64, g ...float32) {
	t.Helper()
	if err := s.handle(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: progress, Data: floats(g...)}, func(r *Response) { r.Done() }, nil); err != nil {
		t.Fatalf("push: %v", err)
	}
}

func payloadFloats(r *Response) []float32 {
	var out []float32
	for _, p := range r.Parts {
		out = append(out, wire.AsFloats(p)...)
	}
	return out
}

// TestPullLendsParameters: a pull's payload is the block's values
// themselves (no copy); a push while it is being written updates a copy,
// so the response keeps the values it was answered with; with no pull in
// flight a push updates the block in place.
func TestPullLendsParameters(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	b := s.blocks[0]
	r1 := pullNow(t, s, 0)
	if got := payloadFloats(r1); len(got) != 4 || got[0] != 1 || &r1.Parts[0][0] != &wire.AsBytes(b.vals)[0] {
		t.Fatalf("pull = %v; want the block's own four 1s", got)
	}
	pushNow(t, s, 1, 1, 1, 1, 1) // SGD at rate 1: the block becomes 0s
	if got := payloadFloats(r1); got[0] != 1 || got[3] != 1 {
		t.Errorf("the pull in flight now carries %v; want the 1s it was answered with", got)
	}
	r2 := pullNow(t, s, 1)
	if got := payloadFloats(r2); got[0] != 0 || got[3] != 0 {
		t.Errorf("a pull after the push = %v; want 0s", got)
	}
	r1.Done()
	r2.Done()
	before := &b.vals[0]
	pushNow(t, s, 2, 1, 1, 1, 1)
	if &b.vals[0] != before || b.vals[0] != -1 {
		t.Errorf("with nothing lent the push moved the block (%v) or got %v; want -1 in place", &b.vals[0] != before, b.vals[0])
	}
	// Flatten (gRPC) copies and gives the values back at once.
	r3 := pullNow(t, s, 2)
	r3.Flatten()
	if got := wire.AsFloats(r3.Data); len(got) != 4 || got[0] != -1 || r3.Parts != nil || b.lent.refs.Load() != 1 {
		t.Errorf("flattened pull = %v, parts %v, lease refs %d; want four -1s and the lease back", got, r3.Parts, b.lent.refs.Load())
	}
}

// TestLentValuesUnderConcurrentPushes: responses read their payload while
// pushes update the block (run with -race: a write into lent values is a
// data race); every response sees one consistent version (all four values
// equal).
func TestLentValuesUnderConcurrentPushes(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	const n = 200
	resps := make(chan *Response, 8)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := range resps {
			v := payloadFloats(r)
			if v[0] != v[1] || v[1] != v[2] || v[2] != v[3] {
				t.Errorf("a pull carries a torn version %v", v)
			}
			r.Done()
		}
	}()
	for i := range n {
		s.mu.Lock() // as the handler: lend under the server's lock
		r := s.read(&pspb.PSRequest{Blocks: []uint32{0}}, false)
		s.mu.Unlock()
		resps <- r
		pushNow(t, s, int64(i+1), 1, 1, 1, 1)
	}
	close(resps)
	wg.Wait()
}
