// Package console is the scheduler's console plane: a WebSocket API on the
// scheduler's HTTP port (/api/v1/console) that streams job and node views to
// viewers and takes commands from operators. Frames are the messages of
// proto/console.proto as protojson text; docs/console-api.md describes the
// protocol for clients.
//
// The package knows the scheduler only through Backend, which it polls:
// each subscription asks for the views it watches at its own rate (4 Hz by
// default), compares them with what that client last received and sends
// only what changed, so an idle stream sends nothing. A Backend's views are
// immutable values: an unchanged job that is the same pointer costs no
// comparison, a new one is compared by a fingerprint of its encoding
// (delta.go says why not proto.Equal).
//
// Each stream has three goroutines (CONVENTIONS §4–5): the HTTP handler's
// goroutine owns the subscription (snapshot, deltas, rate), a receiver reads
// frames and runs commands, and a writer is the only one that writes to the
// socket, from a bounded queue. Producers never block on the writer: a
// delta is only built when the previous one has been written (so a slow
// reader gets fewer, larger deltas rather than a backlog), a full queue or a
// frame stuck in a write for Options.WriteTimeout ends the stream with a
// close reason that says so. Errors become gRPC codes (CommandResult.code)
// and WebSocket close statuses in one place, errors.go.
//
// Commands: a viewer's command is refused with PermissionDenied; an
// operator's is passed to Backend.Execute. Every command decision, allowed
// or refused, is written with Backend.Audit, as is every refused connection.
// An allowed command is audited after Execute so that its entry carries the
// outcome; a command whose entry cannot be written is reported to the client
// and logged.
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// APIVersion is the version of the console protocol this package speaks.
const APIVersion = "kelpie.v1"

// Paths served by Handler.
const (
	ConsolePath = "/api/v1/console"
	HealthPath  = "/api/v1/health"
)

// Backend is the scheduler core as the console sees it.
type Backend interface {
	// View returns the current views of the named jobs (all jobs when names
	// is empty: then nodes, heatmap, charts may be left out by the backend)
	// — immutable values the console may hold.
	View(names []string, heatmapColumns int) []*consolepb.JobView
	// EventsSince returns events with sequence > seq (oldest first, at most
	// limit) and the newest sequence number.
	EventsSince(seq uint64, limit int) ([]*consolepb.Event, uint64)
	// Execute runs an authorized command; the result says ok/error/code
	// (CommandResult.id is set by the console).
	Execute(ctx context.Context, who Principal, cmd *consolepb.Command) *consolepb.CommandResult
	// Audit records one command decision (allowed or refused) durably.
	Audit(e AuditEntry) error
}

// AuditEntry is one command decision, or one refused connection
// (Command "connect", Who the token's fingerprint).
type AuditEntry struct {
	Time    time.Time
	Who     string
	Role    string
	Command string // submit_job, kill_job, approve, reject, trigger, set_policy, connect, unknown
	Job     string
	Detail  string // the command's parameters and, when executed, its outcome
	Allowed bool
	Reason  string // why it was refused
}

// Options tune a Server. The zero value is usable.
type Options struct {
	// AllowAnonymousViewer lets a client without a token watch (as viewer
	// "anonymous"); it can never command.
	AllowAnonymousViewer bool
	// MaxRateHz caps the delta rate any subscription may ask for (default 20).
	MaxRateHz float64
	// Clock runs the stream's timers: the hello timeout, the write
	// watchdog and each subscription's ticks (default: the wall clock).
	Clock clock.Clock
	// Now is the clock for frame and audit times and the write watchdog
	// (default: Clock's).
	Now func() time.Time
	// ServerVersion is reported in Welcome.
	ServerVersion string

	// SendQueue is how many frames may wait for the writer (default 16).
	SendQueue int
	// WriteTimeout ends a stream whose frame has been in a write this long:
	// the client is not reading (default 10s).
	WriteTimeout time.Duration
	// HelloTimeout is how long a client without an Authorization header has
	// to send its hello (default 10s).
	HelloTimeout time.Duration
	// MaxFrameBytes is the largest frame a client may send (default 1 MiB).
	MaxFrameBytes int64
	// SnapshotEvents and DeltaEvents bound the events in one frame
	// (defaults 100 and 500).
	SnapshotEvents, DeltaEvents int
	// EventBytes bounds the encoded events of one snapshot or delta
	// (default 256 KiB): the newest that fit are sent.
	EventBytes int
	// Compress negotiates permessage-deflate (with context takeover) with
	// clients that offer it. See the benchmark figures in the package tests.
	Compress bool
	// OriginPatterns are the browser origins allowed besides the server's
	// own host (websocket.AcceptOptions.OriginPatterns).
	OriginPatterns []string
	// AuthBackoff is how long an address waits after its fourth failed
	// login in a row, doubling with every further one up to MaxAuthBackoff
	// (defaults 250ms and 30s); until then its connections are answered 429
	// without being read.
	AuthBackoff, MaxAuthBackoff time.Duration
	// MaxUnauthenticated caps the streams waiting for their hello (default
	// 64; 8 from one network prefix); a new one beyond the cap closes the
	// oldest. A token in the Authorization header takes no such slot.
	MaxUnauthenticated int
	// FailureBudget is how many failed logins (console and /metrics) the
	// scheduler checks in a burst from all networks together, refilled one
	// per FailureBudgetEvery (defaults 30 and 2s); once spent, logins from
	// addresses without a recent success are answered 429 unread.
	FailureBudget      int
	FailureBudgetEvery time.Duration
	// MaxStreamsPerUser caps one principal's open streams (default 32);
	// more are refused (429, or close 1008 after a hello).
	MaxStreamsPerUser int
	// RefusedCommands is how many refused commands a user may send before
	// the rest are turned away unread (ResourceExhausted), refilled one per
	// RefusedCommandEvery (defaults 10 and 6s): each refusal within the
	// budget is audited, the others are counted in the next record.
	RefusedCommands     int
	RefusedCommandEvery time.Duration
	// Logf reports what has no client to tell (a failed audit write after a
	// refusal, an encoding failure); default log.Printf.
	Logf func(format string, args ...any)
}

func (o Options) withDefaults() Options {
	if o.MaxRateHz <= 0 {
		o.MaxRateHz = DefaultMaxRateHz
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.Now == nil {
		o.Now = o.Clock.Now
	}
	if o.SendQueue <= 0 {
		o.SendQueue = 16
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.HelloTimeout <= 0 {
		o.HelloTimeout = 10 * time.Second
	}
	if o.MaxFrameBytes <= 0 {
		o.MaxFrameBytes = 1 << 20
	}
	if o.SnapshotEvents <= 0 {
		o.SnapshotEvents = 100
	}
	if o.DeltaEvents <= 0 {
		o.DeltaEvents = 500
	}
	if o.EventBytes <= 0 {
		o.EventBytes = 256 << 10
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.AuthBackoff <= 0 {
		o.AuthBackoff = 250 * time.Millisecond
	}
	if o.MaxAuthBackoff <= 0 {
		o.MaxAuthBackoff = 30 * time.Second
	}
	if o.FailureBudget <= 0 {
		o.FailureBudget = 30
	}
	if o.FailureBudgetEvery <= 0 {
		o.FailureBudgetEvery = 2 * time.Second
	}
	if o.MaxStreamsPerUser <= 0 {
		o.MaxStreamsPerUser = 32
	}
	if o.RefusedCommands <= 0 {
		o.RefusedCommands = 10
	}
	if o.RefusedCommandEvery <= 0 {
		o.RefusedCommandEvery = 6 * time.Second
	}
	if o.MaxUnauthenticated <= 0 {
		o.MaxUnauthenticated = 64
	}
	return o
}

// Stats are a Server's counters since New.
type Stats struct {
	Streams         int    // streams open now (authenticating or authenticated)
	Frames          uint64 // frames written
	Bytes           uint64 // frame payload bytes written (before compression)
	Refused         uint64 // connections refused for want of a valid token (throttled ones included)
	Throttled       uint64 // of those, refused before being read: backing off, or too many unauthenticated
	SlowDisconnects uint64 // streams ended because the client did not keep up
}

// Server serves the console plane. Create it with New.
type Server struct {
	b      Backend
	tokens Tokens
	opts   Options

	ctx    context.Context // canceled by Close; every stream ends with it
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	streams int
	wg      sync.WaitGroup // one per stream handler

	throttle *throttle
	origins  originLog // refused browser origins, for a rate-limited log
	refusals *refusals
	// userStreams counts each principal's authenticated streams (under mu).
	userStreams map[string]int

	frames, bytes, refused, slow, throttled atomic.Uint64
}

// New returns a Server for b. tokens may be nil when only anonymous viewers
// are allowed.
func New(b Backend, tokens Tokens, opts Options) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	opts = opts.withDefaults()
	return &Server{b: b, tokens: tokens, opts: opts, ctx: ctx, cancel: cancel, throttle: newThrottle(opts),
		refusals: newRefusals(opts), userStreams: map[string]int{}}
}

// Handler serves ConsolePath (WebSocket) and HealthPath.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+ConsolePath, s.serveConsole)
	mux.HandleFunc("GET "+HealthPath, s.serveHealth)
	return mux
}

// Close ends every stream (close status 1001, going away) and returns when
// their goroutines are done. A client that does not answer the close
// handshake holds Close up to about ten seconds (the websocket library's
// close timeouts). Streams that arrive later are refused with 503.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := s.streams
	s.mu.Unlock()
	return Stats{Streams: n, Frames: s.frames.Load(), Bytes: s.bytes.Load(),
		Refused: s.refused.Load(), Throttled: s.throttled.Load(), SlowDisconnects: s.slow.Load()}
}

func (s *Server) serveConsole(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "console: scheduler shutting down", http.StatusServiceUnavailable)
		return
	}
	s.streams++
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.streams--
		s.mu.Unlock()
		s.wg.Done()
	}()

	// A browser page from an origin not allowed is told why before
	// anything else is read or held (origin.go).
	if origin, refused := originRefused(r, s.opts.OriginPatterns); refused {
		s.refuseOrigin(w, r, origin)
		return
	}
	// A token in the header is checked now, before the upgrade: it takes
	// none of the slots of streams waiting for a hello, so strangers
	// holding those cannot keep an operator out.
	now := s.opts.Now()
	var auth headerAuth
	var slot *pendingSlot
	if tok := bearer(r.Header.Get("Authorization")); tok != "" {
		if wait, why := s.throttle.check(r.RemoteAddr, now); wait > 0 {
			s.refuseEarly(w, r, wait, why)
			return
		}
		p, ok := s.tokens.lookup(tok)
		s.throttle.result(r.RemoteAddr, ok, now)
		auth = headerAuth{token: tok, who: p, ok: ok}
		if ok {
			if !s.acquireStream(p) {
				s.refuseStream(w, r, p)
				return
			}
			defer s.releaseStream(p)
			defer Authenticated(r)()
		}
	} else {
		var wait time.Duration
		var why string
		if slot, wait, why = s.throttle.admit(r.RemoteAddr, now); slot == nil {
			s.refuseEarly(w, r, wait, why)
			return
		}
		defer s.throttle.release(slot)
	}

	accept := &websocket.AcceptOptions{OriginPatterns: s.opts.OriginPatterns}
	if s.opts.Compress {
		accept.CompressionMode = websocket.CompressionContextTakeover
	}
	ws, err := websocket.Accept(w, r, accept)
	if err != nil {
		return // Accept has answered the request
	}
	ws.SetReadLimit(s.opts.MaxFrameBytes)
	newConn(s, ws, r.RemoteAddr).serve(auth, slot, func() func() { return Authenticated(r) })
}

// headerAuth is what the Authorization header said: nothing (token ""), a
// known token's holder (ok) or an unknown token.
type headerAuth struct {
	token string
	who   Principal
	ok    bool
}

// acquireStream counts a stream of p's, unless p has MaxStreamsPerUser open.
func (s *Server) acquireStream(p Principal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.userStreams[p.Name] >= s.opts.MaxStreamsPerUser {
		return false
	}
	s.userStreams[p.Name]++
	return true
}

func (s *Server) releaseStream(p Principal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.userStreams[p.Name]--; s.userStreams[p.Name] <= 0 {
		delete(s.userStreams, p.Name)
	}
}

// refuseStream answers a stream beyond its user's cap (429, not upgraded)
// and audits it in aggregate.
func (s *Server) refuseStream(w http.ResponseWriter, r *http.Request, p Principal) {
	s.refused.Add(1)
	why := fmt.Sprintf("%s %s has %d streams open, the most one user may", p.Role, p.Name, s.opts.MaxStreamsPerUser)
	w.Header().Set("Retry-After", "10")
	http.Error(w, "console: "+why, http.StatusTooManyRequests)
	s.auditRefusal(r.RemoteAddr, p.Name, "connect", "from "+r.RemoteAddr, why)
}

func (s *Server) serveHealth(w http.ResponseWriter, _ *http.Request) {
	st := s.Stats()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	status, code := "ok", http.StatusOK
	if closed {
		status, code = "closing", http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"status": status, "api_version": APIVersion, "server_version": s.opts.ServerVersion,
		"streams": st.Streams,
	})
}

// audit writes e, logging a failure that no client will hear of.
func (s *Server) audit(e AuditEntry) error {
	err := s.b.Audit(e)
	if err != nil {
		s.opts.Logf("console: audit %s by %s: %v", e.Command, e.Who, err)
	}
	return err
}
