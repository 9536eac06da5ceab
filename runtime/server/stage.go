package server

import (
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/wire"
)

// A large push over the framed transport has its update computed while the
// gradient is still arriving: the payload is read a chunk at a time, and
// each chunk's update is computed at once, while the chunk is in cache and
// while the worker is still writing the rest (the server's optimizer pass
// then overlaps the transfer instead of following it). The update is
// computed out of place, into copies of the blocks' values and optimizer
// state ("staged"); the push, handled as any other once its payload is
// whole, installs the copies instead of updating the blocks in place.
//
// Nothing of a push is visible before it is whole: pulls answered
// meanwhile read the blocks as they were, and a push whose connection ends
// in the middle of its payload leaves no trace (its copies are dropped; it
// was never counted), exactly as when the whole payload was read first.
// The staged update is used only when it is the update the push would make
// in place: a model that applies pushes directly (not bsp or drop, which
// sum them first), the blocks unchanged since the first chunk was computed
// (the block's seq, which every change bumps, and the same block in the
// server's table), and the same optimizer settings; otherwise it is
// dropped and the push applied in place from the whole payload, which the
// server kept. Ranges are computed with optim.ApplyRangeTo, whose results are
// bit for bit Apply's. A server with injected slowness does not stage (its
// inbound delay is charged before a request is handled).

// Pushes of stageMin to stageMax bytes have their update computed as they
// arrive. Below stageMin, the optimizer pass is short next to the
// transfer. Above stageMax, a block, its copy and its gradient (with the
// socket buffers they came through) no longer fit in cache, and the
// update out of place costs more memory traffic than the overlap saves,
// most of all with pushes queued back to back: measured pinned on a 2-core
// EPYC (16 MiB L3), 4 MB pushes staged went from 0.60-0.76 of raw TCP to
// 0.69-0.70 with 1 in flight but from 0.84-0.90 to 0.67-0.78 with 8,
// while 1 MB pushes gain with 1 in flight (0.65 to 0.78-0.81). Larger
// pushes are applied in place as they arrive where that is safe
// (inplace.go): no copy of the block, so the block and its gradient stay
// in cache (4 MB: 0.80 of raw TCP to 1.00 with 1 in flight, 0.88 to 1.05
// with 8; staged out of place instead, 0.86 and 0.93 in one round).
const (
	stageMin = 512 << 10
	stageMax = 2 << 20
)

// stageChunk is how many values are read and updated at a time: the
// chunk's gradient, old and new values (and state) stay in L2 cache.
const stageChunk = (128 << 10) / 4

// rangeEnd is where the range of a block of size values that starts at lo
// ends: a chunk further, or the block's end when less than the kernels'
// unit would be left (a short tail goes with the range before it, so that
// a ranged update is bit for bit the whole block's: optim.ApplyRange).
func rangeEnd(lo, size int) int {
	hi := min(lo+stageChunk, size)
	if size-hi < optim.RangeUnit {
		hi = size
	}
	return hi
}

// dropPayload gives back the buffer of a payload that could not be read
// whole.
func dropPayload(req *pspb.PSRequest) {
	wire.Recycle(req.Data)
	req.Data = nil
}

// stagedBlock is one block's update computed out of place.
type stagedBlock struct {
	id     int
	b      *block
	seq    uint64 // b.seq when the update began
	vals   []float32
	state  optim.State // M and V copies; Step advanced
	finite bool
}

// staged is a push's update computed as its payload arrived.
type staged struct {
	opt    optim.Config
	blocks []stagedBlock
	valid  bool // every range was computed against unchanged blocks
}

// readPayload reads a request's payload (n bytes) into a pooled buffer,
// req.Data; a large push's update is staged along the way (see above), or
// one too large to stage applied in place as it arrives (inplace.go). On
// an error nothing is kept.
func (s *Server) readPayload(tc *framing.Conn, req *pspb.PSRequest, n int) error {
	if ip := s.beginInPlace(req, n); ip != nil {
		return s.readInPlace(tc, req, n, ip) // too large to stage (inplace.go)
	}
	// Aligned (pooled buffers start at an allocation) and applied from
	// here.
	req.Data = wire.Buffer(n)
	st := s.beginStage(req)
	if st == nil {
		if err := tc.ReadPayload(req.Data); err != nil {
			dropPayload(req)
			return err
		}
		return nil
	}
	// Read what has arrived (as many bytes as one read of the socket
	// gives: no more system calls than reading the payload whole), then
	// compute every range it completes.
	g := wire.AsFloats(req.Data)
	i, off, lo := 0, 0, 0 // the next range: block i (at off in g), from lo
	for got := 0; got < n; {
		k, err := tc.ReadPayloadSome(req.Data[got:])
		if err != nil {
			s.mu.Lock()
			s.dropStage(st)
			s.mu.Unlock()
			dropPayload(req)
			return err
		}
		got += k
		for st.valid && i < len(st.blocks) {
			sb := &st.blocks[i]
			size := len(sb.vals)
			hi := rangeEnd(lo, size)
			if 4*(off+hi) > got {
				break // not here yet
			}
			s.stageRange(st, sb, g[off:off+size], lo, hi)
			if lo = hi; lo == size {
				i, off, lo = i+1, off+size, 0
			}
		}
	}
	s.mu.Lock()
	if st.valid {
		s.staged[req] = st
	} else {
		s.dropStage(st)
	}
	s.mu.Unlock()
	return nil
}

// beginStage prepares the staged update of a push, or returns nil when
// the push is not one to stage (or not one this server would apply as it
// stands: the push's own handling then says why).
func (s *Server) beginStage(req *pspb.PSRequest) *staged {
	if len(req.Data) < stageMin || len(req.Data) > stageMax || req.Op != pspb.Op_OP_PUSH && req.Op != pspb.Op_OP_PUSH_PULL ||
		len(req.RowKeys) > 0 || len(req.Blocks) == 0 || s.hooked() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.Sync.Aggregate() || len(s.el.held) > 0 || s.needsIncoming(req) {
		return nil
	}
	total := 0
	for i, id := range req.Blocks {
		b := s.blocks[int(id)]
		if b == nil || b.meta.Sparse || s.writing[int(id)] != nil {
			return nil
		}
		for _, other := range req.Blocks[:i] {
			if other == id {
				return nil // a block pushed twice is updated twice, in place
			}
		}
		total += len(b.vals)
	}
	if 4*total != len(req.Data) {
		return nil
	}
	var st *staged
	if n := len(s.stageFree); n > 0 {
		st, s.stageFree = s.stageFree[n-1], s.stageFree[:n-1]
	} else {
		st = &staged{}
	}
	st.opt, st.valid = s.cfg.Optim.At(req.Progress), true
	for _, id := range req.Blocks {
		b := s.blocks[int(id)]
		sb := stagedBlock{id: int(id), b: b, seq: b.seq, finite: true,
			vals: wire.AsFloats(wire.Buffer(4 * len(b.vals))), state: optim.State{Step: b.opt.Step}}
		if b.opt.M != nil {
			sb.state.M = wire.AsFloats(wire.Buffer(4 * len(b.opt.M)))
		}
		if b.opt.V != nil {
			sb.state.V = wire.AsFloats(wire.Buffer(4 * len(b.opt.V)))
		}
		optim.AdvanceStep(st.opt, &sb.state)
		st.blocks = append(st.blocks, sb)
	}
	return st
}

// stageRange computes the update of values [lo, hi) of one block of a
// staged push, from the block's values (and state) into the copies, under
// the server's lock (the block's values are read). A block that changed
// since the update began makes the whole staged update invalid.
func (s *Server) stageRange(st *staged, sb *stagedBlock, g []float32, lo, hi int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := sb.b
	if s.blocks[sb.id] != b || b.seq != sb.seq {
		st.valid = false
		return
	}
	if !optim.ApplyRangeTo(st.opt, &sb.state, sb.vals, b.opt, b.vals, g, lo, hi) {
		sb.finite = false
	}
}

// takeStaged returns the staged update of req if it is still the update
// the push would make in place with opt, and forgets it either way. The
// caller holds the server's lock.
func (s *Server) takeStaged(req *pspb.PSRequest, opt optim.Config) *staged {
	st := s.staged[req]
	if st == nil {
		return nil
	}
	delete(s.staged, req)
	ok := st.opt == opt && !s.cfg.Sync.Aggregate()
	for _, sb := range st.blocks {
		ok = ok && s.blocks[sb.id] == sb.b && sb.b.seq == sb.seq
	}
	if !ok {
		s.dropStage(st)
		return nil
	}
	return st
}

// forgetStaged drops the staged update of a request that did not take it
// (refused, held, not accepted). The caller holds the server's lock.
func (s *Server) forgetStaged(req *pspb.PSRequest) {
	if st := s.staged[req]; st != nil {
		delete(s.staged, req)
		s.dropStage(st)
	}
}

// install makes a staged push's copies the blocks' values and state. The
// caller holds the server's lock; st is spent.
func (s *Server) install(st *staged) {
	s.stagedPushes++
	for i := range st.blocks {
		sb := &st.blocks[i]
		sb.b.replace(sb)
		sb.vals, sb.state.M, sb.state.V = nil, nil, nil
	}
	s.dropStage(st)
}

// dropStage gives back what a staged update still holds and keeps the
// struct for the next. The caller holds the server's lock.
func (s *Server) dropStage(st *staged) {
	for i := range st.blocks {
		sb := &st.blocks[i]
		for _, buf := range [][]float32{sb.vals, sb.state.M, sb.state.V} {
			if buf != nil {
				wire.Recycle(wire.AsBytes(buf))
			}
		}
		st.blocks[i] = stagedBlock{}
	}
	st.blocks = st.blocks[:0]
	if len(s.stageFree) < maxStageFree {
		s.stageFree = append(s.stageFree, st)
	}
}

// maxStageFree bounds the staged structs kept for reuse.
const maxStageFree = 8

// replace makes a staged update the block's values and state: the old
// values go to the responses still writing them (the lease), or back to
// the pool.
func (b *block) replace(sb *stagedBlock) {
	if l := b.lent; l != nil {
		b.lent = nil
		l.drop()
	} else if b.pooled {
		wire.Recycle(wire.AsBytes(b.vals))
	}
	if b.statePooled {
		for _, buf := range [][]float32{b.opt.M, b.opt.V} {
			if buf != nil {
				wire.Recycle(wire.AsBytes(buf))
			}
		}
	}
	b.vals = sb.vals
	b.opt.M, b.opt.V, b.opt.Step = sb.state.M, sb.state.V, sb.state.Step
	b.pooled, b.statePooled = true, true
	b.seq++
	if !sb.finite {
		b.nonFinite = true
	}
}
