package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

func TestAuthByHeaderAndHello(t *testing.T) {
	h := newHarness(t, newFakeBackend(), Options{})
	tests := []struct {
		name        string
		header      string // token in the Authorization header
		hello       string // token in the first frame, sent when header is ""
		user, role  string
		secondHello bool
	}{
		{name: "header operator", header: "op-secret", user: "olga", role: "operator"},
		{name: "header viewer", header: "viewer-secret", user: "alice", role: "viewer"},
		{name: "hello operator", hello: "op-secret", user: "olga", role: "operator"},
		{name: "hello viewer", hello: "viewer-secret", user: "alice", role: "viewer"},
		{name: "header, then a hello with the same token", header: "op-secret", user: "olga", role: "operator", secondHello: true},
	}
	for _, tt := range tests {
		c := h.dial(tt.header)
		if tt.header == "" {
			c.hello(tt.hello)
		}
		w := c.welcome()
		if w.GetUser() != tt.user || w.GetRole() != tt.role || w.GetApiVersion() != APIVersion || w.GetServerVersion() != "test" {
			t.Errorf("%s: welcome = %v; want user %s role %s api %s", tt.name, w, tt.user, tt.role, APIVersion)
		}
		if tt.secondHello {
			c.hello(tt.header)
			if again := c.welcome(); again.GetUser() != tt.user {
				t.Errorf("%s: second welcome = %v", tt.name, again)
			}
			c.hello("viewer-secret") // someone else's token: refused, stream stays
			if r := c.result(); r.GetOk() || codes.Code(r.GetCode()) != codes.InvalidArgument || !strings.Contains(r.GetError(), "authenticated as olga") {
				t.Errorf("%s: hello with another token = %v; want InvalidArgument", tt.name, r)
			}
		}
		c.ws.Close(websocket.StatusNormalClosure, "")
	}

	resp, err := http.Get(h.ts.URL + HealthPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var health map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&health); err != nil || resp.StatusCode != 200 || health["status"] != "ok" {
		t.Errorf("GET %s = %d %v, %v; want 200 status ok", HealthPath, resp.StatusCode, health, err)
	}
}

func TestRefusedConnections(t *testing.T) {
	tests := []struct {
		name      string
		anonymous bool
		header    string
		first     string // raw first frame; "" sends nothing
		status    websocket.StatusCode
		reason    string
		audited   string // audit Reason; "" when the connection is accepted
	}{
		{name: "unknown header token", header: "nope", status: websocket.StatusPolicyViolation, reason: reasonUnknownToken, audited: "unknown token"},
		{name: "unknown hello token", first: `{"hello":{"token":"nope"}}`, status: websocket.StatusPolicyViolation, reason: reasonUnknownToken, audited: "unknown token"},
		{name: "hello without token", first: `{"hello":{}}`, status: websocket.StatusPolicyViolation, reason: reasonNoToken, audited: "no token"},
		{name: "subscribe before hello", first: `{"subscribe":{}}`, status: websocket.StatusPolicyViolation, reason: reasonBadHello, audited: "first frame was not a hello"},
		{name: "garbage before hello", first: `hello?`, status: websocket.StatusPolicyViolation, reason: reasonBadHello, audited: "first frame was not a hello"},
		{name: "silence", status: websocket.StatusPolicyViolation, reason: reasonNoHello, audited: "no hello within 100ms"},
		{name: "anonymous allowed, bad token still refused", anonymous: true, first: `{"hello":{"token":"nope"}}`,
			status: websocket.StatusPolicyViolation, reason: reasonUnknownToken, audited: "unknown token"},
	}
	for _, tt := range tests {
		b := newFakeBackend()
		h := newHarness(t, b, Options{AllowAnonymousViewer: tt.anonymous, HelloTimeout: 100 * time.Millisecond})
		c := h.dial(tt.header)
		if tt.first != "" {
			c.sendRaw(websocket.MessageText, tt.first)
		}
		ce := c.closed()
		if ce.Code != tt.status || ce.Reason != tt.reason {
			t.Errorf("%s: closed with %d %q; want %d %q", tt.name, ce.Code, ce.Reason, tt.status, tt.reason)
		}
		log := b.auditLog()
		switch {
		case tt.audited == "" && len(log) != 0:
			t.Errorf("%s: audit log = %+v; want empty", tt.name, log)
		case tt.audited != "" && (len(log) != 1 || log[0].Allowed || log[0].Command != "connect" || log[0].Reason != tt.audited ||
			!strings.HasPrefix(log[0].Who, "token ") || strings.Contains(log[0].Who, "nope")):
			t.Errorf("%s: audit log = %+v; want one refused connect with reason %q and no token in clear", tt.name, log, tt.audited)
		}
		if got := h.s.Stats().Refused; got != 1 {
			t.Errorf("%s: Stats().Refused = %d; want 1", tt.name, got)
		}
	}
}

func TestAnonymousViewer(t *testing.T) {
	b := newFakeBackend(job("a", 1))
	h := newHarness(t, b, Options{AllowAnonymousViewer: true})

	c := h.dial("")
	c.hello("")
	if w := c.welcome(); w.GetUser() != "anonymous" || w.GetRole() != "viewer" {
		t.Errorf("welcome = %v; want anonymous viewer", w)
	}
	c.command("k", &consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: "a"}}})
	if r := c.result(); r.GetOk() || codes.Code(r.GetCode()) != codes.PermissionDenied {
		t.Errorf("anonymous kill = %v; want PermissionDenied", r)
	}

	// Without a hello at all, the first frame is served as an anonymous viewer's.
	c2 := h.dial("")
	c2.subscribe(0)
	if w := c2.welcome(); w.GetUser() != "anonymous" {
		t.Errorf("welcome = %v; want anonymous", w)
	}
	if s := c2.snapshot(); len(s.GetJobs()) != 1 {
		t.Errorf("snapshot = %v; want job a", s)
	}
}

func TestViewerCommandRefusedAndAudited(t *testing.T) {
	b := newFakeBackend()
	h := newHarness(t, b, Options{})
	c := h.dial("viewer-secret")
	c.welcome()
	cmds := []struct {
		cmd  *consolepb.Command
		want string
	}{
		{approve("j1", "a-7"), "viewer alice may not approve actions: operator role required"},
		{&consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: "name: x"}}},
			"viewer alice may not submit jobs: operator role required"},
		{&consolepb.Command{Kind: &consolepb.Command_SetPolicy{SetPolicy: &consolepb.SetPolicy{Job: "j1", Policy: "psld"}}},
			"viewer alice may not set policies: operator role required"},
	}
	for i, tt := range cmds {
		id := "v" + string(rune('0'+i))
		c.command(id, tt.cmd)
		r := c.result()
		if r.GetId() != id || r.GetOk() || codes.Code(r.GetCode()) != codes.PermissionDenied || r.GetError() != tt.want {
			t.Errorf("viewer command %v = %v; want id %s PermissionDenied %q", tt.cmd, r, id, tt.want)
		}
	}
	if n := len(b.executed()); n != 0 {
		t.Errorf("Execute called %d times for a viewer; want 0", n)
	}
	log := b.auditLog()
	if len(log) != len(cmds) {
		t.Fatalf("audit log has %d entries; want %d", len(log), len(cmds))
	}
	if e := log[0]; e.Who != "alice" || e.Role != "viewer" || e.Command != "approve" || e.Job != "j1" || e.Allowed ||
		e.Reason != cmds[0].want || !strings.Contains(e.Detail, "a-7") || e.Time.IsZero() {
		t.Errorf("audit entry = %+v; want alice's refused approve of a-7 on j1", e)
	}
}

// TestViewerReadsHistory: history is a read: a viewer may send it, it
// reaches the scheduler, and it leaves no audit record.
func TestViewerReadsHistory(t *testing.T) {
	b := newFakeBackend()
	b.execute = func(_ context.Context, who Principal, cmd *consolepb.Command) *consolepb.CommandResult {
		return &consolepb.CommandResult{Ok: true, Job: cmd.GetHistory().GetJob(), FramesTotal: 3}
	}
	h := newHarness(t, b, Options{})
	c := h.dial("viewer-secret")
	c.welcome()
	c.command("h1", &consolepb.Command{Kind: &consolepb.Command_History{History: &consolepb.GetHistory{Job: "j1"}}})
	if r := c.result(); r.GetId() != "h1" || !r.GetOk() || r.GetFramesTotal() != 3 {
		t.Errorf("viewer history = %v; want ok with the backend's answer", r)
	}
	if n := len(b.executed()); n != 1 {
		t.Errorf("Execute called %d times; want 1", n)
	}
	if log := b.auditLog(); len(log) != 0 {
		t.Errorf("audit log = %+v; want none for a read", log)
	}
}

func TestOperatorCommandExecutedAndAudited(t *testing.T) {
	b := newFakeBackend()
	b.execute = func(_ context.Context, who Principal, cmd *consolepb.Command) *consolepb.CommandResult {
		if k := cmd.GetKillJob(); k != nil {
			return &consolepb.CommandResult{Ok: false, Error: "no job " + k.GetJob(), Code: int32(codes.NotFound)}
		}
		return &consolepb.CommandResult{Ok: true, ActionId: "a-9"}
	}
	h := newHarness(t, b, Options{})
	c := h.dial("op-secret")
	c.welcome()

	trigger := &consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: "j1",
		Action: &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-2"}}}}
	c.command("t1", trigger)
	if r := c.result(); r.GetId() != "t1" || !r.GetOk() || r.GetActionId() != "a-9" {
		t.Errorf("trigger result = %v; want ok a-9 with id t1", r)
	}
	c.command("k1", &consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: "zz"}}})
	if r := c.result(); r.GetId() != "k1" || r.GetOk() || codes.Code(r.GetCode()) != codes.NotFound || r.GetError() != "no job zz" {
		t.Errorf("kill result = %v; want the backend's NotFound", r)
	}
	// An operator's incomplete command never reaches the scheduler.
	c.command("a1", approve("j1", ""))
	if r := c.result(); codes.Code(r.GetCode()) != codes.InvalidArgument || !strings.Contains(r.GetError(), "missing action_id") {
		t.Errorf("incomplete approve = %v; want InvalidArgument", r)
	}

	ex := b.executed()
	if len(ex) != 2 || ex[0].who != (Principal{"olga", RoleOperator}) || ex[0].cmd.GetTrigger().GetAction().GetTarget() != "worker-2" {
		t.Fatalf("Execute calls = %v; want the trigger then the kill, by olga", ex)
	}
	log := b.auditLog()
	if len(log) != 3 {
		t.Fatalf("audit log = %+v; want 3 entries", log)
	}
	if e := log[0]; !e.Allowed || e.Who != "olga" || e.Role != "operator" || e.Command != "trigger" || e.Job != "j1" ||
		!strings.Contains(e.Detail, "KILL_RESTART") || !strings.Contains(e.Detail, "outcome: ok action_id=a-9") {
		t.Errorf("audit[0] = %+v; want olga's allowed trigger with its outcome", e)
	}
	if e := log[1]; !e.Allowed || e.Command != "kill_job" || !strings.Contains(e.Detail, "failed (NotFound): no job zz") {
		t.Errorf("audit[1] = %+v; want the allowed kill with its failure", e)
	}
	if e := log[2]; e.Allowed || e.Command != "approve" || !strings.Contains(e.Reason, "missing action_id") {
		t.Errorf("audit[2] = %+v; want the refused incomplete approve", e)
	}

	// A command whose audit entry cannot be written says so.
	b.mu.Lock()
	b.auditErr = errors.New("disk full")
	b.mu.Unlock()
	c.command("t2", trigger)
	if r := c.result(); !r.GetOk() || !strings.Contains(r.GetError(), "audit log write failed: disk full") {
		t.Errorf("trigger with a failing audit log = %v; want ok with the audit failure reported", r)
	}
}

func TestSnapshotThenDeltasOnlyOnChange(t *testing.T) {
	b := newFakeBackend(job("a", 1), job("b", 1))
	b.addEvent(&consolepb.Event{Job: "a", Message: "old"})
	b.addEvent(&consolepb.Event{Job: "b", Message: "older news"})
	b.addEvent(&consolepb.Event{Message: "scheduler started"})
	h := newHarness(t, b, Options{})
	c := h.dial("viewer-secret")
	c.welcome()
	c.subscribe(200)

	s := c.snapshot()
	if len(s.GetJobs()) != 2 || s.GetJobs()[0].GetName() != "a" || s.GetJobs()[1].GetName() != "b" {
		t.Fatalf("snapshot jobs = %v; want a and b", s.GetJobs())
	}
	if ev := s.GetEvents(); len(ev) != 3 || ev[0].GetMessage() != "scheduler started" || ev[2].GetMessage() != "old" {
		t.Errorf("snapshot events = %v; want all three, newest first", ev)
	}

	// Let the subscription poll a few times with nothing changed: if it sent
	// anything, the next frame read below would not be the delta for "a".
	n := b.calls()
	waitUntil(t, "idle ticks", func() bool { return b.calls() >= n+5 })
	b.setJob(job("a", 2))
	d := c.delta()
	if len(d.GetJobs()) != 1 || d.GetJobs()[0].GetName() != "a" || d.GetJobs()[0].GetIteration() != 2 ||
		len(d.GetRemovedJobs()) != 0 || len(d.GetEvents()) != 0 {
		t.Errorf("delta = %v; want only job a at iteration 2", d)
	}

	// An equal but new view is no change either.
	n = b.calls()
	b.setJob(job("b", 1))
	waitUntil(t, "idle ticks", func() bool { return b.calls() >= n+5 })
	b.removeJob("b")
	if d := c.delta(); len(d.GetJobs()) != 0 || len(d.GetRemovedJobs()) != 1 || d.GetRemovedJobs()[0] != "b" {
		t.Errorf("delta = %v; want b removed only", d)
	}

	b.addEvent(&consolepb.Event{Job: "a", Kind: "node", Message: "worker-1 lost"})
	if d := c.delta(); len(d.GetJobs()) != 0 || len(d.GetEvents()) != 1 || d.GetEvents()[0].GetMessage() != "worker-1 lost" {
		t.Errorf("delta = %v; want the new event only", d)
	}
	// The writer counts a frame once its write returns, maybe after the client has it.
	waitUntil(t, "5 frames counted", func() bool { return h.s.Stats().Frames >= 5 })
	if got := h.s.Stats(); got.Bytes == 0 || got.Streams != 1 {
		t.Errorf("Stats() = %+v; want bytes on 1 stream", got)
	}
}

func TestResubscribeReplaces(t *testing.T) {
	b := newFakeBackend(job("a", 1), job("b", 1))
	b.addEvent(&consolepb.Event{Job: "a", Message: "about a"})
	b.addEvent(&consolepb.Event{Job: "b", Message: "about b"})
	h := newHarness(t, b, Options{})
	c := h.dial("viewer-secret")
	c.welcome()
	c.subscribe(200, "a")
	if s := c.snapshot(); len(s.GetJobs()) != 1 || s.GetJobs()[0].GetName() != "a" || len(s.GetEvents()) != 1 {
		t.Fatalf("snapshot = %v; want job a and its event", s)
	}
	c.subscribe(200, "b", "missing")
	if s := c.snapshot(); len(s.GetJobs()) != 1 || s.GetJobs()[0].GetName() != "b" || s.GetEvents()[0].GetMessage() != "about b" {
		t.Fatalf("second snapshot = %v; want job b only", s)
	}
	b.setJob(job("a", 5)) // no longer watched
	n := b.calls()
	waitUntil(t, "ticks", func() bool { return b.calls() >= n+5 })
	b.setJob(job("b", 2))
	if d := c.delta(); len(d.GetJobs()) != 1 || d.GetJobs()[0].GetName() != "b" {
		t.Errorf("delta = %v; want b only", d)
	}
}

func TestRapidChangesCoalesce(t *testing.T) {
	b := newFakeBackend(job("a", 0))
	h := newHarness(t, b, Options{})
	c := h.dial("viewer-secret")
	c.welcome()
	c.subscribe(200)
	c.snapshot()

	const n = 200
	for i := int64(1); i <= n; i++ {
		b.setJob(job("a", i))
	}
	deltas, last := 0, int64(0)
	for last != n {
		d := c.delta()
		deltas++
		it := d.GetJobs()[0].GetIteration()
		if it <= last {
			t.Fatalf("delta %d carries iteration %d after %d; want each delta newer", deltas, it, last)
		}
		last = it
	}
	if deltas > n {
		t.Errorf("%d changes gave %d deltas; want at most %d", n, deltas, n)
	}
}

func TestMalformedFramesKeepTheStream(t *testing.T) {
	b := newFakeBackend()
	h := newHarness(t, b, Options{})
	c := h.dial("op-secret")
	c.welcome()
	tests := []struct {
		name  string
		typ   websocket.MessageType
		frame string
		id    string
		err   string
	}{
		{"not json", websocket.MessageText, `{"id":`, "", "malformed frame"},
		{"wrong field type, id readable", websocket.MessageText, `{"id":"m1","subscribe":{"maxRateHz":"fast"}}`, "m1", "malformed frame"},
		{"two bodies", websocket.MessageText, `{"id":"m2","hello":{},"subscribe":{}}`, "m2", "malformed frame"},
		{"binary", websocket.MessageBinary, `{"id":"m3","hello":{}}`, "m3", "binary frames are not accepted"},
		{"no body", websocket.MessageText, `{"id":"m4"}`, "m4", "frame has no body"},
		{"command without kind", websocket.MessageText, `{"id":"m5","command":{}}`, "m5", "command has no kind"},
		{"unknown fields only", websocket.MessageText, `{"id":"m6","command":{"reboot":{}}}`, "m6", "command has no kind"},
		{"negative rate", websocket.MessageText, `{"id":"m7","subscribe":{"maxRateHz":-1}}`, "m7", "max_rate_hz -1"},
	}
	for _, tt := range tests {
		c.sendRaw(tt.typ, tt.frame)
		r := c.result()
		if r.GetId() != tt.id || r.GetOk() || codes.Code(r.GetCode()) != codes.InvalidArgument || !strings.Contains(r.GetError(), tt.err) {
			t.Errorf("%s: result = %v; want id %q InvalidArgument containing %q", tt.name, r, tt.id, tt.err)
		}
	}
	// The stream is still there, snake_case field names work too.
	c.sendRaw(websocket.MessageText, `{"id":"ok1","command":{"kill_job":{"job":"j1"}}}`)
	if r := c.result(); r.GetId() != "ok1" || !r.GetOk() {
		t.Errorf("command after malformed frames = %v; want ok", r)
	}
	if ex := b.executed(); len(ex) != 1 || ex[0].cmd.GetKillJob().GetJob() != "j1" {
		t.Errorf("Execute calls = %v; want one kill of j1", ex)
	}
}

// bigJob is a job view of about size bytes of JSON.
func bigJob(iteration int64, size int) *consolepb.JobView {
	return &consolepb.JobView{Name: "big", Iteration: iteration, SpecYaml: strings.Repeat("x", size)}
}

func TestSlowClientDisconnected(t *testing.T) {
	tests := []struct {
		name         string
		writeTimeout time.Duration
		spam         bool // the slow client keeps sending hellos, each answered
		reason       string
	}{
		// The write timeout must be far above what a reading client ever
		// needs on a loaded machine under -race: the good client shares it.
		{"not reading", 2 * time.Second, false, reasonNotReading},
		{"queue full", time.Hour, true, reasonQueueFull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newFakeBackend(bigJob(0, 256<<10))
			h := newHarness(t, b, Options{MaxRateHz: 1000, WriteTimeout: tt.writeTimeout, SendQueue: 4})

			good := h.dial("viewer-secret")
			good.welcome()
			good.subscribe(1000)
			good.snapshot()
			var latest sync.Map // the good client's newest iteration
			goodDone := make(chan error, 1)
			go func() {
				for {
					f, err := good.read()
					if err != nil {
						goodDone <- err
						return
					}
					for _, j := range f.GetDelta().GetJobs() {
						latest.Store("it", j.GetIteration())
					}
				}
			}()

			slow := h.dial("viewer-secret")
			slow.welcome()
			slow.subscribe(1000)
			// ... and never reads again, until the server gives up on it.
			it := int64(0)
			deadline := time.Now().Add(10 * time.Second)
			for h.s.Stats().SlowDisconnects == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("slow client not disconnected; stats %+v", h.s.Stats())
				}
				it++
				b.setJob(bigJob(it, 256<<10))
				if tt.spam {
					slow.hello("")
				}
				time.Sleep(time.Millisecond)
			}

			// The server did not wait for it: the good client still gets news.
			it++
			b.setJob(bigJob(it, 16))
			waitUntil(t, "the good client's delta", func() bool {
				select {
				case err := <-goodDone:
					t.Fatalf("the good client was disconnected too (%v); stats %+v", err, h.s.Stats())
				default:
				}
				v, _ := latest.Load("it")
				return v == it
			})

			// Once the slow client reads, it finds out why it was dropped.
			ce := slow.closed()
			if ce.Code != websocket.StatusPolicyViolation || ce.Reason != tt.reason {
				t.Errorf("slow client closed with %d %q; want %d %q", ce.Code, ce.Reason, websocket.StatusPolicyViolation, tt.reason)
			}
			if got := h.s.Stats().SlowDisconnects; got != 1 {
				t.Errorf("SlowDisconnects = %d; want 1", got)
			}
			good.ws.Close(websocket.StatusNormalClosure, "")
			<-goodDone
		})
	}
}

func TestCloseEndsEverything(t *testing.T) {
	b := newFakeBackend(job("a", 1))
	started := make(chan struct{})
	b.execute = func(ctx context.Context, _ Principal, _ *consolepb.Command) *consolepb.CommandResult {
		close(started)
		<-ctx.Done() // a command still running when the server closes
		return &consolepb.CommandResult{Ok: false, Error: ctx.Err().Error(), Code: int32(codes.Canceled)}
	}
	s := New(b, testTokens, Options{MaxRateHz: 500, Logf: func(string, ...any) {}})
	ts := httptest.NewServer(s.Handler())
	h := &harness{t: t, b: b, s: s, ts: ts}

	var clients []*client
	for _, tok := range []string{"viewer-secret", "op-secret", "viewer-secret"} {
		c := h.dial(tok)
		c.welcome()
		c.subscribe(200)
		c.snapshot()
		clients = append(clients, c)
	}
	clients[1].command("slow", &consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: "a"}}})
	<-started
	pending := h.dial("") // not yet authenticated
	if got := s.Stats().Streams; got != 4 {
		t.Errorf("Stats().Streams = %d; want 4", got)
	}

	ends := make(chan websocket.CloseError, len(clients)+1)
	for _, c := range append(clients, pending) {
		go func() { ends <- c.closed() }()
	}
	s.Close()
	for range len(clients) + 1 {
		if ce := <-ends; ce.Code != websocket.StatusGoingAway || ce.Reason != reasonShutdown {
			t.Errorf("stream closed with %d %q; want %d %q", ce.Code, ce.Reason, websocket.StatusGoingAway, reasonShutdown)
		}
	}
	// wg.Done runs in a deferred call, so a goroutine may still be
	// returning when Close does: allow it a moment.
	if g := waitNoStreamGoroutines(2 * time.Second); g != "" {
		t.Errorf("stream goroutines left after Close:\n%s", g)
	}
	if got := s.Stats().Streams; got != 0 {
		t.Errorf("Stats().Streams = %d after Close; want 0", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, resp, err := websocket.Dial(ctx, h.url(), nil); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("dial after Close = %v, %v; want 503", resp, err)
	}
	ts.Close()
}

// TestHelloTimeoutOnTheClock: the hello timeout runs on the server's
// clock: a silent client is refused when the injected clock passes the
// timeout (an hour here, which the wall clock never reaches in a test).
func TestHelloTimeoutOnTheClock(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := newFakeBackend()
	h := newHarness(t, b, Options{HelloTimeout: time.Hour, Clock: clk})
	before := clk.Waiters()
	c := h.dial("")
	for clk.Waiters() == before { // the connection waits for its hello on clk
		time.Sleep(time.Millisecond)
	}
	clk.Advance(time.Hour)
	if ce := c.closed(); ce.Code != websocket.StatusPolicyViolation || ce.Reason != reasonNoHello {
		t.Errorf("closed with %d %q; want %d %q", ce.Code, ce.Reason, websocket.StatusPolicyViolation, reasonNoHello)
	}
}
