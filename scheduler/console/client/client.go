// Package client is the console API's WebSocket client (proto/console.proto, protojson text frames
// at ws://HOST:PORT/api/v1/console). It is the only way the TUI talks to a scheduler, and the
// CLI (`kelpie job`), the scheduler load test and the daemon's tests use it too.
//
// It lives beside the console server (scheduler/console) as the server's own client, the way etcd
// ships client/v3 beside its server: the API and its client change together. It is not scheduler
// internals: it imports only proto/ and the WebSocket library, never the console server or any
// other scheduler package (deps_test.go in scheduler/ checks this), so the TUI may import it
// under docs/design.md's rule "tui ──▶ themes, proto, scheduler/console/client".
//
// Dial starts one connection loop that owns the WebSocket: it sends Hello and the current
// Subscribe, reads ServerFrames, and when the connection is lost it reports Disconnected with the
// time to the next try and dials again with exponential backoff (from the injected Clock). A lost
// scheduler is a state the UI shows, never an error that ends the program.
//
// Frames reach the UI through a handler (usually tea.Program.Send) called from a single dispatcher
// goroutine, in order. The reader never waits for the UI: while the handler is busy, consecutive
// deltas are merged and consecutive status reports collapse to the latest (docs/contributing.md: streams never block their producer).
//
// Send writes a Command and waits for the CommandResult with the same frame id.
//
// What the client expects of the server, beyond console.proto: a refused token is an HTTP 401/403
// on the upgrade, a close with status 1008 (policy violation) before the Welcome, or a failed
// CommandResult for the Hello frame's id; none of these is retried. Any close after the Welcome
// (1008 for a client too slow to read included) is a lost connection, retried. Each Subscribe replaces the previous one and is
// answered by one Snapshot of its scope, so the client tags every snapshot with the scope it
// answers (SnapshotMsg.Scope).
//
// Every goroutine (the connection loop, the dispatcher, a session's pinger) exits when the
// context given to Dial is done or Close is called; Close waits for them.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// Path is where the scheduler serves the console API.
const Path = "/api/v1/console"

// State is the connection's state as the UI shows it.
type State int

const (
	Connecting   State = iota // dialling or waiting for Welcome
	Connected                 // welcomed (and subscribed, when there is a subscription)
	Disconnected              // lost or refused by the network; a retry is scheduled
	Unauthorized              // the scheduler refused the token; not retried
	Closed                    // Close was called or the context ended
)

func (s State) String() string {
	switch s {
	case Connecting:
		return "connecting"
	case Connected:
		return "connected"
	case Disconnected:
		return "disconnected"
	case Unauthorized:
		return "unauthorized"
	case Closed:
		return "closed"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// StatusMsg reports a change of connection state.
type StatusMsg struct {
	State   State
	Addr    string
	Attempt int           // failed attempts since the last success
	Err     error         // why the last attempt failed or the connection was lost
	RetryIn time.Duration // Disconnected: the wait before the next attempt
	RetryAt time.Time     // Disconnected: when the next attempt starts
}

// WelcomeMsg is the server's Welcome, once per connection.
type WelcomeMsg struct{ Welcome *consolepb.Welcome }

// SnapshotMsg is a Snapshot and the subscription scope it answers (empty: every job).
type SnapshotMsg struct {
	Scope    []string
	Snapshot *consolepb.Snapshot
	Seq      uint64
	Time     time.Time
}

// DeltaMsg is one Delta, or several merged while the UI was busy.
type DeltaMsg struct {
	Delta *consolepb.Delta
	Seq   uint64
	Time  time.Time
}

// Clock is the time the client needs: now, and a timer for backoff and pings.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Option configures Dial.
type Option func(*config)

type config struct {
	subscribe    bool
	name         string
	handler      func(any)
	jobs         []string
	rateHz       float64
	columns      int32
	minBackoff   time.Duration
	maxBackoff   time.Duration
	clock        Clock
	ping         time.Duration
	httpClient   *http.Client
	readLimit    int64
	helloTimeout time.Duration
	tls          *tls.Config // WithTLS: connect with wss://
	window       *consolepb.ViewWindow
}

// WithHandler sets where frames and status reports go (required for a UI; nil drops them).
// It is called from one goroutine, in order, and may block (tea.Program.Send does).
func WithHandler(h func(any)) Option { return func(c *config) { c.handler = h } }

// WithSubscription subscribes on every connection: jobs (empty: every job), the delta rate and
// the heatmap columns (0: server defaults). Without it the client only sends commands until
// Subscribe is called.
func WithSubscription(jobs []string, maxRateHz float64, heatmapColumns int32) Option {
	return func(c *config) {
		c.subscribe = true
		c.jobs, c.rateHz, c.columns = append([]string(nil), jobs...), maxRateHz, heatmapColumns
	}
}

// WithWindow trims the subscription's detail views to what the client shows (see
// consolepb.ViewWindow); SetWindow changes it later.
func WithWindow(w *consolepb.ViewWindow) Option { return func(c *config) { c.window = w } }

// WithBackoff sets the first and the longest wait between attempts (default 500ms and 10s).
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.minBackoff, c.maxBackoff = min, max }
}

// WithClock injects the clock (tests).
func WithClock(clk Clock) Option { return func(c *config) { c.clock = clk } }

// WithPing sets how often the connection is pinged to detect a dead peer (default 15s; 0: never).
func WithPing(d time.Duration) Option { return func(c *config) { c.ping = d } }

// WithName sets the client name sent in Hello (default "kelpie-tui").
func WithName(n string) Option { return func(c *config) { c.name = n } }

// WithHTTPClient sets the HTTP client used for the upgrade.
func WithHTTPClient(h *http.Client) Option { return func(c *config) { c.httpClient = h } }

// Client is a connection to one scheduler's console API, redialled when lost.
type Client struct {
	url   string
	token string
	cfg   config

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	conn    *websocket.Conn
	waiters map[string]chan *consolepb.CommandResult
	scopes  [][]string // subscriptions sent on this connection and not yet answered by a snapshot
	sub     *consolepb.Subscribe
	nextID  uint64
	status  StatusMsg
	changed chan struct{} // closed and replaced on every status change

	subMu      sync.Mutex // orders the scope queue with the frames on the wire
	subscribed bool       // send sub on every connection (WithSubscription, or Subscribe was called)

	// held is the job views as of the last frame (dispatch's goroutine
	// only): the server's JobPatches apply to them, and handlers get whole
	// views.
	held map[string]*consolepb.JobView

	out *outbox
}

// ErrNotConnected is returned by Send while there is no connection.
var ErrNotConnected = errors.New("client: not connected to the scheduler")

// ErrConnectionLost is returned by Send when the connection ends before the result arrives.
var ErrConnectionLost = errors.New("client: connection lost before the command's result arrived")

// Dial starts connecting to the scheduler at addr ("HOST:PORT", or a ws://, wss://, http:// or
// https:// URL) with token, and keeps the connection up until ctx is done or Close is called. It
// returns at once: the connection's progress arrives at the handler as StatusMsg. The only error is
// an address that cannot be a URL.
func Dial(ctx context.Context, addr, token string, opts ...Option) (*Client, error) {
	u, err := URL(addr)
	if err != nil {
		return nil, err
	}
	cfg := config{
		name: "kelpie-tui", minBackoff: 500 * time.Millisecond, maxBackoff: 10 * time.Second,
		clock: realClock{}, ping: 15 * time.Second, readLimit: 64 << 20, helloTimeout: 10 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.minBackoff <= 0 {
		cfg.minBackoff = time.Millisecond
	}
	cfg.maxBackoff = max(cfg.maxBackoff, cfg.minBackoff)
	if cfg.tls != nil {
		u = strings.Replace(u, "ws://", "wss://", 1)
	}
	c := &Client{
		url: u, token: token, cfg: cfg,
		waiters:    map[string]chan *consolepb.CommandResult{},
		sub:        &consolepb.Subscribe{Jobs: cfg.jobs, MaxRateHz: cfg.rateHz, HeatmapColumns: cfg.columns, Window: cfg.window, Patches: true},
		held:       map[string]*consolepb.JobView{},
		changed:    make(chan struct{}),
		status:     StatusMsg{State: Connecting, Addr: addr},
		subscribed: cfg.subscribe,
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.out = newOutbox()
	c.wg.Add(2)
	go func() { defer c.wg.Done(); c.out.run(c.ctx, cfg.handler) }()
	go func() { defer c.wg.Done(); c.loop(addr) }()
	return c, nil
}

// URL turns a scheduler address into the console API's WebSocket URL.
func URL(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", errors.New("client: empty scheduler address")
	}
	if !strings.Contains(addr, "://") {
		addr = "ws://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", fmt.Errorf("client: scheduler address %q: %v", addr, err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("client: scheduler address %q: scheme %q is not ws, wss, http or https", addr, u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("client: scheduler address %q has no host", addr)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = Path
	}
	return u.String(), nil
}

// Status returns the connection's current state.
func (c *Client) Status() StatusMsg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// WaitConnected blocks until the client is connected (nil), refused (an error), or ctx is done.
func (c *Client) WaitConnected(ctx context.Context) error {
	for {
		c.mu.Lock()
		st, ch := c.status, c.changed
		c.mu.Unlock()
		switch st.State {
		case Connected:
			return nil
		case Unauthorized, Closed:
			return fmt.Errorf("client: %s: %v", st.State, st.Err)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close ends the connection and waits for the client's goroutines. The handler must not be
// blocked forever when Close is called (tea.Program.Send returns once the program has ended).
func (c *Client) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

func (c *Client) setStatus(s StatusMsg) {
	c.mu.Lock()
	c.status = s
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	c.out.push(s)
}

func (c *Client) frameID(prefix string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID++
	return prefix + strconv.FormatUint(c.nextID, 10)
}

// Send sends cmd and waits for its CommandResult. A refused or failed command is a result with
// Ok false and the server's reason in Error, not an error; errors are about the transport.
func (c *Client) Send(ctx context.Context, cmd *consolepb.Command) (*consolepb.CommandResult, error) {
	id := c.frameID("c")
	ch := make(chan *consolepb.CommandResult, 1)
	c.mu.Lock()
	conn := c.conn
	if conn == nil {
		c.mu.Unlock()
		return nil, ErrNotConnected
	}
	c.waiters[id] = ch
	c.mu.Unlock()
	drop := func() {
		c.mu.Lock()
		delete(c.waiters, id)
		c.mu.Unlock()
	}
	if err := write(ctx, conn, &consolepb.ClientFrame{Id: id, Body: &consolepb.ClientFrame_Command{Command: cmd}}); err != nil {
		drop()
		return nil, fmt.Errorf("client: send command: %v", err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, ErrConnectionLost
		}
		return r, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	case <-c.ctx.Done():
		drop()
		return nil, ErrConnectionLost
	}
}

// Subscribe replaces the subscription: jobs (empty: every job, without nodes, heatmap and charts),
// keeping the rate and heatmap columns. It is sent at once when connected and again after every
// reconnection.
func (c *Client) Subscribe(ctx context.Context, jobs []string) error {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.mu.Lock()
	sub := proto.CloneOf(c.sub)
	sub.Jobs = append([]string(nil), jobs...)
	c.sub, c.subscribed = sub, true
	conn := c.conn
	c.mu.Unlock()
	if conn == nil {
		return nil // sent on the next connection
	}
	return c.sendSubscribe(ctx, conn, sub)
}

// SetRate changes the most deltas per second the server sends (re-sending the subscription).
func (c *Client) SetRate(ctx context.Context, hz float64) error {
	return c.resubscribe(ctx, func(sub *consolepb.Subscribe) { sub.MaxRateHz = hz })
}

// SetWindow changes what of each detail view the server sends (re-sending the subscription; the
// server answers with a snapshot). Nil: whole views.
func (c *Client) SetWindow(ctx context.Context, w *consolepb.ViewWindow) error {
	return c.resubscribe(ctx, func(sub *consolepb.Subscribe) { sub.Window = w })
}

// resubscribe changes a copy of the subscription and sends it when the client is subscribed.
func (c *Client) resubscribe(ctx context.Context, change func(*consolepb.Subscribe)) error {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	c.mu.Lock()
	sub := proto.CloneOf(c.sub)
	change(sub)
	c.sub = sub
	conn := c.conn
	subscribed := c.subscribed
	c.mu.Unlock()
	if conn == nil || !subscribed {
		return nil
	}
	return c.sendSubscribe(ctx, conn, sub)
}

// sendSubscribe must be called with subMu held, so the scope queue matches the wire order.
func (c *Client) sendSubscribe(ctx context.Context, conn *websocket.Conn, sub *consolepb.Subscribe) error {
	c.mu.Lock()
	c.scopes = append(c.scopes, sub.Jobs)
	c.mu.Unlock()
	id := c.frameID("s")
	if err := write(ctx, conn, &consolepb.ClientFrame{Id: id, Body: &consolepb.ClientFrame_Subscribe{Subscribe: sub}}); err != nil {
		return fmt.Errorf("client: subscribe: %v", err)
	}
	return nil
}

func write(ctx context.Context, conn *websocket.Conn, f *consolepb.ClientFrame) error {
	b, err := protojson.Marshal(f)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return conn.Write(wctx, websocket.MessageText, b)
}

var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true} // fields are only ever added

// errUnauthorized marks a refusal of the token.
type errUnauthorized struct{ msg string }

func (e errUnauthorized) Error() string { return "client: unauthorized: " + e.msg }

// loop owns the connection: dial, serve, and on loss wait out the backoff and dial again.
func (c *Client) loop(addr string) {
	attempt := 0
	for {
		c.setStatus(StatusMsg{State: Connecting, Addr: addr, Attempt: attempt})
		welcomed, err := c.session(addr)
		if c.ctx.Err() != nil {
			c.setStatus(StatusMsg{State: Closed, Addr: addr})
			return
		}
		var ua errUnauthorized
		if errors.As(err, &ua) {
			c.setStatus(StatusMsg{State: Unauthorized, Addr: addr, Err: err})
			return
		}
		if welcomed {
			attempt = 0
		}
		attempt++
		wait := c.cfg.minBackoff
		for i := 1; i < attempt && wait < c.cfg.maxBackoff; i++ {
			wait *= 2
		}
		wait = min(wait, c.cfg.maxBackoff)
		now := c.cfg.clock.Now()
		c.setStatus(StatusMsg{State: Disconnected, Addr: addr, Attempt: attempt, Err: err, RetryIn: wait, RetryAt: now.Add(wait)})
		select {
		case <-c.cfg.clock.After(wait):
		case <-c.ctx.Done():
			c.setStatus(StatusMsg{State: Closed, Addr: addr})
			return
		}
	}
}

// session runs one connection until it fails; welcomed reports whether it got that far.
func (c *Client) session(addr string) (welcomed bool, err error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	hdr := http.Header{}
	if c.token != "" {
		hdr.Set("Authorization", "Bearer "+c.token)
	}
	conn, resp, err := websocket.Dial(ctx, c.url, &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: c.cfg.httpClient})
	if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		return false, errUnauthorized{msg: resp.Status}
	}
	if err != nil {
		return false, fmt.Errorf("dial %s: %v", c.url, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(c.cfg.readLimit)

	helloID := c.frameID("h")
	if err := write(ctx, conn, &consolepb.ClientFrame{Id: helloID, Body: &consolepb.ClientFrame_Hello{
		Hello: &consolepb.Hello{Token: c.token, Client: c.cfg.name}}}); err != nil {
		return false, fmt.Errorf("hello: %v", err)
	}
	hctx, hcancel := context.WithTimeout(ctx, c.cfg.helloTimeout)
	f, err := readFrame(hctx, conn)
	hcancel()
	if err != nil {
		return false, closeReason(err, "waiting for welcome", true)
	}
	switch b := f.Body.(type) {
	case *consolepb.ServerFrame_Welcome:
		c.out.push(WelcomeMsg{Welcome: b.Welcome})
	case *consolepb.ServerFrame_Result:
		if !b.Result.Ok {
			return false, errUnauthorized{msg: b.Result.Error}
		}
		return false, fmt.Errorf("expected welcome, got a result for %q", b.Result.Id)
	default:
		return false, fmt.Errorf("expected welcome, got %T", f.Body)
	}

	c.subMu.Lock()
	c.mu.Lock()
	c.conn, c.scopes = conn, nil
	sub, subscribed := c.sub, c.subscribed
	c.mu.Unlock()
	if subscribed {
		err = c.sendSubscribe(ctx, conn, sub)
	}
	c.subMu.Unlock()
	defer c.drop()
	if err != nil {
		return true, err
	}
	c.setStatus(StatusMsg{State: Connected, Addr: addr})

	if c.cfg.ping > 0 {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.pinger(ctx, conn)
		}()
	}
	for {
		f, err := readFrame(ctx, conn)
		if err != nil {
			return true, closeReason(err, "connection lost", false)
		}
		c.dispatch(f)
	}
}

// drop forgets the connection and fails the commands waiting on it.
func (c *Client) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn, c.scopes = nil, nil
	for id, ch := range c.waiters {
		close(ch)
		delete(c.waiters, id)
	}
}

func (c *Client) pinger(ctx context.Context, conn *websocket.Conn) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.cfg.clock.After(c.cfg.ping):
		}
		pctx, cancel := context.WithTimeout(ctx, c.cfg.ping)
		err := conn.Ping(pctx)
		cancel()
		if err != nil {
			conn.CloseNow() // the reader sees the loss and the loop redials
			return
		}
	}
}

func (c *Client) dispatch(f *consolepb.ServerFrame) {
	t := f.GetTime().AsTime()
	switch b := f.Body.(type) {
	case *consolepb.ServerFrame_Snapshot:
		c.mu.Lock()
		var scope []string
		if len(c.scopes) > 0 {
			scope, c.scopes = c.scopes[0], c.scopes[1:]
		} else {
			scope = c.sub.Jobs
		}
		c.mu.Unlock()
		c.holdSnapshot(scope, b.Snapshot)
		c.out.push(SnapshotMsg{Scope: scope, Snapshot: b.Snapshot, Seq: f.Seq, Time: t})
	case *consolepb.ServerFrame_Delta:
		c.out.push(DeltaMsg{Delta: c.holdDelta(b.Delta), Seq: f.Seq, Time: t})
	case *consolepb.ServerFrame_Result:
		c.mu.Lock()
		ch, ok := c.waiters[b.Result.Id]
		delete(c.waiters, b.Result.Id)
		c.mu.Unlock()
		if ok {
			ch <- b.Result
		}
	case *consolepb.ServerFrame_Welcome:
		c.out.push(WelcomeMsg{Welcome: b.Welcome})
	}
}

func readFrame(ctx context.Context, conn *websocket.Conn) (*consolepb.ServerFrame, error) {
	typ, data, err := conn.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, fmt.Errorf("unexpected binary frame of %d bytes", len(data))
	}
	f := &consolepb.ServerFrame{}
	if err := unmarshal.Unmarshal(data, f); err != nil {
		return nil, fmt.Errorf("bad frame: %v", err)
	}
	return f, nil
}

// closeReason turns a read error into the error the UI shows. A policy-violation close before
// the welcome is a refused token; after it (e.g. a client too slow to read) the loss is retried.
func closeReason(err error, what string, hello bool) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		if hello && ce.Code == websocket.StatusPolicyViolation {
			return errUnauthorized{msg: ce.Reason}
		}
		if ce.Reason != "" {
			return fmt.Errorf("%s: closed by the scheduler: %s", what, ce.Reason)
		}
		return fmt.Errorf("%s: closed by the scheduler (%d)", what, ce.Code)
	}
	return fmt.Errorf("%s: %v", what, err)
}

// holdSnapshot replaces the held views in scope (every job when it is empty) with the snapshot's.
func (c *Client) holdSnapshot(scope []string, s *consolepb.Snapshot) {
	if len(scope) == 0 {
		clear(c.held)
	}
	for _, name := range scope {
		delete(c.held, name)
	}
	for _, v := range s.GetJobs() {
		c.held[v.GetName()] = v
	}
}

// holdDelta applies a delta to the held views and returns it with every patched job whole in
// Jobs (after the jobs that came whole), so handlers never see a patch they would have to apply.
// A patch for a job not held (none should come) is dropped.
func (c *Client) holdDelta(d *consolepb.Delta) *consolepb.Delta {
	for _, name := range d.GetRemovedJobs() {
		delete(c.held, name)
	}
	for _, v := range d.GetJobs() {
		c.held[v.GetName()] = v
	}
	if len(d.GetPatches()) == 0 {
		return d
	}
	out := &consolepb.Delta{Jobs: append([]*consolepb.JobView(nil), d.GetJobs()...), RemovedJobs: d.GetRemovedJobs(),
		Events: d.GetEvents(), Patches: d.GetPatches()}
	for _, p := range d.GetPatches() {
		old, ok := c.held[p.GetName()]
		if !ok {
			continue
		}
		v := ApplyPatch(old, p)
		c.held[p.GetName()] = v
		out.Jobs = append(out.Jobs, v)
	}
	return out
}
