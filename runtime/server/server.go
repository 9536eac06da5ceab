// Package server is kelpie's parameter server: it holds a shard of the
// model's parameter blocks (dense blocks and rows of the sparse table),
// applies pushed gradients with the job's optimizer, and answers pulls under
// the job's synchronization model, decided here at the server (FluentPS
// Alg. 1): each server keeps its own training progress V_train and its own
// lazy pull buffer, so servers progress independently (overlap
// synchronization).
//
// Requests arrive on one long-lived gRPC stream per worker (Exchange) with
// kelpie's raw-bytes codec; responses to delayed pull requests go out on that
// stream when the push condition releases them, out of order, matched by id.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/wire"
)

// Config is what a server needs to know of its job.
type Config struct {
	Name      string
	Sync      syncmodel.Config
	Optim     optim.Config
	Workers   []int              // worker indexes in the barrier
	Straggler straggler.Schedule // injected slowness of this server
	Start     time.Time          // the job's time zero
	Seed      int64
	RowDim    int // floats per row of the model's sparse table (1 if it has none)
	// SnapshotPath is where the server's snapshot goes (Checkpoint, and
	// the role's periodic snapshots).
	SnapshotPath string
	Logf         func(format string, a ...any)
}

type block struct {
	meta    blocks.Block
	vals    []float32
	acc     []float32 // summed gradients of the current version (aggregate mode)
	touched []int     // sparse rows present in acc
	mark    []bool
	opt     *optim.State
	dirty   bool // acc holds gradients not yet applied
	// from is the first version whose gradients this block takes: a block
	// that migrated here at a table switch must not be stepped by the
	// commit of an earlier version (with momentum or Adam, even a zero
	// gradient moves the parameters).
	from int64
	// lent covers vals while responses write them (payload.go); mutable
	// must run before vals change.
	lent *lease
	// nonFinite: an update (or the snapshot or hand-off it came from) left
	// a NaN or ±Inf in vals (diverge.go).
	nonFinite bool
	// seq counts changes of vals and opt (mutable, replace): a push
	// staged against the block is installed only if it has not moved
	// (stage.go).
	seq uint64
	// pooled: vals came from the buffer pool (and go back to it when
	// replaced); statePooled: opt.M and opt.V did.
	pooled, statePooled bool
}

type pendingPull struct {
	req     *pspb.PSRequest
	reply   func(*Response)
	stream  *int // the stream it came on (nil: a unary call)
	since   time.Time
	dropped bool // the push it came with was discarded
}

// Server is one parameter server. Its zero value is not usable: use New.
type Server struct {
	pspb.UnimplementedParameterServerServer

	ready    chan struct{} // closed once Install has run
	shutdown chan string   // receives the reason of a Shutdown request
	// refusals logs refused framed connections, rate limited and
	// aggregated by source host (a stranger's flood stays a few lines).
	refusals framing.RefusalLog
	// contended is the CPU share a cpu straggler leaves the server: the
	// stretched part of handling one request at a time (stretch).
	contended sync.Mutex

	mu       sync.Mutex
	start    time.Time // the job's time zero
	cfg      Config
	version  uint64 // assignment version
	blocks   map[int]*block
	engine   *syncmodel.Engine
	pending  map[syncmodel.PullID]pendingPull
	nextPull syncmodel.PullID
	rng      *rand.Rand
	// The link's budget in each direction (a full-duplex NIC): requests
	// come in through limitIn, responses go out through limitOut.
	limitIn, limitOut *straggler.Limiter
	stats             pspb.ServerStats
	el                elastic
	diverged          error // the first non-finite parameter an update produced (diverge.go)
	// staged holds the updates computed while pushes arrived, until
	// their push takes them (stage.go); stageFree keeps spent ones.
	staged       map[*pspb.PSRequest]*staged
	stageFree    []*staged
	stagedPushes int64 // pushes installed from a staged update
	// writing holds the pushes being applied in place as they arrive, by
	// block; quiet (on mu) wakes who waits for them (inplace.go).
	writing       map[int]*inPlace
	quiet         *sync.Cond
	inPlacePushes int64 // pushes kept as applied while they arrived
}

// New makes a server; it answers requests once Install has given it blocks.
func New(cfg Config) (*Server, error) {
	if err := cfg.Sync.Validate(); err != nil {
		return nil, fmt.Errorf("server %s: %v", cfg.Name, err)
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Now()
	}
	s := &Server{
		start:    cfg.Start,
		ready:    make(chan struct{}),
		shutdown: make(chan string, 1),
		cfg:      cfg,
		blocks:   map[int]*block{},
		engine:   syncmodel.New(cfg.Sync, cfg.Workers),
		pending:  map[syncmodel.PullID]pendingPull{},
		staged:   map[*pspb.PSRequest]*staged{},
		writing:  map[int]*inPlace{},
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5e7)),
	}
	s.quiet = sync.NewCond(&s.mu)
	s.stats.Name = cfg.Name
	s.refusals.Logf = s.logf
	if !cfg.Straggler.Empty() {
		rate, _ := cfg.Straggler.Bandwidth(0) // 0: not limited (yet)
		s.limitIn, s.limitOut = straggler.NewLimiter(rate, linkBurst), straggler.NewLimiter(rate, linkBurst)
	}
	return s, nil
}

// Install gives the server the blocks the table assigns to it, with initial
// values from init (called once per block; the slice is kept).
func (s *Server) Install(t blocks.Table, me int, init func(blocks.Block) []float32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaitQuiet()
	s.version = t.Version
	s.el.table, s.el.me = t, me
	for _, id := range t.OnServer(me) {
		b := t.Blocks[id]
		vals := init(b)
		blk := &block{meta: b, vals: vals, opt: optim.NewState(s.cfg.Optim, len(vals))}
		if s.cfg.Sync.Aggregate() {
			blk.acc = make([]float32, len(vals))
			if b.Sparse {
				blk.mark = make([]bool, b.Length)
			}
		}
		s.blocks[id] = blk
	}
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
}

// Shutdown returns a channel that receives the reason when a Shutdown
// request arrives.
func (s *Server) ShutdownRequested() <-chan string { return s.shutdown }

// Snapshot copies the values of every block the server holds.
func (s *Server) Snapshot() map[int][]float32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.awaitQuiet()
	out := make(map[int][]float32, len(s.blocks))
	for id, b := range s.blocks {
		out[id] = append([]float32(nil), b.vals...)
	}
	return out
}

// SetStart sets the job's time zero, from which injected slowness counts.
func (s *Server) SetStart(t time.Time) {
	s.mu.Lock()
	s.start = t
	s.mu.Unlock()
}

func (s *Server) elapsed() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.start)
}

// linkBurst is how many bytes a bandwidth-limited link lets through at
// once in each direction.
const linkBurst = 64 << 10

// Directions of a message through the server's link.
const (
	inbound  = true  // a request
	outbound = false // a response
)

// inject sleeps for the slowness this server is told to have, for a
// message of n bytes in one direction: a pause; its link's bandwidth, each
// direction a budget of its own (a full-duplex NIC); and for a request
// (inbound), the compute delay — once per request, not again for its
// response.
func (s *Server) inject(n int, in bool) {
	if !s.cfg.Straggler.InProcess() {
		return
	}
	if d := s.cfg.Straggler.Pause(s.elapsed()); d > 0 {
		time.Sleep(d)
	}
	if d := s.delay(n, in, s.elapsed()); d > 0 {
		time.Sleep(d)
	}
}

// stretch sleeps for a contended CPU (kind cpu) after a request kept the
// server busy for busy: busy × I/(1-I), so the server's share of the work
// sets its slowness. The stretched times of concurrent requests follow one
// another: a server left 2 % of a CPU serves its workers' requests on that
// 2 % one after the other, not each on a 2 % of its own (sleeping side by
// side, four workers' requests cost the server one stretch, not four, and
// the straggler's cost shrank as the handlers got faster).
func (s *Server) stretch(busy time.Duration) {
	if !s.cfg.Straggler.InProcess() {
		return
	}
	s.mu.Lock()
	u := s.rng.Float64()
	s.mu.Unlock()
	if d := s.cfg.Straggler.CPUDelay(s.elapsed(), busy, u); d > 0 {
		s.contended.Lock()
		time.Sleep(d)
		s.contended.Unlock()
		s.mu.Lock()
		s.stats.ApplySeconds += d.Seconds() // a contended server's own slowness
		s.mu.Unlock()
	}
}

// hooked says whether an injection the server carries out itself is in
// force now. While none is (none at all, only kinds carried out outside the
// process — cpu, link — or none active yet or any more), a request takes
// the same path as on a server without injections: inline answers, staged
// and in-place updates.
func (s *Server) hooked() bool { return s.cfg.Straggler.InProcessActive(s.elapsed()) }

// delay is how long a message of n bytes in one direction waits at t for
// the link's bandwidth and, a request, for the compute delay. It charges
// the link's budget.
func (s *Server) delay(n int, in bool, t time.Duration) time.Duration {
	s.mu.Lock()
	u := s.rng.Float64()
	var wait time.Duration
	if rate, ok := s.cfg.Straggler.Bandwidth(t); ok {
		l := s.limitOut
		if in {
			l = s.limitIn
		}
		l.SetRate(rate)
		wait = l.Delay(t, n)
	}
	s.mu.Unlock()
	if in {
		if d := s.cfg.Straggler.ComputeDelay(t, 0, u); d > 0 {
			wait += d
			// A slow server, not a slow link: counted as its handling.
			s.mu.Lock()
			s.stats.ApplySeconds += d.Seconds()
			s.mu.Unlock()
		}
	}
	return wait
}

// Exchange serves one worker's gRPC stream. Requests are handled in order;
// responses to delayed pulls are sent when they are released.
func (s *Server) Exchange(stream pspb.ParameterServer_ExchangeServer) error {
	select {
	case <-s.ready:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	err := s.session(stream.Recv, nil, func(rs []*Response) error {
		for _, r := range rs {
			r.Flatten() // one message: the values are copied into it
			if err := stream.Send(r.PSResponse); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	if status.Code(err) == codes.Canceled || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// session serves one worker's connection, whatever carries it: recv
// returns the next request (its Data a pooled buffer or nil), send writes
// responses, in order (their payloads lent until each response's Done,
// which the session calls after send). Requests are handled in order;
// responses to delayed pulls are sent when they are released. more, if not
// nil, says whether the next request is already at hand (recv will not
// wait for it). handled, if not nil, is given each request the server keeps
// no reference to once handled, for recv to reuse.
//
// The goroutine that handled a request writes its answer (outbox.go),
// after the requests at hand: a pipeline's answers go together to send,
// which the framed transport writes with one writev. Responses released by
// other goroutines go out through the session's sender goroutine. A server
// with injected slowness sends everything through the sender goroutine, so
// that a response's injected outbound delay does not hold up the next
// request (each direction of its link has a budget of its own).
func (s *Server) session(recv func() (*pspb.PSRequest, error), more func() bool, send func([]*Response) error, handled func(*pspb.PSRequest)) error {
	o := newOutbox()
	inject := func(r *Response) { s.inject(r.payloadLen(), outbound) }
	wasInline := false
	done := make(chan struct{})
	sender := make(chan struct{})
	go func() {
		defer close(sender)
		for {
			select {
			case <-o.wake:
				if o.flush(send, inject, false) != nil {
					return // the session sees the error at its next request
				}
			case <-done:
				return
			}
		}
	}()
	defer func() {
		close(done)
		<-sender
		o.close()
	}()
	// When the worker goes away, its delayed pulls go with it: a restarted
	// worker's new pulls must not queue behind answers nobody will read.
	me := new(int)
	defer s.cancelPulls(me)
	reply := o.put  // one func value for the session, not one per request
	var later after // what runs after the lock, reused by every request
	for {
		req, err := recv()
		if err != nil {
			return err
		}
		// Inline unless an injection is in force: decided per request, so
		// one that starts or ends mid-session changes the path from then
		// on (what the session goroutine still holds to send goes first).
		inline := !s.hooked()
		if !inline && wasInline {
			if err := o.flush(send, inject, true); err != nil {
				wire.Recycle(req.Data)
				return err
			}
		}
		wasInline = inline
		if !inline {
			s.inject(len(req.Data), inbound)
		}
		if inline {
			err = o.setActive()
		} else {
			err = o.failed()
		}
		if err != nil {
			wire.Recycle(req.Data)
			return err
		}
		var began time.Time
		if !inline {
			began = time.Now()
		}
		held, err := s.handleHeld(req, reply, me, &later)
		if !inline {
			s.stretch(time.Since(began))
		}
		if err != nil {
			reply(errorResponse(req, err))
		}
		// The push payload has been applied (a delayed pull keeps only the
		// request's header): its buffer goes back to the pool, unless the
		// request waits for a block in transit.
		if !held {
			wire.Recycle(req.Data)
			req.Data = nil
			if handled != nil {
				handled(req)
			}
		}
		if inline && (more == nil || !more()) {
			if err := o.flush(send, inject, true); err != nil {
				return err
			}
		}
	}
}

// maxBatch bounds the responses written together.
const maxBatch = 64

// errorResponse answers req with err's status.
func errorResponse(req *pspb.PSRequest, err error) *Response {
	st, _ := status.FromError(err)
	return respond(&pspb.PSResponse{Id: req.Id, Error: st.Message(), Code: int32(st.Code())})
}

// Push is the unary form of a push.
func (s *Server) Push(ctx context.Context, req *pspb.PSRequest) (*pspb.PSResponse, error) {
	req.Op = pspb.Op_OP_PUSH
	return s.unary(ctx, req)
}

// Pull is the unary form of a pull; it waits while the pull is delayed.
func (s *Server) Pull(ctx context.Context, req *pspb.PSRequest) (*pspb.PSResponse, error) {
	req.Op = pspb.Op_OP_PULL
	return s.unary(ctx, req)
}

func (s *Server) unary(ctx context.Context, req *pspb.PSRequest) (*pspb.PSResponse, error) {
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	got := make(chan *Response, 1)
	if err := s.handle(req, func(r *Response) { got <- r }, nil); err != nil {
		return nil, err
	}
	select {
	case r := <-got:
		r.Flatten()
		return r.PSResponse, nil
	case <-ctx.Done():
		// A delayed pull answered later lends its values to no one: the
		// lease stays taken and the block copies on its next update.
		return nil, ctx.Err()
	}
}

// Stats reports the server's counters.
func (s *Server) Stats(context.Context, *pspb.StatsRequest) (*pspb.ServerStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.engine.Stats()
	out := &pspb.ServerStats{
		Name: s.cfg.Name, VTrain: s.engine.VTrain(),
		Dprs: st.DPRs, DelayedIterations: st.DelayedIterations, Dropped: st.Dropped,
		Staleness: append([]int64(nil), st.Staleness...),
		Pushes:    s.stats.Pushes, Pulls: s.stats.Pulls, BytesIn: s.stats.BytesIn, BytesOut: s.stats.BytesOut,
		AssignmentVersion: s.version, PausedSeconds: s.stats.PausedSeconds, MigratedIn: s.stats.MigratedIn,
		MigratedOut: s.stats.MigratedOut, InTransit: int32(len(s.el.incoming)), Outgoing: int32(len(s.el.outgoing)),
		QueueSeconds: s.stats.QueueSeconds, ApplySeconds: s.stats.ApplySeconds, Requests: s.stats.Requests,
	}
	for id := range s.blocks {
		out.Blocks = append(out.Blocks, uint32(id))
	}
	for _, w := range s.engine.Behind() {
		out.Behind = append(out.Behind, int32(w))
	}
	out.HeldPulls = int64(s.engine.Pending())
	return out, nil
}

// Shutdown asks the process serving this server to stop.
func (s *Server) Shutdown(_ context.Context, req *pspb.ShutdownRequest) (*pspb.ShutdownResponse, error) {
	select {
	case s.shutdown <- req.Reason:
	default:
	}
	return &pspb.ShutdownResponse{}, nil
}

// handle runs one request. Replies (immediate or released later) go through
// reply, always outside the server's lock.
func (s *Server) handle(req *pspb.PSRequest, reply func(*Response), stream *int) error {
	var send after
	_, err := s.handleHeld(req, reply, stream, &send)
	return err
}

// handleHeld is handle that also says whether the request now waits for a
// block in transit (its payload must then be kept). send is the caller's
// list for what runs after the lock (empty; emptied again on return).
func (s *Server) handleHeld(req *pspb.PSRequest, reply func(*Response), stream *int, send *after) (bool, error) {
	t0 := time.Now()
	s.mu.Lock()
	s.awaitBlocks(req)
	t1 := time.Now()
	err := s.handleLocked(req, reply, stream, send)
	s.forgetStaged(req)  // not taken: applied in place, refused or held
	s.forgetInPlace(req) // not settled: refused
	n := len(s.el.held)
	held := n > 0 && s.el.held[n-1].req == req
	// The server's own share of the request's time: the rest of what its
	// worker measures is the link's (scheduler/cause).
	s.stats.QueueSeconds += t1.Sub(t0).Seconds()
	s.stats.ApplySeconds += time.Since(t1).Seconds()
	s.stats.Requests++
	s.mu.Unlock()
	send.run()
	return held, err
}

func (s *Server) handleLocked(req *pspb.PSRequest, reply func(*Response), stream *int, send *after) error {
	// Blocks leave only once this request is fully answered: its own pull
	// may read them.
	defer s.handOffLocked(send)
	if s.needsIncoming(req) || (len(s.el.held) > 0 && s.heldStream(stream)) {
		// Its blocks are on their way here: wait (and keep the stream's
		// order behind it).
		if len(s.el.held) == 0 {
			s.el.heldSince = time.Now()
		}
		s.el.held = append(s.el.held, heldReq{req: req, reply: reply, stream: stream})
		return nil
	}
	if err := s.check(req); err != nil {
		return err
	}
	op := req.Op
	if op == pspb.Op_OP_LEAVE || op == pspb.Op_OP_JOIN {
		s.membership(int(req.Worker), op == pspb.Op_OP_JOIN, req.Progress, send)
		resp := respond(&pspb.PSResponse{Id: req.Id, Version: s.engine.VTrain()})
		send.reply(reply, resp)
		return nil
	}
	dropped := false
	if op == pspb.Op_OP_PUSH || op == pspb.Op_OP_PUSH_PULL {
		var err error
		if dropped, err = s.push(req, send); err != nil {
			return err
		}
		if err := s.divergedLocked(req); err != nil {
			return err
		}
		if op == pspb.Op_OP_PUSH {
			resp := newResponse(req.Id)
			resp.Version, resp.Dropped = s.engine.VTrain(), dropped
			send.reply(reply, resp)
			return nil
		}
	}
	if op != pspb.Op_OP_PULL && op != pspb.Op_OP_PUSH_PULL {
		return status.Errorf(codes.InvalidArgument, "server %s: unknown op %v", s.cfg.Name, op)
	}
	s.stats.Pulls++
	s.nextPull++
	id := s.nextPull
	if s.engine.Pull(id, int(req.Worker), req.Progress, s.rng.Float64()) {
		resp := s.read(req, false)
		resp.Dropped = dropped
		send.reply(reply, resp)
		return nil
	}
	s.pending[id] = pendingPull{req: pullOnly(req), reply: reply, stream: stream, since: time.Now(), dropped: dropped}
	return nil
}

// heldStream says whether a request of this stream is being held.
func (s *Server) heldStream(stream *int) bool {
	if stream == nil {
		return false
	}
	for _, h := range s.el.held {
		if h.stream == stream {
			return true
		}
	}
	return false
}

// cancelPulls forgets the delayed pulls of a stream that has ended.
func (s *Server) cancelPulls(stream *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, p := range s.pending {
		if p.stream == stream {
			s.engine.Cancel(id)
			delete(s.pending, id)
		}
	}
}

// pullOnly keeps what a delayed pull needs after the push payload is gone.
// Its slices are copies: the session reuses the request's own for the
// next request once this one is handled.
func pullOnly(req *pspb.PSRequest) *pspb.PSRequest {
	return &pspb.PSRequest{Id: req.Id, Worker: req.Worker, Progress: req.Progress,
		Blocks: slices.Clone(req.Blocks), PullRowKeys: slices.Clone(req.PullRowKeys), NoReplyData: req.NoReplyData}
}

// check validates that the request names blocks this server holds and, for
// pushes, carries exactly their size.
func (s *Server) check(req *pspb.PSRequest) error {
	if req.AssignmentVersion != 0 && req.AssignmentVersion != s.version && req.AssignmentVersion+1 != s.version {
		return status.Errorf(codes.FailedPrecondition, "server %s: request follows assignment v%d, server has v%d",
			s.cfg.Name, req.AssignmentVersion, s.version)
	}
	if stale := req.AssignmentVersion != 0 && req.AssignmentVersion < s.version; stale && req.Op != pspb.Op_OP_PULL && req.Progress >= s.el.switchAt {
		// The worker has not switched yet (its command is on its way): the
		// whole push is refused, so that it can be sent again, once, under
		// the new table. Aborted tells it to wait for the table and retry.
		return status.Errorf(codes.Aborted, "server %s: iteration %d follows table v%d (from iteration %d); the request follows v%d",
			s.cfg.Name, req.Progress, s.version, s.el.switchAt, req.AssignmentVersion)
	}
	var floats int64
	for _, id := range req.Blocks {
		b, ok := s.blocks[int(id)]
		if !ok {
			code := codes.FailedPrecondition
			if req.AssignmentVersion != 0 && req.AssignmentVersion < s.version {
				code = codes.Aborted // it has moved: the worker's new table is on its way
			}
			return status.Errorf(code, "server %s: block %d is not here (assignment v%d)", s.cfg.Name, id, s.version)
		}
		if b.meta.Sparse {
			return status.Errorf(codes.InvalidArgument, "server %s: block %d is sparse: address its rows by key", s.cfg.Name, id)
		}
		if _, moving := s.el.outgoing[int(id)]; moving && req.Progress >= s.el.switchAt && req.Op != pspb.Op_OP_PULL {
			return status.Errorf(codes.FailedPrecondition, "server %s: block %d moves at iteration %d (table v%d); iteration %d must follow the new table",
				s.cfg.Name, id, s.el.switchAt, s.version, req.Progress)
		}
		floats += b.meta.Length
	}
	if len(req.PullRowKeys) > 0 {
		if _, err := s.rowsOf(req.PullRowKeys); err != nil {
			return err
		}
	}
	if len(req.RowKeys) > 0 {
		if _, err := s.rowsOf(req.RowKeys); err != nil {
			return err
		}
		floats += int64(len(req.RowKeys) * s.rowDim())
	}
	if req.Op == pspb.Op_OP_PUSH || req.Op == pspb.Op_OP_PUSH_PULL {
		if int64(len(req.Data)) != floats*4 {
			return status.Errorf(codes.InvalidArgument, "server %s: push carries %d bytes; its blocks and rows need %d",
				s.cfg.Name, len(req.Data), floats*4)
		}
	}
	if req.Worker < 0 {
		return status.Errorf(codes.InvalidArgument, "server %s: worker %d", s.cfg.Name, req.Worker)
	}
	return nil
}

func (s *Server) rowDim() int {
	if s.cfg.RowDim > 0 {
		return s.cfg.RowDim
	}
	for _, b := range s.blocks {
		if b.meta.Sparse {
			return b.meta.Cols
		}
	}
	return 1
}

// rowRef locates one sparse row: its block and row index within it.
type rowRef struct {
	b   *block
	row int
}

// rowsOf resolves sorted keys to their blocks on this server.
func (s *Server) rowsOf(keys []uint64) ([]rowRef, error) {
	refs := make([]rowRef, len(keys))
	var cur *block
	for i, k := range keys {
		if cur == nil || k < uint64(cur.meta.Offset) || k >= uint64(cur.meta.Offset+cur.meta.Length) {
			cur = nil
			for _, b := range s.blocks {
				if b.meta.Sparse && k >= uint64(b.meta.Offset) && k < uint64(b.meta.Offset+b.meta.Length) {
					cur = b
					break
				}
			}
			if cur == nil {
				return nil, status.Errorf(codes.FailedPrecondition, "server %s: row %d is not here (assignment v%d)", s.cfg.Name, k, s.version)
			}
		}
		refs[i] = rowRef{cur, int(k - uint64(cur.meta.Offset))}
	}
	return refs, nil
}

// push applies (or sums) a pushed gradient; it reports whether the
// gradient was discarded because its iteration had completed without it.
func (s *Server) push(req *pspb.PSRequest, send *after) (bool, error) {
	s.stats.Pushes++
	s.stats.BytesIn += int64(len(req.Data))
	res := s.engine.Push(int(req.Worker), req.Progress)
	if res.Reject == syncmodel.NotMember {
		return false, status.Errorf(codes.FailedPrecondition, "server %s: worker %d is not in the barrier", s.cfg.Name, req.Worker)
	}
	inPlace := res.Accept
	opt := s.cfg.Optim.At(req.Progress)
	if s.keepInPlace(req, res.Accept, opt) {
		inPlace = false // applied as it arrived (inplace.go): kept or taken back
	} else if res.Accept {
		if st := s.takeStaged(req, opt); st != nil {
			// Computed while the payload arrived, against these very
			// blocks, which it names all (stage.go).
			s.install(st)
			inPlace = false
		}
	}
	if inPlace {
		g := wire.AsFloats(req.Data)
		agg := s.cfg.Sync.Aggregate()
		off := 0
		for _, id := range req.Blocks {
			b := s.blocks[int(id)]
			n := len(b.vals)
			if agg {
				optim.Accumulate(b.acc, g[off:off+n])
				b.dirty = true
			} else {
				b.mutable()
				if !optim.Apply(opt, b.opt, b.vals, g[off:off+n]) {
					b.nonFinite = true
				}
			}
			off += n
		}
		if len(req.RowKeys) > 0 {
			refs, _ := s.rowsOf(req.RowKeys) // checked already
			dim := s.rowDim()
			for i, r := range refs {
				gr := g[off+i*dim : off+(i+1)*dim]
				if agg {
					r.b.dirty = true
					optim.Accumulate(r.b.acc[r.row*dim:(r.row+1)*dim], gr)
					if !r.b.mark[r.row] {
						r.b.mark[r.row] = true
						r.b.touched = append(r.b.touched, r.row)
					}
				} else {
					r.b.mutable()
					if !optim.ApplyRows(opt, r.b.opt, r.b.vals, dim, []int{r.row}, gr) {
						r.b.nonFinite = true
					}
				}
			}
		}
	}
	if res.Advanced > 0 && s.cfg.Sync.Aggregate() {
		s.commit()
	}
	s.release(res.Release, send)
	return res.Reject == syncmodel.Stale, nil
}

// membership adds a worker to the barrier or takes it out. A joining
// worker owes pushes from iteration from on (from V_train if that is
// later). A smaller barrier may complete the current version at once: its
// summed gradients are applied and the pulls waiting for it answered.
func (s *Server) membership(worker int, join bool, from int64, send *after) {
	var ids []int
	found := false
	for _, w := range s.engine.Members() {
		if w == worker {
			found = true
			if !join {
				continue
			}
		}
		ids = append(ids, w)
	}
	if join == found {
		return // already in (join) or already out (leave)
	}
	if join {
		s.engine.Join(worker, from)
		return
	}
	before := s.engine.VTrain()
	rel := s.engine.SetWorkers(ids)
	if s.engine.VTrain() > before && s.cfg.Sync.Aggregate() {
		s.commit()
	}
	s.release(rel, send)
	s.handOffLocked(send)
}

// commit applies the summed gradients of the finished version (V_train-1).
func (s *Server) commit() {
	version := s.engine.VTrain() - 1
	opt := s.cfg.Optim.At(version)
	for _, b := range s.blocks {
		if b.from > version {
			continue
		}
		s.step(b, opt)
	}
}

// step applies a block's summed gradients with opt (the optimizer at their
// version's learning rate) and clears the sums.
func (s *Server) step(b *block, opt optim.Config) {
	b.dirty = false
	if !b.meta.Sparse {
		b.mutable()
		if !optim.Apply(opt, b.opt, b.vals, b.acc) {
			b.nonFinite = true
		}
		clear(b.acc)
		return
	}
	if len(b.touched) == 0 {
		return
	}
	dim := b.meta.Cols
	grad := make([]float32, 0, len(b.touched)*dim)
	for _, r := range b.touched {
		grad = append(grad, b.acc[r*dim:(r+1)*dim]...)
		clear(b.acc[r*dim : (r+1)*dim])
		b.mark[r] = false
	}
	b.mutable()
	if !optim.ApplyRows(opt, b.opt, b.vals, dim, b.touched, grad) {
		b.nonFinite = true
	}
	b.touched = b.touched[:0]
}

func (s *Server) release(ids []syncmodel.PullID, send *after) {
	for _, id := range ids {
		p, ok := s.pending[id]
		if !ok {
			continue
		}
		delete(s.pending, id)
		if gone := s.absentBlock(p.req); gone >= 0 {
			// The block was handed off while the pull waited (its worker
			// had not switched tables yet): the worker takes the new
			// table and pulls again from the block's new server, as for a
			// request the switch refused (Aborted).
			resp := errorResponse(p.req, status.Errorf(codes.Aborted,
				"server %s: block %d moved while the pull waited (assignment v%d from iteration %d)", s.cfg.Name, gone, s.version, s.el.switchAt))
			send.reply(p.reply, resp)
			continue
		}
		resp := s.read(p.req, true)
		resp.HeldSeconds = time.Since(p.since).Seconds()
		resp.Dropped = p.dropped
		send.reply(p.reply, resp)
	}
}

// absentBlock is the first block req names that this server no longer
// holds, or -1.
func (s *Server) absentBlock(req *pspb.PSRequest) int {
	if req.NoReplyData {
		return -1
	}
	for _, id := range req.Blocks {
		if s.blocks[int(id)] == nil {
			return int(id)
		}
	}
	return -1
}

// read answers a pull from the parameters: the dense blocks' values are
// lent to the response (no copy; see payload.go), sparse rows gathered
// into a pooled buffer.
func (s *Server) read(req *pspb.PSRequest, delayed bool) *Response {
	r := newResponse(req.Id)
	r.Version, r.Delayed = s.engine.VTrain(), delayed
	if req.NoReplyData {
		return r
	}
	r.Parts, r.leases = r.partsBuf[:0], r.leaseBuf[:0]
	n := 0
	for _, id := range req.Blocks {
		l := s.blocks[int(id)].lend()
		r.leases = append(r.leases, l)
		r.Parts = append(r.Parts, wire.AsBytes(l.vals))
		n += 4 * len(l.vals)
	}
	if len(req.PullRowKeys) > 0 {
		dim := s.rowDim()
		refs, _ := s.rowsOf(req.PullRowKeys)
		rows := wire.AsFloats(wire.Buffer(4 * len(refs) * dim))[:0]
		for _, ref := range refs {
			rows = append(rows, ref.b.vals[ref.row*dim:(ref.row+1)*dim]...)
		}
		r.pooled = wire.AsBytes(rows)
		r.Parts = append(r.Parts, r.pooled)
		n += len(r.pooled)
	}
	s.stats.BytesOut += int64(n)
	return r
}
