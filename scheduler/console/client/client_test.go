package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// fakeScheduler plays the scheduler's side of console.proto.
type fakeScheduler struct {
	t     *testing.T
	token string
	jobs  []*consolepb.JobView

	mu       sync.Mutex
	hellos   []*consolepb.Hello
	subs     []*consolepb.Subscribe
	commands []*consolepb.Command
	conn     *websocket.Conn
	conns    chan *websocket.Conn
	received chan *consolepb.Command
	seq      uint64
	refuse   bool // close with 1008 on hello, as the scheduler does for an unknown token
}

func newFakeScheduler(t *testing.T, token string) (*fakeScheduler, *httptest.Server) {
	s := &fakeScheduler{t: t, token: token, conns: make(chan *websocket.Conn, 8), received: make(chan *consolepb.Command, 16), jobs: []*consolepb.JobView{
		{Name: "mnist", State: "running", Workers: 4, Servers: 2},
		{Name: "ctr", State: "pending"},
	}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func (s *fakeScheduler) write(ctx context.Context, conn *websocket.Conn, f *consolepb.ServerFrame) error {
	s.mu.Lock()
	s.seq++
	f.Seq = s.seq
	s.mu.Unlock()
	f.Time = timestamppb.New(time.Unix(1700000000, 0))
	b, err := protojson.Marshal(f)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

func (s *fakeScheduler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, "bad token", http.StatusUnauthorized)
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	ctx := r.Context()
	s.mu.Lock()
	s.conn = conn
	s.mu.Unlock()
	s.conns <- conn
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		f := &consolepb.ClientFrame{}
		if err := protojson.Unmarshal(data, f); err != nil {
			s.t.Errorf("server: bad client frame %s: %v", data, err)
			return
		}
		var reply *consolepb.ServerFrame
		s.mu.Lock()
		switch b := f.Body.(type) {
		case *consolepb.ClientFrame_Hello:
			s.hellos = append(s.hellos, b.Hello)
			if s.refuse {
				s.mu.Unlock()
				conn.Close(websocket.StatusPolicyViolation, "kelpie: unknown token")
				return
			}
			reply = &consolepb.ServerFrame{Body: &consolepb.ServerFrame_Welcome{Welcome: &consolepb.Welcome{
				ApiVersion: "kelpie.v1", User: "alice", Role: "operator"}}}
		case *consolepb.ClientFrame_Subscribe:
			s.subs = append(s.subs, b.Subscribe)
			snap := &consolepb.Snapshot{}
			for _, j := range s.jobs {
				if len(b.Subscribe.Jobs) == 0 || contains(b.Subscribe.Jobs, j.Name) {
					snap.Jobs = append(snap.Jobs, j)
				}
			}
			reply = &consolepb.ServerFrame{Body: &consolepb.ServerFrame_Snapshot{Snapshot: snap}}
		case *consolepb.ClientFrame_Command:
			s.commands = append(s.commands, b.Command)
			s.received <- b.Command
			res := &consolepb.CommandResult{Id: f.Id, Ok: true}
			if a := b.Command.GetApprove(); a != nil && a.ActionId != "a-1" {
				res = &consolepb.CommandResult{Id: f.Id, Error: "no pending action " + a.ActionId, Code: 5}
			}
			if b.Command.GetKillJob() != nil {
				s.mu.Unlock()
				continue // never answered: the test drops the connection while this waits
			}
			reply = &consolepb.ServerFrame{Body: &consolepb.ServerFrame_Result{Result: res}}
		}
		s.mu.Unlock()
		if reply != nil {
			if err := s.write(ctx, conn, reply); err != nil {
				return
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// fakeClock fires timers only when the test advances it, and tells the test when someone waits.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []fakeTimer
	waiting chan time.Duration
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1700000000, 0), waiting: make(chan time.Duration, 16)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	c.mu.Unlock()
	c.waiting <- d
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
		} else {
			kept = append(kept, t)
		}
	}
	c.timers = kept
}

// recorder is a handler that keeps every message and lets the test wait for one.
type recorder struct {
	mu   sync.Mutex
	msgs []any
	ch   chan any
}

func newRecorder() *recorder { return &recorder{ch: make(chan any, 256)} }

func (r *recorder) handle(m any) {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	r.ch <- m
}

// waitFor returns the first message (in arrival order, from now on) that match accepts.
func (r *recorder) waitFor(t *testing.T, what string, match func(any) bool) any {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case m := <-r.ch:
			if match(m) {
				return m
			}
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func isState(s State) func(any) bool {
	return func(m any) bool { st, ok := m.(StatusMsg); return ok && st.State == s }
}

func isSnapshot(m any) bool { _, ok := m.(SnapshotMsg); return ok }

func TestClientReconnects(t *testing.T) {
	sched, srv := newFakeScheduler(t, "s3cret")
	clk := newFakeClock()
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := Dial(ctx, srv.URL, "s3cret", WithHandler(rec.handle), WithClock(clk), WithPing(0),
		WithSubscription(nil, 4, 60), WithBackoff(time.Second, 8*time.Second), WithName("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	w := rec.waitFor(t, "welcome", func(m any) bool { _, ok := m.(WelcomeMsg); return ok }).(WelcomeMsg)
	if w.Welcome.Role != "operator" || w.Welcome.User != "alice" {
		t.Errorf("welcome = %v; want alice as operator", w.Welcome)
	}
	snap := rec.waitFor(t, "snapshot", isSnapshot).(SnapshotMsg)
	if len(snap.Snapshot.Jobs) != 2 || len(snap.Scope) != 0 {
		t.Errorf("first snapshot = %d jobs, scope %v; want 2 jobs, every job", len(snap.Snapshot.Jobs), snap.Scope)
	}
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}

	// A command gets the result with its own frame id, refused ones included.
	res, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{Job: "mnist", ActionId: "a-1"}}})
	if err != nil || !res.Ok {
		t.Fatalf("Send(approve a-1) = %v, %v; want ok", res, err)
	}
	res, err = c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{Job: "mnist", ActionId: "a-9"}}})
	if err != nil || res.Ok || !strings.Contains(res.Error, "a-9") {
		t.Fatalf("Send(approve a-9) = %v, %v; want refused with the reason", res, err)
	}

	// A narrower subscription answers with a snapshot tagged with its scope.
	if err := c.Subscribe(ctx, []string{"mnist"}); err != nil {
		t.Fatal(err)
	}
	snap = rec.waitFor(t, "scoped snapshot", isSnapshot).(SnapshotMsg)
	if len(snap.Scope) != 1 || snap.Scope[0] != "mnist" || len(snap.Snapshot.Jobs) != 1 {
		t.Errorf("scoped snapshot = scope %v, %d jobs; want [mnist], 1 job", snap.Scope, len(snap.Snapshot.Jobs))
	}

	// A command waiting when the connection drops fails with ErrConnectionLost.
	conn := <-sched.conns
	errc := make(chan error, 1)
	go func() {
		_, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: "mnist"}}})
		errc <- err
	}()
	for cmd := range sched.received {
		if cmd.GetKillJob() != nil {
			break // the server holds the kill unanswered
		}
	}
	conn.CloseNow()
	if err := <-errc; !errors.Is(err, ErrConnectionLost) {
		t.Errorf("Send during a drop = %v; want ErrConnectionLost", err)
	}
	st := rec.waitFor(t, "disconnected", isState(Disconnected)).(StatusMsg)
	if st.RetryIn != time.Second || !st.RetryAt.Equal(clk.Now().Add(time.Second)) || st.Err == nil {
		t.Errorf("status after a drop = %+v; want a retry in 1s with the cause", st)
	}
	if _, err := c.Send(ctx, &consolepb.Command{}); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Send while disconnected = %v; want ErrNotConnected", err)
	}

	// The client waits out the backoff on the injected clock, then says hello and re-subscribes.
	if d := <-clk.waiting; d != time.Second {
		t.Errorf("backoff wait = %v; want 1s", d)
	}
	clk.Advance(time.Second)
	rec.waitFor(t, "reconnected", isState(Connected))
	snap = rec.waitFor(t, "snapshot after reconnect", isSnapshot).(SnapshotMsg)
	if len(snap.Scope) != 1 || snap.Scope[0] != "mnist" {
		t.Errorf("snapshot after reconnect has scope %v; want the current subscription [mnist]", snap.Scope)
	}
	sched.mu.Lock()
	hellos, subs := len(sched.hellos), sched.subs
	sched.mu.Unlock()
	if hellos != 2 || len(subs) != 3 || subs[2].MaxRateHz != 4 || subs[2].HeatmapColumns != 60 {
		t.Errorf("server saw %d hellos and subscriptions %v; want 2 hellos and 3 subscriptions keeping rate 4 and 60 columns", hellos, subs)
	}
	if sched.hellos[0].Token != "s3cret" || sched.hellos[0].Client != "test" {
		t.Errorf("hello = %v; want the token and client name", sched.hellos[0])
	}

	// The backoff doubles while the scheduler stays away, up to the limit.
	(<-sched.conns).CloseNow()
	srv.Close()
	rec.waitFor(t, "disconnected", isState(Disconnected))
	var waits []time.Duration
	for i := 0; i < 5; i++ {
		d := <-clk.waiting
		waits = append(waits, d)
		clk.Advance(d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Errorf("backoff waits = %v; want %v", waits, want)
			break
		}
	}
	cancel()
	c.Close()
	if c.Status().State != Closed {
		t.Errorf("status after Close = %v; want closed", c.Status().State)
	}
}

func TestClientUnauthorized(t *testing.T) {
	_, srv := newFakeScheduler(t, "s3cret")
	rec := newRecorder()
	c, err := Dial(context.Background(), strings.TrimPrefix(srv.URL, "http://"), "wrong", WithHandler(rec.handle), WithPing(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := rec.waitFor(t, "unauthorized", isState(Unauthorized)).(StatusMsg)
	if st.Err == nil || !strings.Contains(st.Err.Error(), "401") {
		t.Errorf("status = %+v; want unauthorized with the HTTP status", st)
	}
	if err := c.WaitConnected(context.Background()); err == nil {
		t.Error("WaitConnected after a refusal = nil; want an error")
	}
}

// 1008 before the welcome is a refused token (not retried); after it, a lost connection (retried).
func TestClientPolicyViolation(t *testing.T) {
	sched, srv := newFakeScheduler(t, "s3cret")
	sched.refuse = true
	rec := newRecorder()
	c, _ := Dial(context.Background(), srv.URL, "s3cret", WithHandler(rec.handle), WithPing(0))
	st := rec.waitFor(t, "unauthorized", isState(Unauthorized)).(StatusMsg)
	if !strings.Contains(st.Err.Error(), "unknown token") {
		t.Errorf("refusal = %v; want the scheduler's reason", st.Err)
	}
	c.Close()

	sched.mu.Lock()
	sched.refuse = false
	sched.mu.Unlock()
	rec = newRecorder()
	clk := newFakeClock()
	c, _ = Dial(context.Background(), srv.URL, "s3cret", WithHandler(rec.handle), WithPing(0), WithClock(clk))
	defer c.Close()
	rec.waitFor(t, "connected", isState(Connected))
	<-sched.conns // the refused one
	(<-sched.conns).Close(websocket.StatusPolicyViolation, "kelpie: client too slow: send queue full, disconnected")
	st = rec.waitFor(t, "disconnected", func(m any) bool {
		st, ok := m.(StatusMsg)
		return ok && (st.State == Disconnected || st.State == Unauthorized)
	}).(StatusMsg)
	if st.State != Disconnected || !strings.Contains(st.Err.Error(), "too slow") {
		t.Errorf("after a slow-client close: %v %v; want disconnected (and a retry) with the reason", st.State, st.Err)
	}
}

// A client without a subscription only sends commands, until it subscribes.
func TestClientWithoutSubscription(t *testing.T) {
	sched, srv := newFakeScheduler(t, "s3cret")
	rec := newRecorder()
	c, _ := Dial(context.Background(), srv.URL, "s3cret", WithHandler(rec.handle), WithPing(0))
	defer c.Close()
	if err := c.WaitConnected(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Send(context.Background(), &consolepb.Command{Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{ActionId: "a-1"}}}); err != nil || !res.Ok {
		t.Fatalf("Send = %v, %v", res, err)
	}
	sched.mu.Lock()
	n := len(sched.subs)
	sched.mu.Unlock()
	if n != 0 {
		t.Errorf("a client without a subscription sent %d subscribe frames", n)
	}
	if err := c.Subscribe(context.Background(), []string{"ctr"}); err != nil {
		t.Fatal(err)
	}
	snap := rec.waitFor(t, "snapshot", isSnapshot).(SnapshotMsg)
	if len(snap.Snapshot.Jobs) != 1 || snap.Snapshot.Jobs[0].Name != "ctr" {
		t.Errorf("snapshot after Subscribe = %v", snap.Snapshot)
	}
}

func TestURL(t *testing.T) {
	cases := []struct{ in, want, err string }{
		{"127.0.0.1:7080", "ws://127.0.0.1:7080/api/v1/console", ""},
		{"http://host:80", "ws://host:80/api/v1/console", ""},
		{"https://host/", "wss://host/api/v1/console", ""},
		{"wss://host/custom", "wss://host/custom", ""},
		{"", "", "empty"},
		{"ftp://host", "", "scheme"},
		{"ws://", "", "no host"},
	}
	for _, c := range cases {
		got, err := URL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("URL(%q) = %q, %v; want an error about %s", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("URL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestMergeDeltas(t *testing.T) {
	j := func(name, state string) *consolepb.JobView { return &consolepb.JobView{Name: name, State: state} }
	ev := func(m string) *consolepb.Event { return &consolepb.Event{Message: m} }
	a := &consolepb.Delta{Jobs: []*consolepb.JobView{j("x", "running"), j("y", "running")}, RemovedJobs: []string{"z"}, Events: []*consolepb.Event{ev("1")}}
	b := &consolepb.Delta{Jobs: []*consolepb.JobView{j("x", "completed"), j("z", "pending")}, RemovedJobs: []string{"y"}, Events: []*consolepb.Event{ev("2")}}
	got := MergeDeltas(a, b)
	want := &consolepb.Delta{Jobs: []*consolepb.JobView{j("x", "completed"), j("z", "pending")}, RemovedJobs: []string{"y"}, Events: []*consolepb.Event{ev("1"), ev("2")}}
	if !proto.Equal(got, want) {
		t.Errorf("MergeDeltas(%v, %v) = %v; want %v", a, b, got, want)
	}
}

// The outbox never blocks its producer: while the handler is stuck, deltas merge and statuses collapse.
func TestOutboxCoalesces(t *testing.T) {
	o := newOutbox()
	release := make(chan struct{})
	got := make(chan any, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, holding := true, make(chan struct{})
	go o.run(ctx, func(m any) {
		if first {
			first = false
			close(holding)
			<-release
		}
		got <- m
	})
	o.push(StatusMsg{State: Connecting})
	<-holding // the handler is stuck on the first message; the rest queue up behind it
	for i := 0; i < 100; i++ {
		o.push(DeltaMsg{Delta: &consolepb.Delta{Jobs: []*consolepb.JobView{{Name: "j", Iteration: int64(i)}}}, Seq: uint64(i)})
	}
	o.push(StatusMsg{State: Disconnected})
	o.push(StatusMsg{State: Connecting})
	o.push(StatusMsg{State: Connected})
	close(release)
	var msgs []any
	for len(msgs) < 3 {
		msgs = append(msgs, <-got)
	}
	d, ok := msgs[1].(DeltaMsg)
	if !ok || len(d.Delta.Jobs) != 1 || d.Delta.Jobs[0].Iteration != 99 || d.Seq != 99 {
		t.Errorf("second message = %+v; want one merged delta at iteration 99", msgs[1])
	}
	if s, ok := msgs[2].(StatusMsg); !ok || s.State != Connected {
		t.Errorf("third message = %+v; want the latest status, connected", msgs[2])
	}
}
