package server

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
)

// FuzzRequest decodes arbitrary bytes as a parameter-server request and
// hands it to a server's handler (push, pull, join, leave, any op) between
// well-formed rounds of both workers: no request may panic the server or
// block its handler (a pull the sync condition holds waits in the server's
// queue, not in the call), and after every request the server's state keeps
// its invariants (serverState.check): the same blocks, each of its own
// size, and versions that only grow.
func FuzzRequest(f *testing.F) {
	seed := func(m *pspb.PSRequest) {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	seed(&pspb.PSRequest{Op: pspb.Op_OP_PUSH_PULL, Worker: 0, Progress: 0, Blocks: []uint32{0}, RowKeys: []uint64{1},
		Data: floats(0.25, 0.5, 0, 0, 0.5, 0.5)})
	seed(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Worker: 1, Progress: -1, Blocks: []uint32{0}, PullRowKeys: []uint64{0, 5}})
	seed(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 0, Progress: 1 << 50, Blocks: []uint32{0, 0}, Data: floats(1, 2, 3, 4, 5, 6, 7, 8)})
	seed(&pspb.PSRequest{Op: pspb.Op_OP_LEAVE, Worker: 1, Progress: 3})
	seed(&pspb.PSRequest{Op: pspb.Op_OP_JOIN, Worker: 7, Progress: -5})
	seed(&pspb.PSRequest{Op: pspb.Op(99), RowKeys: []uint64{1 << 63}, Data: []byte{1, 2, 3}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pspb.PSRequest
		if proto.Unmarshal(data, &req) != nil {
			return // gRPC refuses what does not decode
		}
		for _, sc := range []syncmodel.Config{{Model: syncmodel.ASP}, {Model: syncmodel.BSP, Pull: syncmodel.Lazy}} {
			s := newServer(t, sc)
			state := readState(s)
			step := func(what string, r *pspb.PSRequest) {
				t.Helper()
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = s.handle(r, func(r *Response) { r.Done() }, nil)
				}()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					t.Fatalf("%v: %s: handle(%v) did not return", sc.Model, what, r)
				}
				next := readState(s)
				if err := state.check(next); err != nil {
					t.Fatalf("%v: after %s %v: %v", sc.Model, what, r, err)
				}
				state = next
			}
			// A round of both workers, the fuzzed request, another round:
			// the request lands on a server that has trained, and the
			// server must still train after it.
			for w := int32(0); w < 2; w++ {
				step("round 0", fuzzRound(w, 0))
			}
			step("the fuzzed request", proto.CloneOf(&req))
			for w := int32(0); w < 2; w++ {
				step("round 1", fuzzRound(w, 1))
			}
		}
	})
}

// fuzzRound is a well-formed push-pull of worker w at progress p: newServer's
// server-0 holds dense block 0 (4 floats) and sparse rows 0-1 and 4-5 (2 wide).
func fuzzRound(w int32, p int64) *pspb.PSRequest {
	return &pspb.PSRequest{Op: pspb.Op_OP_PUSH_PULL, Worker: w, Progress: p, Blocks: []uint32{0}, RowKeys: []uint64{1},
		Data: floats(0.25, 0.5, 0, 0, 0.5, 0.5)}
}

// serverState is what FuzzRequest checks between requests.
type serverState struct {
	blocks  map[int]blockState
	vtrain  int64  // the sync engine's training version
	version uint64 // the assignment version
}

type blockState struct {
	floats int64 // the block's size by its metadata
	vals   int   // len(vals)
	acc    int   // len(acc): 0 or the block's size
	seq    uint64
}

func readState(s *Server) serverState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := serverState{blocks: map[int]blockState{}, vtrain: s.engine.VTrain(), version: s.version}
	for id, b := range s.blocks {
		st.blocks[id] = blockState{floats: b.meta.Floats(), vals: len(b.vals), acc: len(b.acc), seq: b.seq}
	}
	return st
}

// check says what next, read after a request, breaks of the invariants
// relative to st, read before it: no request adds or drops a block (only a
// table switch does, and these requests carry none), every block keeps the
// size its metadata gives, its sums are absent or of that size, and the
// training version, the assignment version and every block's change count
// never go back.
func (st serverState) check(next serverState) error {
	if len(next.blocks) != len(st.blocks) {
		return fmt.Errorf("%d blocks, had %d", len(next.blocks), len(st.blocks))
	}
	for id, b := range next.blocks {
		was, ok := st.blocks[id]
		switch {
		case !ok:
			return fmt.Errorf("block %d appeared", id)
		case b.floats != was.floats:
			return fmt.Errorf("block %d: size %d floats, had %d", id, b.floats, was.floats)
		case int64(b.vals) != b.floats:
			return fmt.Errorf("block %d: %d values for a block of %d floats", id, b.vals, b.floats)
		case b.acc != 0 && int64(b.acc) != b.floats:
			return fmt.Errorf("block %d: %d gradient sums for a block of %d floats", id, b.acc, b.floats)
		case b.seq < was.seq:
			return fmt.Errorf("block %d: change count went back from %d to %d", id, was.seq, b.seq)
		}
	}
	if next.vtrain < st.vtrain {
		return fmt.Errorf("training version went back from %d to %d", st.vtrain, next.vtrain)
	}
	if next.version < st.version {
		return fmt.Errorf("assignment version went back from %d to %d", st.version, next.version)
	}
	return nil
}

// TestServerStateCheck: the invariants FuzzRequest checks refuse what they
// must, so a mistake in check cannot silently let everything through.
func TestServerStateCheck(t *testing.T) {
	base := func() serverState {
		return serverState{vtrain: 3, version: 2, blocks: map[int]blockState{
			0: {floats: 4, vals: 4, acc: 4, seq: 5},
			2: {floats: 4, vals: 4, seq: 1},
		}}
	}
	tests := []struct {
		name   string
		mutate func(*serverState)
		ok     bool
	}{
		{"unchanged", func(*serverState) {}, true},
		{"grown", func(s *serverState) { s.vtrain, s.version, s.blocks[0] = 4, 3, blockState{floats: 4, vals: 4, seq: 6} }, true},
		{"block dropped", func(s *serverState) { delete(s.blocks, 2) }, false},
		{"block swapped", func(s *serverState) { delete(s.blocks, 2); s.blocks[9] = blockState{floats: 4, vals: 4} }, false},
		{"values shrank", func(s *serverState) { s.blocks[0] = blockState{floats: 4, vals: 3, seq: 5} }, false},
		{"metadata resized", func(s *serverState) { s.blocks[0] = blockState{floats: 8, vals: 8, seq: 5} }, false},
		{"sums of the wrong size", func(s *serverState) { s.blocks[2] = blockState{floats: 4, vals: 4, acc: 2, seq: 1} }, false},
		{"change count back", func(s *serverState) { s.blocks[0] = blockState{floats: 4, vals: 4, seq: 4} }, false},
		{"training version back", func(s *serverState) { s.vtrain = 2 }, false},
		{"assignment version back", func(s *serverState) { s.version = 1 }, false},
	}
	for _, tc := range tests {
		next := base()
		tc.mutate(&next)
		if err := base().check(next); (err == nil) != tc.ok {
			t.Errorf("%s: check = %v; want ok %v", tc.name, err, tc.ok)
		}
	}
}
