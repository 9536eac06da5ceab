package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/diverge"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/wire"
)

// elastic is the server's part in a change of block table (PSLD §5): the
// blocks it hands off, the ones it waits for, and the requests held until
// they arrive. Guarded by the server's mutex.
type elastic struct {
	table     blocks.Table
	me        int
	switchAt  int64        // pushes from this iteration on follow the new table; 0: no change under way
	incoming  map[int]bool // blocks expected from their old owners
	outgoing  map[int]int  // blocks to hand off -> new owner's index
	addrs     []string     // the new table's server addresses
	handing   bool
	held      []heldReq
	heldSince time.Time
}

type heldReq struct {
	req    *pspb.PSRequest
	reply  func(*Response)
	stream *int
}

// needsIncoming says whether a request touches a block still in transit.
func (s *Server) needsIncoming(req *pspb.PSRequest) bool {
	if len(s.el.incoming) == 0 {
		return false
	}
	for _, id := range req.Blocks {
		if s.el.incoming[int(id)] {
			return true
		}
	}
	for _, keys := range [][]uint64{req.RowKeys, req.PullRowKeys} {
		for _, k := range keys {
			if id := s.sparseBlockOf(k); id >= 0 && s.el.incoming[id] {
				return true
			}
		}
	}
	return false
}

func (s *Server) sparseBlockOf(k uint64) int {
	for _, b := range s.el.table.Blocks {
		if b.Sparse {
			return s.el.table.SparseBlock(b.Tensor, k)
		}
	}
	return -1
}

// Retable switches the server to a new block table.
func (s *Server) Retable(_ context.Context, req *pspb.RetableRequest) (*pspb.RetableResponse, error) {
	if req.Assignment == nil {
		return nil, status.Error(codes.InvalidArgument, "retable: no assignment")
	}
	t := job.TableFrom(req.Assignment)
	me := int(req.Me)
	s.mu.Lock()
	s.awaitQuiet()
	if t.Version <= s.version {
		s.mu.Unlock()
		return &pspb.RetableResponse{}, nil // already there (a retry)
	}
	if len(s.el.incoming) > 0 || len(s.el.outgoing) > 0 {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "server %s: table v%d is still being applied", s.cfg.Name, s.version)
	}
	fresh := len(s.blocks) == 0 && s.stats.Pushes == 0
	s.el.outgoing, s.el.incoming = map[int]int{}, map[int]bool{}
	for id := range s.blocks {
		if id >= len(t.ServerOf) || t.ServerOf[id] != me {
			dst := -1
			if id < len(t.ServerOf) {
				dst = t.ServerOf[id]
			}
			s.el.outgoing[id] = dst
		}
	}
	for id, srv := range t.ServerOf {
		if srv == me && s.blocks[id] == nil {
			s.el.incoming[id] = true
		}
	}
	s.el.table, s.el.me, s.el.switchAt, s.el.addrs = t, me, req.SwitchIteration, req.Assignment.Servers
	s.version = t.Version
	if fresh {
		// A server that joins a running job counts pushes from the switch.
		s.engine = syncmodel.NewAt(s.cfg.Sync, s.engine.Members(), req.SwitchIteration)
	}
	var send after
	s.handOffLocked(&send)
	s.mu.Unlock()
	send.run()
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	return &pspb.RetableResponse{}, nil
}

// handOffLocked starts sending the outgoing blocks once every worker has
// pushed the iteration before the switch.
func (s *Server) handOffLocked(send *after) {
	if len(s.el.outgoing) == 0 || s.el.handing || s.engine.VTrain() < s.el.switchAt {
		return
	}
	s.el.handing = true
	type move struct {
		req  *pspb.MigrateRequest
		dst  int
		addr string
	}
	var moves []move
	for id, dst := range s.el.outgoing {
		m := s.blockMessage(id)
		delete(s.blocks, id)
		addr := ""
		if dst >= 0 && dst < len(s.el.addrs) {
			addr = s.el.addrs[dst]
		}
		moves = append(moves, move{m, dst, addr})
	}
	send.do(func() {
		go func() {
			for _, mv := range moves {
				err := s.sendBlock(mv.addr, mv.req)
				s.mu.Lock()
				if err != nil {
					// The block stays listed as outgoing: the scheduler sees
					// the change stuck in Stats.
					s.mu.Unlock()
					s.logf("hand-off of block %d to server %d (%s) failed: %v", mv.req.Block, mv.dst, mv.addr, err)
					continue
				}
				delete(s.el.outgoing, int(mv.req.Block))
				s.stats.MigratedOut++
				s.mu.Unlock()
			}
			s.mu.Lock()
			s.el.handing = false
			s.mu.Unlock()
		}()
	})
}

// blockMessage copies a block, values and optimizer state, into its wire
// form (a hand-off or a snapshot).
func (s *Server) blockMessage(id int) *pspb.MigrateRequest {
	b := s.blocks[id]
	m := &pspb.MigrateRequest{Block: uint32(id), AssignmentVersion: s.version, VTrain: s.engine.VTrain(),
		Length: int64(len(b.vals)), Step: b.opt.Step, RowStep: append([]int64(nil), b.opt.RowStep...)}
	payload := append([]float32(nil), b.vals...)
	if len(b.opt.M) > 0 {
		m.HasM = true
		payload = append(payload, b.opt.M...)
	}
	if len(b.opt.V) > 0 {
		m.HasV = true
		payload = append(payload, b.opt.V...)
	}
	m.Data = wire.AsBytes(payload)
	return m
}

// blockFrom rebuilds a block from its wire form.
func (s *Server) blockFrom(meta blocks.Block, m *pspb.MigrateRequest) (*block, error) {
	vals := wire.AsFloats(m.Data)
	n := int(m.Length)
	want := n
	if m.HasM {
		want += n
	}
	if m.HasV {
		want += n
	}
	if len(vals) != want {
		return nil, status.Errorf(codes.InvalidArgument, "block %d: %d floats, want %d", m.Block, len(vals), want)
	}
	blk := &block{meta: meta, vals: append([]float32(nil), vals[:n]...), opt: optim.NewState(s.cfg.Optim, n)}
	// A block from a diverged server is diverged here too.
	blk.nonFinite = diverge.FirstNonFinite(blk.vals) >= 0
	off := n
	if m.HasM && len(blk.opt.M) == n {
		copy(blk.opt.M, vals[off:off+n])
	}
	if m.HasM {
		off += n
	}
	if m.HasV && len(blk.opt.V) == n {
		copy(blk.opt.V, vals[off:off+n])
	}
	blk.opt.Step = m.Step
	if len(m.RowStep) > 0 {
		blk.opt.RowStep = append(blk.opt.RowStep[:0], m.RowStep...)
	}
	if s.cfg.Sync.Aggregate() {
		blk.acc = make([]float32, n)
		if meta.Sparse {
			blk.mark = make([]bool, meta.Length)
		}
	}
	return blk, nil
}

// sendBlock migrates one block, retrying briefly (the new owner may still be
// starting).
func (s *Server) sendBlock(addr string, m *pspb.MigrateRequest) error {
	if addr == "" {
		return fmt.Errorf("no address for the new owner")
	}
	cc, err := grpc.NewClient(addr, psclient.DialOptions()...)
	if err != nil {
		return err
	}
	defer cc.Close()
	c := pspb.NewParameterServerClient(cc)
	var last error
	for attempt := 0; attempt < 50; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := c.Migrate(ctx, m, wire.CallOption())
		cancel()
		if err == nil {
			return nil
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// Migrate receives a block from its old owner.
func (s *Server) Migrate(_ context.Context, m *pspb.MigrateRequest) (*pspb.MigrateResponse, error) {
	id := int(m.Block)
	s.mu.Lock()
	s.awaitQuiet()
	if s.blocks[id] != nil {
		s.mu.Unlock()
		return &pspb.MigrateResponse{}, nil // a retry of a block already here
	}
	if !s.el.incoming[id] {
		s.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "server %s does not expect block %d (table v%d)", s.cfg.Name, id, s.version)
	}
	blk, err := s.blockFrom(s.el.table.Blocks[id], m)
	if err != nil {
		s.mu.Unlock()
		return nil, status.Errorf(codes.InvalidArgument, "migrate: %v", err)
	}
	blk.from = s.el.switchAt
	s.blocks[id] = blk
	delete(s.el.incoming, id)
	s.stats.MigratedIn++
	var send after
	s.resumeHeldLocked(&send)
	s.mu.Unlock()
	send.run()
	return &pspb.MigrateResponse{}, nil
}

// resumeHeldLocked runs the held requests whose blocks have all arrived, in
// arrival order; the time the first of them waited counts as paused.
func (s *Server) resumeHeldLocked(send *after) {
	if len(s.el.held) == 0 {
		return
	}
	held := s.el.held
	s.el.held = nil
	for i, h := range held {
		if s.needsIncoming(h.req) {
			s.el.held = append(s.el.held, held[i:]...) // keep order: later requests of a stream follow it
			break
		}
		if err := s.handleLocked(h.req, h.reply, h.stream, send); err != nil {
			resp := errorResponse(h.req, err)
			reply := h.reply
			send.reply(reply, resp)
		}
	}
	if len(s.el.held) == 0 && !s.el.heldSince.IsZero() {
		s.stats.PausedSeconds += time.Since(s.el.heldSince).Seconds()
		s.el.heldSince = time.Time{}
	}
}

func (s *Server) logf(format string, a ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, a...)
	}
}
