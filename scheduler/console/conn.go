package console

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/consoleapi"
)

// Fields are only ever added to the protocol, so a newer client's unknown
// fields are ignored rather than refused.
var (
	unmarshalFrame = protojson.UnmarshalOptions{DiscardUnknown: true}
	marshalFrame   = protojson.MarshalOptions{}
)

// anonymous is who a client without a token is, when that is allowed.
var anonymous = Principal{Name: "anonymous", Role: RoleViewer}

// conn is one console stream. The goroutine that runs serve owns the
// subscription; recvLoop reads frames and runs commands; writeLoop is the
// only writer. All three are done when serve returns.
type conn struct {
	s      *Server
	ws     *websocket.Conn
	remote string
	who    Principal // set before the goroutines start, then read-only
	client string    // owned by recvLoop once it starts

	ctx    context.Context // done when the stream ends; commands run under it
	cancel context.CancelFunc
	out    chan *consolepb.ServerFrame // the bounded send queue
	subs   chan *consolepb.Subscribe   // recvLoop → serve
	wg     sync.WaitGroup              // recvLoop and writeLoop

	endOnce sync.Once
	status  websocket.StatusCode // how the stream ends; written once in end
	reason  string

	writing  atomic.Pointer[time.Time] // when the writer began its current frame; nil when idle
	inFlight atomic.Int32              // snapshots and deltas queued or being written
}

func newConn(s *Server, ws *websocket.Conn, remote string) *conn {
	ctx, cancel := context.WithCancel(s.ctx)
	return &conn{
		s: s, ws: ws, remote: remote, ctx: ctx, cancel: cancel,
		out:  make(chan *consolepb.ServerFrame, s.opts.SendQueue),
		subs: make(chan *consolepb.Subscribe, 1),
	}
}

// end records how the stream ends (the first call wins) and stops it.
func (c *conn) end(status websocket.StatusCode, reason string) {
	c.endOnce.Do(func() {
		c.status, c.reason = status, reason
		if reason == reasonQueueFull || reason == reasonNotReading {
			c.s.slow.Add(1)
			c.s.opts.Logf("console: %s from %s: %s", c.who.Name, c.remote, reason)
		}
	})
	c.cancel()
}

// send queues f for the writer without ever waiting: a client so far behind
// that the queue is full is disconnected.
func (c *conn) send(f *consolepb.ServerFrame) {
	select {
	case c.out <- f:
	default:
		c.end(statusSlowClient, reasonQueueFull)
	}
}

// serve authenticates the client, then runs the stream until it ends. auth
// is what the upgrade's Authorization header said; without a token there,
// the client holds slot while it has yet to send its hello, and marks its
// connection authenticated (Listener) once it has.
func (c *conn) serve(auth headerAuth, slot *pendingSlot, authenticated func() (done func())) {
	var first *frameRead
	switch {
	case auth.ok:
		c.who = auth.who // its stream is counted by serveConsole
	case auth.token != "":
		c.refuse(auth.token, "unknown token", reasonUnknownToken)
		return
	default:
		var ok bool
		first, ok = c.authenticate(slot)
		c.s.throttle.release(slot)
		if !ok {
			return
		}
		if !c.s.acquireStream(c.who) {
			c.s.refused.Add(1)
			c.s.auditRefusal(c.remote, c.who.Name, "connect", "from "+c.remote,
				fmt.Sprintf("%s %s has %d streams open, the most one user may", c.who.Role, c.who.Name, c.s.opts.MaxStreamsPerUser))
			c.ws.Close(statusUnauthenticated, reasonTooManyStreams)
			return
		}
		defer c.s.releaseStream(c.who)
		defer authenticated()()
	}
	c.send(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Welcome{Welcome: c.welcome()}})
	c.wg.Add(2)
	go c.writeLoop()
	go c.recvLoop(first)
	c.run()
}

func (c *conn) welcome() *consolepb.Welcome {
	return &consolepb.Welcome{ServerVersion: c.s.opts.ServerVersion, ApiVersion: APIVersion,
		User: c.who.Name, Role: string(c.who.Role), Policies: policyCatalog()}
}

// frameRead is one message read from the socket.
type frameRead struct {
	typ  websocket.MessageType
	data []byte
	err  error
}

// authenticate finds who a client without an Authorization header is: its
// first frame must be a hello (or anything, when anonymous viewers are
// allowed). It returns a frame read on the way that the stream must still
// handle. A refused client has been audited and closed. Only a token that
// was checked and is unknown counts as a failed login: a stream that says
// nothing is a slot held, which eviction deals with, not a guess.
func (c *conn) authenticate(slot *pendingSlot) (pending *frameRead, ok bool) {
	r, ok := c.readFirst(slot)
	if !ok {
		return nil, false
	}
	var hello *consolepb.Hello
	if r.err == nil {
		if f, err := decodeFrame(r.typ, r.data); err == nil {
			hello = f.GetHello()
		}
	}
	switch {
	case hello == nil && c.s.opts.AllowAnonymousViewer:
		c.who = anonymous
		return r, true
	case hello == nil:
		c.refuse("", "first frame was not a hello", reasonBadHello)
		return nil, false
	case hello.GetToken() == "" && c.s.opts.AllowAnonymousViewer:
		c.who, c.client = anonymous, hello.GetClient()
		return nil, true
	case hello.GetToken() == "":
		c.client = hello.GetClient()
		c.refuse("", "no token", reasonNoToken)
		return nil, false
	}
	c.client = hello.GetClient()
	p, found := c.s.tokens.lookup(hello.GetToken())
	c.s.throttle.result(c.remote, found, c.s.opts.Now())
	if !found {
		c.refuse(hello.GetToken(), "unknown token", reasonUnknownToken)
		return nil, false
	}
	c.who = p
	return nil, true
}

// readFirst reads the client's first frame, giving up (and closing) after
// HelloTimeout or when the server closes.
func (c *conn) readFirst(slot *pendingSlot) (*frameRead, bool) {
	ch := make(chan *frameRead, 1)
	go func() {
		typ, data, err := c.ws.Read(context.Background())
		ch <- &frameRead{typ, data, err}
	}()
	timeout := c.s.opts.Clock.After(c.s.opts.HelloTimeout)
	select {
	case r := <-ch:
		if r.err != nil {
			c.ws.CloseNow()
			return nil, false
		}
		return r, true
	case <-timeout:
		c.refuse("", fmt.Sprintf("no hello within %v", c.s.opts.HelloTimeout), reasonNoHello)
	case <-slot.evicted:
		c.ws.Close(statusUnauthenticated, reasonEvicted)
	case <-c.s.ctx.Done():
		c.ws.Close(statusShutdown, reasonShutdown)
	}
	<-ch // Close has ended the read
	return nil, false
}

// refuse audits a refused connection and closes it with reason.
func (c *conn) refuse(token, why, reason string) {
	c.s.refused.Add(1)
	detail := "from " + c.remote
	if c.client != "" {
		detail += " client " + c.client
	}
	c.s.auditRefusal(c.remote, "token "+fingerprint(token), "connect", detail, why)
	c.ws.Close(statusUnauthenticated, reason)
}

// run owns the subscription until the stream ends, then closes the socket
// and waits for the other two goroutines.
func (c *conn) run() {
	var sub *subscription
	var ticks <-chan time.Time
	var ticker clock.Ticker
	watchdog := c.s.opts.Clock.NewTicker(c.s.opts.WriteTimeout / 4)
	defer func() {
		watchdog.Stop()
		if ticker != nil {
			ticker.Stop()
		}
		c.end(statusShutdown, reasonShutdown) // no-op unless the server is closing
		c.ws.Close(c.status, c.reason)
		c.wg.Wait()
	}()
	for {
		select {
		case <-c.ctx.Done():
			return
		case req := <-c.subs:
			sub = c.subscribe(req)
			if ticker != nil {
				ticker.Stop()
			}
			ticker = c.s.opts.Clock.NewTicker(sub.every)
			ticks = ticker.C()
		case <-ticks:
			c.tick(sub)
		case <-watchdog.C():
			if t := c.writing.Load(); t != nil && c.s.opts.Now().Sub(*t) > c.s.opts.WriteTimeout {
				c.end(statusSlowClient, reasonNotReading)
			}
		}
	}
}

// subscription is what one client watches and what it last received.
type subscription struct {
	jobs  jobSet
	names []string
	cols  int
	every time.Duration
	last  map[string]held // the views the client holds (trimmed to its window)
	seq   uint64          // the newest event sequence it has seen
	// window trims every detail view (window.go); patches: changed jobs
	// the client holds go as JobPatches (patch.go).
	window  *consolepb.ViewWindow
	patches bool
	// trimmed is, per job, the backend's view last trimmed to window and
	// the result: a published view never changes, so while the backend
	// serves the same one (a big job's view lives up to a second, the
	// subscription ticks up to 4 times a second) it is not trimmed and
	// compared again.
	trimmed map[string]trimmedView
}

// trimmedView is a backend view and what trimView made of it.
type trimmedView struct{ from, to *consolepb.JobView }

// views is the backend's current views of the subscription, as the client
// sees them.
func (s *subscription) views(b Backend) []*consolepb.JobView {
	if s.window == nil {
		return b.View(s.names, s.cols)
	}
	if wb, ok := b.(consoleapi.WindowBackend); ok && len(s.names) > 0 {
		return wb.WindowView(s.names, s.cols, s.window)
	}
	vs := b.View(s.names, s.cols)
	out := make([]*consolepb.JobView, len(vs))
	next := make(map[string]trimmedView, len(vs))
	for i, v := range vs {
		t, ok := s.trimmed[v.GetName()]
		if !ok || t.from != v {
			t = trimmedView{from: v, to: consoleapi.TrimView(v, s.window)}
		}
		out[i], next[v.GetName()] = t.to, t
	}
	s.trimmed = next
	return out
}

// subscribe starts a subscription (replacing any other) and sends its
// snapshot: the current views and the recent events, newest first.
func (c *conn) subscribe(req *consolepb.Subscribe) *subscription {
	b := c.s.b
	sub := &subscription{jobs: newJobSet(req.GetJobs()), cols: heatmapColumns(req.GetHeatmapColumns()),
		every: period(rateHz(req.GetMaxRateHz(), c.s.opts.MaxRateHz)), window: req.GetWindow(), patches: req.GetPatches()}
	sub.names = sub.jobs.names()
	views, _, last := diffViews(nil, sub.views(b))
	sub.last = last

	// The newest sequence number first, so the snapshot holds the last
	// SnapshotEvents events rather than the first.
	limit := c.s.opts.SnapshotEvents
	_, newest := b.EventsSince(math.MaxUint64, 1)
	from := newest - min(newest, uint64(limit))
	evs, newest := b.EventsSince(from, limit)
	sub.seq = newest

	c.inFlight.Add(1)
	c.send(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Snapshot{Snapshot: &consolepb.Snapshot{
		Jobs: views, Events: newestFirst(newestWithin(filterEvents(evs, sub.jobs), c.s.opts.EventBytes)),
	}}})
	return sub
}

// tick sends a delta if anything changed since the client's last frame. While
// the previous snapshot or delta is still queued or being written it sends
// nothing: changes add up into the next delta instead of a backlog.
func (c *conn) tick(sub *subscription) {
	if c.inFlight.Load() > 0 {
		return
	}
	prev := sub.last
	changed, removed, next := diffViews(prev, sub.views(c.s.b))
	evs, newest := c.s.b.EventsSince(sub.seq, c.s.opts.DeltaEvents)
	evs = newestWithin(filterEvents(evs, sub.jobs), c.s.opts.EventBytes)
	sub.last, sub.seq = next, newest
	var patches []*consolepb.JobPatch
	if sub.patches {
		// The jobs the client holds get what changed in them; new ones
		// come whole.
		whole := changed[:0:0]
		for _, v := range changed {
			if h, ok := prev[v.GetName()]; ok && h.view != nil {
				if p, diff := diffPatch(h.view, v); diff {
					patches = append(patches, p)
				}
				continue
			}
			whole = append(whole, v)
		}
		changed = whole
	}
	if len(changed) == 0 && len(removed) == 0 && len(evs) == 0 && len(patches) == 0 {
		return
	}
	c.inFlight.Add(1)
	c.send(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Delta{Delta: &consolepb.Delta{
		Jobs: changed, RemovedJobs: removed, Events: evs, Patches: patches,
	}}})
}

// writeLoop is the stream's only writer: it numbers, stamps, encodes and
// writes the queued frames in order.
func (c *conn) writeLoop() {
	defer c.wg.Done()
	var seq uint64
	for {
		var f *consolepb.ServerFrame
		select {
		case <-c.ctx.Done():
			return
		case f = <-c.out:
		}
		seq++
		now := c.s.opts.Now()
		f.Seq, f.Time = seq, timestamppb.New(now)
		data, err := marshalFrame.Marshal(f)
		if err != nil {
			c.s.opts.Logf("console: encoding frame %d for %s: %v", seq, c.who.Name, err)
			c.end(statusInternal, reasonEncode)
			return
		}
		c.writing.Store(&now)
		// Not c.ctx: a canceled write context makes the library drop the
		// connection at once, and the close frame with its reason would be
		// lost. A stuck write ends when run closes the socket.
		err = c.ws.Write(context.Background(), websocket.MessageText, data)
		c.writing.Store(nil)
		switch f.GetBody().(type) {
		case *consolepb.ServerFrame_Snapshot, *consolepb.ServerFrame_Delta:
			c.inFlight.Add(-1)
		}
		if err != nil {
			c.end(websocket.StatusNormalClosure, "")
			return
		}
		c.s.frames.Add(1)
		c.s.bytes.Add(uint64(len(data)))
	}
}

// recvLoop reads the client's frames until the socket closes, handling each
// in order. It starts with the frame read during authentication, if any.
func (c *conn) recvLoop(first *frameRead) {
	defer c.wg.Done()
	if first != nil {
		c.handle(first.typ, first.data)
	}
	for {
		// As in writeLoop, the read is ended by closing the socket.
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.end(websocket.StatusNormalClosure, "")
			return
		}
		if c.ctx.Err() == nil {
			c.handle(typ, data)
		}
	}
}

// handle answers one client frame. A frame that cannot be read gets an
// InvalidArgument result (with its id, if that much could be read) and the
// stream goes on.
func (c *conn) handle(typ websocket.MessageType, data []byte) {
	f, err := decodeFrame(typ, data)
	if err != nil {
		c.reply(Failure(Clean(frameID(data), MaxNameBytes), err))
		return
	}
	switch body := f.GetBody().(type) {
	case *consolepb.ClientFrame_Hello:
		c.hello(f.GetId(), body.Hello)
	case *consolepb.ClientFrame_Subscribe:
		if err := checkSubscribe(body.Subscribe); err != nil {
			c.reply(Failure(f.GetId(), err))
			return
		}
		select {
		case c.subs <- body.Subscribe:
		case <-c.ctx.Done():
		}
	case *consolepb.ClientFrame_Command:
		c.reply(c.command(f.GetId(), body.Command))
	default:
		c.reply(Failure(f.GetId(), errorf(codes.InvalidArgument,
			"console: frame has no body (want hello, subscribe or command)")))
	}
}

func (c *conn) reply(r *consolepb.CommandResult) {
	c.send(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Result{Result: r}})
}

// hello after authentication is answered with a Welcome; it may name the
// client but not change who it is.
func (c *conn) hello(id string, h *consolepb.Hello) {
	if h.GetToken() != "" {
		if p, ok := c.s.tokens.lookup(h.GetToken()); !ok || p != c.who {
			c.reply(Failure(id, errorf(codes.InvalidArgument,
				"console: hello: this stream is authenticated as %s; open a new one to change identity", c.who.Name)))
			return
		}
	}
	if h.GetClient() != "" {
		c.client = h.GetClient()
	}
	c.send(&consolepb.ServerFrame{Body: &consolepb.ServerFrame_Welcome{Welcome: c.welcome()}})
}

// command authorizes, audits and executes one command.
func (c *conn) command(id string, cmd *consolepb.Command) *consolepb.CommandResult {
	d, err := describe(cmd)
	if err == nil && d.read {
		// A read: any authenticated role, no audit record.
		res := c.s.b.Execute(c.ctx, c.who, cmd)
		if res == nil {
			res = Failure(id, errorf(codes.Internal, "console: %s: the scheduler returned no result", d.kind))
		}
		res.Id = id
		return res
	}
	if wait := c.s.refusals.limited(c.who.Name, c.s.opts.Now()); wait > 0 {
		return Failure(id, errTooManyRefused(c.who, wait))
	}
	entry := AuditEntry{Time: c.s.opts.Now(), Who: c.who.Name, Role: string(c.who.Role),
		Command: d.kind, Job: d.job, Detail: d.detail}
	if err == nil && c.who.Role != RoleOperator {
		err = errorf(codes.PermissionDenied, "%s %s may not %s: operator role required", c.who.Role, c.who.Name, d.verb)
	}
	if err != nil {
		return Failure(id, c.refuseCommand(entry, err))
	}
	res := c.s.b.Execute(c.ctx, c.who, cmd)
	if res == nil {
		res = Failure(id, errorf(codes.Internal, "console: %s: the scheduler returned no result", d.kind))
	}
	res.Id = id
	if entry.Job == "" {
		entry.Job = res.GetJob()
	}
	entry.Allowed = true
	entry.Detail = joinDetail(entry.Detail, "outcome: "+outcome(res))
	if err := c.s.audit(entry); err != nil {
		// The command ran; say that its audit record is missing.
		res.Error = joinDetail(res.GetError(), fmt.Sprintf("console: audit log write failed: %v", err))
	}
	return res
}

func joinDetail(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// checkSubscribe refuses subscriptions whose numbers make no sense.
func checkSubscribe(s *consolepb.Subscribe) error {
	if r := s.GetMaxRateHz(); r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		return errorf(codes.InvalidArgument, "console: subscribe: max_rate_hz %v must be a positive number (0 for the default)", r)
	}
	if s.GetHeatmapColumns() < 0 {
		return errorf(codes.InvalidArgument, "console: subscribe: heatmap_columns %d must not be negative", s.GetHeatmapColumns())
	}
	return checkWindow(s.GetWindow())
}

// decodeFrame reads one client frame.
func decodeFrame(typ websocket.MessageType, data []byte) (*consolepb.ClientFrame, error) {
	if typ != websocket.MessageText {
		return nil, errorf(codes.InvalidArgument, "console: binary frames are not accepted: send protojson text")
	}
	var f consolepb.ClientFrame
	if err := unmarshalFrame.Unmarshal(data, &f); err != nil {
		return nil, errorf(codes.InvalidArgument, "console: malformed frame: %v", err)
	}
	cleanFrame(&f)
	return &f, nil
}

// frameID recovers the id of a frame that is not a valid ClientFrame, when
// it is at least a JSON object with a string id.
func frameID(data []byte) string {
	var f struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(data, &f) != nil {
		return ""
	}
	return f.ID
}
