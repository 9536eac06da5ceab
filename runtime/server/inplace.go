package server

import (
	"time"

	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/wire"
)

// A push too large to stage (over stageMax: the block, a copy of it and
// the gradient no longer fit in cache together) is applied to its block in
// place while its gradient arrives, a chunk at a time, under a guard that
// keeps every other reader and writer of the block away until the push is
// whole and answered:
//
//   - while a block is being written ("busy"), a request naming it waits
//     (handleHeld) and so does everything that reads or replaces blocks
//     outside requests — snapshots, table changes, migrations, a change of
//     the sync model (awaitQuiet). They wait on a condition of the server's
//     lock, which they release meanwhile; the push takes the lock for each
//     chunk;
//   - each chunk is updated with optim.ApplyRangeUndoable, which leaves the
//     block's old values where the chunk's gradient was, so the push can be
//     taken back bit for bit: when its connection ends in the middle of the
//     payload, and when its handling refuses or drops it (a bad request, a
//     worker out of the barrier, a duplicate). A push taken back leaves no
//     trace, as when the whole payload was read first;
//   - the new values are bit for bit Apply's (ranges aligned to 32 values,
//     the tail with the range before it), so a push kept is exactly the
//     in-place update it would have been.
//
// Only where nothing else can move the block in between: asp (pushes
// applied as they come, pulls never delayed, nothing released by a push),
// SGD (no optimizer state to take back), one dense block named by a push
// (or a push and pull: its pull reads the block once the push is settled),
// no injected slowness, no table change under way, no held or delayed
// request. A push that does not qualify is read whole and applied
// as before.

// inPlaceTimeout bounds the wait for the rest of a payload being applied
// in place: the block's other readers and writers wait meanwhile. A
// connection that stalls longer is closed, its push taken back.
const inPlaceTimeout = time.Minute

// inPlace is a push being applied in place as it arrives.
type inPlace struct {
	req    *pspb.PSRequest
	id     int
	b      *block
	opt    optim.Config
	done   int  // values updated so far (their old values are in the payload)
	finite bool // every value updated so far is finite
}

// beginInPlace marks the block of a push to apply in place as it arrives
// busy, or returns nil when the push is not one to apply so (see above).
func (s *Server) beginInPlace(req *pspb.PSRequest, n int) *inPlace {
	if n <= stageMax || req.Op != pspb.Op_OP_PUSH && req.Op != pspb.Op_OP_PUSH_PULL || len(req.Blocks) != 1 || len(req.RowKeys) > 0 || s.hooked() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	opt := s.cfg.Optim.At(req.Progress)
	id := int(req.Blocks[0])
	b := s.blocks[id]
	if s.cfg.Sync.Model != syncmodel.ASP || opt.Kind != optim.SGD || b == nil || b.meta.Sparse || 4*len(b.vals) != n ||
		s.writing[id] != nil || len(s.pending) > 0 || len(s.el.held) > 0 || len(s.el.incoming) > 0 || len(s.el.outgoing) > 0 {
		return nil
	}
	b.mutable() // responses still writing the values keep them
	ip := &inPlace{req: req, id: id, b: b, opt: opt, finite: true}
	s.writing[id] = ip
	return ip
}

// readInPlace reads the payload of a push begun with beginInPlace into a
// pooled buffer, req.Data, and applies each chunk as soon as it is whole,
// while it is in cache. Afterwards req.Data holds the block's old values.
// On an error the push is taken back and nothing is kept.
func (s *Server) readInPlace(tc *framing.Conn, req *pspb.PSRequest, n int, ip *inPlace) error {
	req.Data = wire.Buffer(n)
	g := wire.AsFloats(req.Data)
	nc := tc.NetConn()
	_ = nc.SetReadDeadline(time.Now().Add(inPlaceTimeout))
	defer nc.SetReadDeadline(time.Time{})
	size, got := n/4, 0
	for ip.done < size {
		hi := rangeEnd(ip.done, size)
		// Read no further than this range: with the rest of the payload
		// already in the socket (pushes back to back), one read would
		// copy it all before any of it is updated, and out of cache.
		for got < 4*hi {
			k, err := tc.ReadPayloadSome(req.Data[got : 4*hi])
			if err != nil {
				s.mu.Lock()
				s.takeBack(ip, g)
				s.mu.Unlock()
				dropPayload(req)
				return err
			}
			got += k
		}
		s.mu.Lock()
		ip.finite = optim.ApplyRangeUndoable(ip.opt, ip.b.vals, g, ip.done, hi) && ip.finite
		s.mu.Unlock()
		ip.done = hi
	}
	return nil
}

// keepInPlace settles a push applied in place when its handling reaches
// the update: kept if the push is accepted with the optimizer it was
// applied with, taken back otherwise. It reports whether req was applied
// in place at all. The caller holds the server's lock.
func (s *Server) keepInPlace(req *pspb.PSRequest, accept bool, opt optim.Config) bool {
	ip := s.writingFor(req)
	if ip == nil {
		return false
	}
	if accept && opt == ip.opt {
		if !ip.finite {
			ip.b.nonFinite = true
		}
		s.inPlacePushes++
		s.endInPlace(ip)
	} else {
		s.takeBack(ip, wire.AsFloats(req.Data))
	}
	return true
}

// forgetInPlace takes back a push applied in place whose handling ended
// before its update (refused). The caller holds the server's lock.
func (s *Server) forgetInPlace(req *pspb.PSRequest) {
	if ip := s.writingFor(req); ip != nil {
		s.takeBack(ip, wire.AsFloats(req.Data))
	}
}

// writingFor is the in-place push of req, if any. The caller holds the
// server's lock.
func (s *Server) writingFor(req *pspb.PSRequest) *inPlace {
	if len(s.writing) == 0 || len(req.Blocks) != 1 {
		return nil
	}
	if ip := s.writing[int(req.Blocks[0])]; ip != nil && ip.req == req {
		return ip
	}
	return nil
}

// takeBack restores the values a push applied in place had changed (old
// holds them) and ends it. The caller holds the server's lock.
func (s *Server) takeBack(ip *inPlace, old []float32) {
	copy(ip.b.vals[:ip.done], old[:ip.done])
	s.endInPlace(ip)
}

// endInPlace frees the block of a push applied in place for the requests
// and changes waiting for it. The caller holds the server's lock.
func (s *Server) endInPlace(ip *inPlace) {
	ip.b.seq++ // its values have moved since the push began (stage.go)
	delete(s.writing, ip.id)
	s.quiet.Broadcast()
}

// awaitBlocks waits until no other push is being applied in place to a
// block req names. The caller holds the server's lock (released while
// waiting).
func (s *Server) awaitBlocks(req *pspb.PSRequest) {
	for len(s.writing) > 0 && s.blocksBusy(req) {
		s.quiet.Wait()
	}
}

func (s *Server) blocksBusy(req *pspb.PSRequest) bool {
	for _, id := range req.Blocks {
		if ip := s.writing[int(id)]; ip != nil && ip.req != req {
			return true
		}
	}
	return false
}

// awaitQuiet waits until no push is being applied in place. The caller
// holds the server's lock (released while waiting).
func (s *Server) awaitQuiet() {
	for len(s.writing) > 0 {
		s.quiet.Wait()
	}
}
