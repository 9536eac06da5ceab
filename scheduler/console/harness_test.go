package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestMain fails the run if any stream goroutine outlives the tests
// (a goleak-style check without the dependency).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := waitNoStreamGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "console goroutines still running after the tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// streamGoroutines returns the stacks of goroutines running this package's
// stream code.
func streamGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "scheduler/console.(*conn)") || strings.Contains(g, "scheduler/console.(*Server)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func waitNoStreamGoroutines(limit time.Duration) string {
	deadline := time.Now().Add(limit)
	for {
		g := streamGoroutines()
		if g == "" || time.Now().After(deadline) {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeBackend plays the scheduler core: it holds views and events the test
// sets, and records every call the console makes.
type fakeBackend struct {
	mu        sync.Mutex
	views     map[string]*consolepb.JobView
	events    []*consolepb.Event // sequence number = index + 1
	audits    []AuditEntry
	execs     []execCall
	viewCalls int
	auditErr  error
	execute   func(ctx context.Context, who Principal, cmd *consolepb.Command) *consolepb.CommandResult
}

type execCall struct {
	who Principal
	cmd *consolepb.Command
}

func newFakeBackend(views ...*consolepb.JobView) *fakeBackend {
	b := &fakeBackend{views: map[string]*consolepb.JobView{}}
	for _, v := range views {
		b.views[v.GetName()] = v
	}
	return b
}

func (b *fakeBackend) View(names []string, _ int) []*consolepb.JobView {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.viewCalls++
	var out []*consolepb.JobView
	if len(names) == 0 {
		for _, v := range b.views {
			out = append(out, v)
		}
	} else {
		for _, n := range names {
			if v, ok := b.views[n]; ok {
				out = append(out, v)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func (b *fakeBackend) EventsSince(seq uint64, limit int) ([]*consolepb.Event, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	newest := uint64(len(b.events))
	var out []*consolepb.Event
	for i := seq; i < newest && len(out) < limit; i++ {
		out = append(out, b.events[i])
	}
	return out, newest
}

func (b *fakeBackend) Execute(ctx context.Context, who Principal, cmd *consolepb.Command) *consolepb.CommandResult {
	b.mu.Lock()
	b.execs = append(b.execs, execCall{who, cmd})
	fn := b.execute
	b.mu.Unlock()
	if fn != nil {
		return fn(ctx, who, cmd)
	}
	return &consolepb.CommandResult{Ok: true, Job: "j1"}
}

func (b *fakeBackend) Audit(e AuditEntry) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.auditErr != nil {
		return b.auditErr
	}
	b.audits = append(b.audits, e)
	return nil
}

func (b *fakeBackend) setJob(v *consolepb.JobView) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.views[v.GetName()] = v
}

func (b *fakeBackend) removeJob(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.views, name)
}

func (b *fakeBackend) addEvent(e *consolepb.Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, e)
}

func (b *fakeBackend) calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.viewCalls
}

func (b *fakeBackend) auditLog() []AuditEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]AuditEntry(nil), b.audits...)
}

func (b *fakeBackend) executed() []execCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]execCall(nil), b.execs...)
}

// waitUntil polls cond for at most five seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

var testTokens = Tokens{
	"op-secret":     {Name: "olga", Role: RoleOperator},
	"viewer-secret": {Name: "alice", Role: RoleViewer},
}

// harness is a console Server on a real HTTP server.
type harness struct {
	t  *testing.T
	b  *fakeBackend
	s  *Server
	ts *httptest.Server
}

func newHarness(t *testing.T, b *fakeBackend, opts Options) *harness {
	t.Helper()
	if opts.MaxRateHz == 0 {
		opts.MaxRateHz = 500 // tests subscribe fast; nothing asserts timing
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	opts.ServerVersion = "test"
	h := &harness{t: t, b: b, s: New(b, testTokens, opts)}
	h.ts = httptest.NewServer(h.s.Handler())
	t.Cleanup(func() {
		h.s.Close()
		h.ts.Close()
	})
	return h
}

func (h *harness) url() string {
	return "ws" + strings.TrimPrefix(h.ts.URL, "http") + ConsolePath
}

// client is a test's end of a stream.
type client struct {
	t  *testing.T
	ws *websocket.Conn
}

// dial connects with token in the Authorization header ("" for none).
func (h *harness) dial(token string) *client {
	h.t.Helper()
	var hdr http.Header
	if token != "" {
		hdr = http.Header{"Authorization": {"Bearer " + token}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, h.url(), &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		h.t.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(64 << 20)
	h.t.Cleanup(func() { ws.CloseNow() })
	return &client{t: h.t, ws: ws}
}

func (c *client) sendRaw(typ websocket.MessageType, data string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, typ, []byte(data)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) send(f *consolepb.ClientFrame) {
	c.t.Helper()
	data, err := protojson.Marshal(f)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(websocket.MessageText, string(data))
}

// read returns the next frame or the error that ended the stream.
func (c *client) read() (*consolepb.ServerFrame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, data, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	if typ != websocket.MessageText {
		return nil, fmt.Errorf("server sent a %v frame", typ)
	}
	var f consolepb.ServerFrame
	if err := protojson.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("server frame %q: %v", data, err)
	}
	return &f, nil
}

func (c *client) next() *consolepb.ServerFrame {
	c.t.Helper()
	f, err := c.read()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

// closed reads until the stream ends and returns its close error.
func (c *client) closed() websocket.CloseError {
	c.t.Helper()
	for {
		_, err := c.read()
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !asCloseError(err, &ce) {
			c.t.Fatalf("stream ended with %v; want a close frame", err)
		}
		return ce
	}
}

func asCloseError(err error, ce *websocket.CloseError) bool {
	if websocket.CloseStatus(err) == -1 {
		return false
	}
	for e := err; e != nil; {
		if x, ok := e.(websocket.CloseError); ok {
			*ce = x
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	return false
}

func (c *client) welcome() *consolepb.Welcome {
	c.t.Helper()
	f := c.next()
	if f.GetWelcome() == nil {
		c.t.Fatalf("first frame = %v; want welcome", f)
	}
	return f.GetWelcome()
}

func (c *client) hello(token string) {
	c.send(&consolepb.ClientFrame{Body: &consolepb.ClientFrame_Hello{Hello: &consolepb.Hello{Token: token, Client: "test"}}})
}

func (c *client) subscribe(rate float64, jobs ...string) {
	c.send(&consolepb.ClientFrame{Body: &consolepb.ClientFrame_Subscribe{Subscribe: &consolepb.Subscribe{Jobs: jobs, MaxRateHz: rate}}})
}

func (c *client) command(id string, cmd *consolepb.Command) {
	c.send(&consolepb.ClientFrame{Id: id, Body: &consolepb.ClientFrame_Command{Command: cmd}})
}

// result reads frames up to the next command result (skipping stream frames).
func (c *client) result() *consolepb.CommandResult {
	c.t.Helper()
	for {
		f := c.next()
		if r := f.GetResult(); r != nil {
			return r
		}
	}
}

// snapshot reads frames up to the next snapshot.
func (c *client) snapshot() *consolepb.Snapshot {
	c.t.Helper()
	for {
		f := c.next()
		if s := f.GetSnapshot(); s != nil {
			return s
		}
		if f.GetDelta() != nil {
			c.t.Fatalf("delta %v before the snapshot", f)
		}
	}
}

// delta reads the next frame, which must be a delta.
func (c *client) delta() *consolepb.Delta {
	c.t.Helper()
	f := c.next()
	if f.GetDelta() == nil {
		c.t.Fatalf("frame %v; want a delta", f)
	}
	return f.GetDelta()
}

func job(name string, iteration int64) *consolepb.JobView {
	return &consolepb.JobView{Name: name, State: "running", Iteration: iteration}
}

func approve(job, id string) *consolepb.Command {
	return &consolepb.Command{Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{Job: job, ActionId: id}}}
}
