package server

import (
	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/optim"
	"github.com/kelpie/kelpie/runtime/tensorwire"
	"github.com/kelpie/kelpie/runtime/wire"
)

// A large push on the framed transport is applied as its payload arrives:
// each part read from the connection is updated into a new copy of its
// blocks' values while it is still in the cache (optim.ApplyTo, out of
// place), instead of one more pass over the whole gradient once the frame
// is in. The push takes effect only when it is handled, as any other: if
// its blocks are unchanged since it began (same block, same generation),
// the copies become the blocks' values; if anything changed them in
// between (another push, a commit, a table change), if the sync model
// rejects the push, or if the frame ends early, the copies are thrown away
// and the parameters are exactly what they would have been without
// staging (the push, if handled, is applied from its whole gradient, as
// before). Staging applies only where a push updates the parameters at
// once with an update that has no state: not under aggregating sync models
// (BSP sums before it applies), not with momentum or Adam, not to sparse
// rows, not while blocks are in transit.

// stageMin is the least payload staged: below it one pass over a gradient
// that is still in the cache costs less than the bookkeeping.
var stageMin = 256 << 10

// stageRead bounds one read of a staged payload, so that what is applied
// after it is still in the cache.
const stageRead = 256 << 10

// staged is a push whose update was computed while it arrived.
type staged struct {
	opt    optim.Config
	ids    []uint32
	blocks []*block    // as they were when the push began
	gens   []uint64    // their generations then
	out    [][]float32 // the updated values, per block (pooled)
	done   []int       // values of each block computed so far
	finite []bool      // whether every computed value is finite
	cur    int         // the block being computed
	off    int         // its first value in the gradient
	failed bool        // a block changed: the copies are useless
}

// stage starts staging req, a push whose payload (req.Data, not yet read)
// is about to arrive, in st (reused: a connection stages one push at a
// time), and returns st, or nil if req cannot be staged.
func (s *Server) stage(req *kelpiepb.PSRequest, st *staged) *staged {
	if len(req.Data) < stageMin || len(req.RowKeys) > 0 || len(req.Blocks) == 0 ||
		(req.Op != kelpiepb.Op_OP_PUSH && req.Op != kelpiepb.Op_OP_PUSH_PULL) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.Sync.Aggregate() || !optim.OutOfPlace(s.cfg.Optim) || len(s.el.held) > 0 || s.needsIncoming(req) || s.check(req) != nil {
		return nil
	}
	*st = staged{opt: s.cfg.Optim.At(req.Progress), ids: req.Blocks, blocks: st.blocks[:0], gens: st.gens[:0],
		out: st.out[:0], done: st.done[:0], finite: st.finite[:0]}
	for _, id := range req.Blocks {
		b := s.blocks[int(id)]
		st.blocks = append(st.blocks, b)
		st.gens = append(st.gens, b.gen)
		st.out = append(st.out, wire.AsFloats(wire.Buffer(4*len(b.vals))))
		st.done = append(st.done, 0)
		st.finite = append(st.finite, true)
	}
	return st
}

// readStaged reads a staged push's payload into data, updating what has
// arrived after each read. On an error (a frame that ends early) the
// caller releases st: nothing has changed.
func (s *Server) readStaged(tc *tensorwire.Conn, data []byte, st *staged) error {
	g := wire.AsFloats(data)
	got := 0
	for got < len(data) {
		n, err := tc.ReadPayloadSome(data[got:min(len(data), got+stageRead)])
		got += n
		if err != nil {
			return err
		}
		s.advance(st, g, got/4)
	}
	return nil
}

// advance computes the staged update of the gradient's first arrived
// values, in pieces that give exactly one Apply's results (see
// optim.PieceUnit).
func (s *Server) advance(st *staged, g []float32, arrived int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for !st.failed && st.cur < len(st.blocks) {
		b := st.blocks[st.cur]
		if s.blocks[int(st.ids[st.cur])] != b || b.gen != st.gens[st.cur] {
			st.failed = true // changed under us: the push will apply its whole gradient
			return
		}
		n := len(b.vals)
		lo, hi := st.done[st.cur], min(arrived-st.off, n)
		if hi < n {
			hi &^= optim.PieceUnit - 1
			if n-hi < optim.PieceUnit {
				hi = (n - optim.PieceUnit) &^ (optim.PieceUnit - 1)
			}
		}
		if hi <= lo {
			return
		}
		base := st.off
		if !optim.ApplyTo(st.opt, st.out[st.cur][lo:hi], b.vals[lo:hi], g[base+lo:base+hi]) {
			st.finite[st.cur] = false
		}
		st.done[st.cur] = hi
		if hi < n {
			return
		}
		st.cur++
		st.off += n
	}
}

// adopt makes the staged values the blocks' own if the whole push was
// computed, with opt, over the blocks as they still are; it reports
// whether it did. The caller holds s.mu and has checked the request.
func (s *Server) adopt(st *staged, opt optim.Config) bool {
	if st == nil || st.failed || st.cur < len(st.blocks) || st.opt != opt {
		return false
	}
	for i, b := range st.blocks {
		if s.blocks[int(st.ids[i])] != b || b.gen != st.gens[i] {
			return false
		}
	}
	for i, b := range st.blocks {
		old := b.vals
		b.vals, st.out[i] = st.out[i], nil
		b.gen++
		if l := b.lent; l != nil {
			b.lent = nil
			l.drop() // the responses still writing the old values keep them
		} else if b.pooled {
			wire.Recycle(wire.AsBytes(old))
		}
		b.pooled = true
		if !st.finite[i] {
			b.nonFinite = true
		}
	}
	return true
}

// release gives back the copies adopt did not take.
func (st *staged) release() {
	if st == nil {
		return
	}
	for i, o := range st.out {
		if o != nil {
			wire.Recycle(wire.AsBytes(o))
			st.out[i] = nil
		}
	}
}
