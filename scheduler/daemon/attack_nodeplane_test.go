package daemon

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/pki"
)

// The node plane's rows of issue 24's attack table, against an in-process
// scheduler on 127.0.0.1. The quick part of each runs in `make test`; with
// KELPIE_ATTACK_FULL=1 (`make attack`) each runs at the table's scale.

// attackFull and size (attack_console_test.go) pick the scale.

// attackScheduler starts a scheduler with a node plane CA and no launcher.
func attackScheduler(t *testing.T, lim identity.Limits) *Daemon {
	t.Helper()
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), NoLaunch: true, NodePlaneLimits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(true) })
	return d
}

// clientTLS is a TLS client configuration for the scheduler's node plane:
// with id's certificate, or none (a stranger).
func clientTLS(t *testing.T, d *Daemon, id *identity.Identity) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(d.CA().Cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13}
	if id != nil {
		c, err := d.CA().Credentials(*id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c.Cert}
	}
	return cfg
}

// selfRSS is this process's resident set (MiB), open fds and goroutines.
func selfRSS(t *testing.T) (rssMiB, fds, goroutines int) {
	t.Helper()
	s, ok := sampleProc(os.Getpid())
	if !ok {
		t.Fatal("no /proc/self")
	}
	return s.rssKB >> 10, s.fds, runtime.NumGoroutine()
}

// heldBody is one gRPC request of a message of size bytes (a
// RegisterRequest whose addr fills it) sent but for its last byte, then
// held until release: what a peer does to make a server buffer messages.
// It is generated, so the attacker's own memory stays small.
type heldBody struct {
	head    []byte
	size    int64 // the message's bytes after the 5-byte gRPC prefix
	off     int64
	sent    *atomic.Int64
	release <-chan struct{}
}

func newHeldBody(size int, sent *atomic.Int64, release <-chan struct{}) *heldBody {
	l := size - 2
	for 1+len(binary.AppendUvarint(nil, uint64(l)))+l > size {
		l--
	}
	head := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(head[1:], uint32(1+len(binary.AppendUvarint(nil, uint64(l)))+l))
	head = append(head, 0x22) // field 4 (addr), length-delimited
	head = binary.AppendUvarint(head, uint64(l))
	return &heldBody{head: head, size: int64(5 + 1 + len(binary.AppendUvarint(nil, uint64(l))) + l), sent: sent, release: release}
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.off >= b.size-1 {
		<-b.release
		return 0, io.ErrUnexpectedEOF
	}
	n := 0
	for n < len(p) && b.off < b.size-1 {
		if b.off < int64(len(b.head)) {
			p[n] = b.head[b.off]
		} else {
			p[n] = 'a'
		}
		n++
		b.off++
	}
	b.sent.Add(int64(n))
	return n, nil
}

// holdMessages sends streams messages of size bytes to method over one
// HTTP/2 connection with cfg, each held before its last byte; it returns
// the bytes sent so far, the streams' outcomes (an error, or the gRPC
// status the server answered before the body was in), and what ends them.
func holdMessages(ctx context.Context, addr string, cfg *tls.Config, method string, streams, size int) (sent *atomic.Int64, done <-chan error, stop func()) {
	sent = new(atomic.Int64)
	release := make(chan struct{})
	out := make(chan error, streams)
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true, MaxConnsPerHost: 1,
		HTTP2: &http.HTTP2Config{StrictMaxConcurrentRequests: true}}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	for range streams {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+addr+method, newHeldBody(size, sent, release))
			req.Header.Set("content-type", "application/grpc")
			req.Header.Set("te", "trailers")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				out <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code := resp.Header.Get("grpc-status")
			if code == "" {
				code = resp.Trailer.Get("grpc-status")
			}
			out <- fmt.Errorf("grpc-status %s: %s%s", code, resp.Header.Get("grpc-message"), resp.Trailer.Get("grpc-message"))
		}()
	}
	var once sync.Once
	return sent, out, func() {
		once.Do(func() {
			close(release)
			tr.CloseIdleConnections()
		})
	}
}

// TestAttackRow1: a peer without a client certificate sends large gRPC
// messages and holds them before their last byte. The scheduler must not
// buffer them: the TLS handshake refuses the peer (counted and audited),
// and a peer with a certificate is refused a message over the node plane's
// few MiB from its length prefix, before its body is read. The scheduler's
// RSS stays within bounds before, during and after.
func TestAttackRow1(t *testing.T) {
	d := attackScheduler(t, identity.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	streams := size(3, 8)
	const size = 60<<20 - 1
	rss0, fds0, g0 := selfRSS(t)
	w0 := identity.Node("victim", "worker-0")
	for _, c := range []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"no client certificate", clientTLS(t, d, nil), ""},               // the connection is closed in the handshake
		{"worker-0's certificate", clientTLS(t, d, &w0), "grpc-status 8"}, // ResourceExhausted
	} {
		sent, done, stop := holdMessages(ctx, d.GRPCAddr(), c.cfg, "/kelpie.v1.Coordinator/Register", streams, size)
		var errs []error
		for len(errs) < streams {
			select {
			case err := <-done:
				errs = append(errs, err)
				continue
			case <-time.After(20 * time.Millisecond):
			}
			if sent.Load() >= int64(streams)*(size+5-1) || ctx.Err() != nil {
				break // every message is in, held
			}
		}
		rss, _, _ := selfRSS(t)
		stop()
		t.Logf("%s: %d of %d streams answered; %d MiB sent; RSS %d → %d MiB", c.name, len(errs), streams, sent.Load()>>20, rss0, rss)
		if len(errs) < streams {
			t.Errorf("%s: %d of %d streams of %d MiB held by the scheduler (%d MiB sent), want every one refused", c.name, streams-len(errs), streams, size>>20, sent.Load()>>20)
		}
		for _, err := range errs {
			if err == nil || (c.want == "") != !bytes.HasPrefix([]byte(err.Error()), []byte("grpc-status")) ||
				!bytes.Contains([]byte(err.Error()), []byte(c.want)) {
				t.Errorf("%s: stream ended with %v, want %q", c.name, err, c.want)
				break
			}
		}
		if rss > rss0+64 {
			t.Errorf("%s: RSS %d MiB while %d messages of %d MiB were held, %d MiB before", c.name, rss, streams, size>>20, rss0)
		}
	}
	if n := d.NodePlaneRefused(codes.Unauthenticated); n == 0 {
		t.Error("the certificate-less handshakes were not counted as refusals")
	}
	// The handshake refusal is audited (rate limited: once per address).
	evs, _ := d.Manager.EventsSince(0, 1000)
	var audited int
	for _, e := range evs {
		if e.Kind == "audit" && bytes.Contains([]byte(e.Message), []byte(identity.HandshakeMethod)) {
			audited++
		}
	}
	if audited != 1 {
		t.Errorf("%d audit records of refused handshakes, want 1 (rate limited per address)", audited)
	}
	settle(t, fds0, g0, rss0)
}

// settle waits (bounded) for the fds and goroutines to come back near where
// they were, and checks the RSS did too.
func settle(t *testing.T, fds0, g0, rss0 int) {
	t.Helper()
	var rss, fds, g int
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rss, fds, g = selfRSS(t)
		if (fds <= fds0+8 && g <= g0+20) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("after: RSS %d MiB (%d before), fds %d (%d), goroutines %d (%d)", rss, rss0, fds, fds0, g, g0)
	if fds > fds0+8 || g > g0+20 {
		t.Errorf("after the attack: %d fds (%d before), %d goroutines (%d before)", fds, fds0, g, g0)
	}
	if rss > rss0+64 {
		t.Errorf("after the attack: RSS %d MiB, %d MiB before", rss, rss0)
	}
}

// TestAttackRow13: half-open TLS connections are closed within the
// handshake timeout, a peer without a certificate cannot open a stream at
// all, and a peer with one cannot hold more streams on a connection than
// the limit: the rest are refused before a handler (and its goroutine)
// exists.
func TestAttackRow13(t *testing.T) {
	lim := identity.Limits{HandshakeTimeout: time.Second}
	d := attackScheduler(t, lim)
	rss0, fds0, g0 := selfRSS(t)

	// Half-open connections: TCP, and nothing (or half a ClientHello).
	half := size(200, 2000)
	conns := make([]net.Conn, 0, half)
	for i := range half {
		c, err := net.Dial("tcp", d.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // a ClientHello's first bytes
		}
		conns = append(conns, c)
	}
	closed := 0
	// The server closes them after lim.HandshakeTimeout (grpc's default
	// held them 120 s); 30 s is the generous bound of this test.
	deadline := time.Now().Add(30 * time.Second)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if _, err := io.Copy(io.Discard, c); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
		c.Close()
	}
	if closed != half {
		t.Errorf("%d of %d half-open connections closed by the scheduler within 30 s (handshake timeout %v)", closed, half, lim.HandshakeTimeout)
	}

	// Health.Watch without a certificate: no stream at all.
	streams := size(2000, 10000)
	if opened, refused, _, err := watchStreams(t, d, nil, streams); err == nil || opened > 0 {
		t.Errorf("Health.Watch without a certificate: %d streams opened (%d refused), %v; want the handshake refused", opened, refused, err)
	}
	// With an operator's certificate: at most the stream limit at once.
	op := identity.Operator("mallory")
	opened, refused, g, err := watchStreams(t, d, &op, streams)
	t.Logf("Health.Watch with a certificate: %d opened, %d refused (%v); goroutines %d → %d", opened, refused, err, g0, g)
	if max := int(identity.DefaultLimits().MaxStreams); opened > max {
		t.Errorf("%d Health.Watch streams open on one connection, want at most %d", opened, max)
	}
	if g > g0+3*int(identity.DefaultLimits().MaxStreams)+50 {
		t.Errorf("%d goroutines with %d streams asked for on one connection, %d before", g, streams, g0)
	}
	settle(t, fds0, g0, rss0)
}

// watchStreams opens one TLS connection with id's certificate (nil: none)
// and asks for n Health.Watch streams on it at once, speaking HTTP/2
// itself (a gRPC client would queue the streams over the limit); it counts
// the streams the server answered (opened) and reset (refused) and the
// goroutines while they are, and closes the connection.
func watchStreams(t *testing.T, d *Daemon, id *identity.Identity, n int) (opened, refused, goroutines int, err error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", d.GRPCAddr(), clientTLS(t, d, id))
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		return 0, 0, 0, err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}); err != nil {
		return 0, 0, 0, err
	}
	if err := fr.WriteWindowUpdate(0, 1<<30); err != nil {
		return 0, 0, 0, err
	}
	// The reader: answers the server's settings and pings, counts streams.
	type result struct{ opened, refused int }
	res := make(chan result, 1)
	readErr := make(chan error, 1)
	var wmu sync.Mutex
	go func() {
		seen := map[uint32]bool{}
		var r result
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				res <- r
				readErr <- err
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					wmu.Lock()
					_ = fr.WriteSettingsAck()
					wmu.Unlock()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					wmu.Lock()
					_ = fr.WritePing(true, f.Data)
					wmu.Unlock()
				}
			case *http2.HeadersFrame:
				if !seen[f.StreamID] {
					seen[f.StreamID] = true
					r.opened++
				}
			case *http2.RSTStreamFrame:
				if !seen[f.StreamID] {
					seen[f.StreamID] = true
					r.refused++
				}
			}
			if r.opened+r.refused == n {
				res <- r
				readErr <- nil
				return
			}
		}
	}()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", "/grpc.health.v1.Health/Watch"},
		{":authority", "127.0.0.1"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	var werr error
	for i := range n {
		id := uint32(2*i + 1)
		wmu.Lock()
		werr = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		if werr == nil {
			werr = fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}) // an empty HealthCheckRequest
		}
		wmu.Unlock()
		if werr != nil {
			break
		}
	}
	r := <-res
	if err := <-readErr; err != nil && werr == nil {
		werr = err
	}
	_, _, g := selfRSS(t)
	return r.opened, r.refused, g, werr
}

// nodeClient dials the scheduler's node plane as id.
func nodeClient(t *testing.T, d *Daemon, id identity.Identity) coordinatorpb.CoordinatorClient {
	t.Helper()
	c, err := d.CA().Credentials(id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(d.GRPCAddr(), c.DialOption(identity.IsScheduler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return coordinatorpb.NewCoordinatorClient(cc)
}

// registerAs registers node of job with its own certificate.
func registerAs(ctx context.Context, t *testing.T, d *Daemon, job, node string) coordinatorpb.CoordinatorClient {
	t.Helper()
	c := nodeClient(t, d, identity.Node(job, node))
	role := coordinatorpb.Role_ROLE_WORKER
	if strings.HasPrefix(node, "server-") {
		role = coordinatorpb.Role_ROLE_SERVER
	}
	if _, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: job, Node: node, Role: role, Addr: "127.0.0.1:1"}); err != nil {
		t.Fatalf("register %s: %v", node, err)
	}
	return c
}

// memberSpec is a job whose members the node-plane rows register by hand.
const memberSpec = `
name: victim
model: {kind: softmax}
data: {kind: mnist, epochs: 1}
cluster: {servers: 1, workers: 2}
`

// TestAttackRow8: a member of the job pushes NaN so server-0 diverges; a
// worker reports the divergence naming server-0. The report is judged by
// who sends it (worker-0, a member of the job), not by the node where the
// divergence was seen: the job ends `diverged`, and nothing is refused or
// audited as an attack. A divergence blamed on a node that is no member
// of the job is refused.
func TestAttackRow8(t *testing.T) {
	d := attackScheduler(t, identity.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name, err := d.Manager.Submit(memberSpec, "test")
	if err != nil {
		t.Fatal(err)
	}
	registerAs(ctx, t, d, name, "server-0")
	w0 := registerAs(ctx, t, d, name, "worker-0")
	report := func(at string) error {
		_, err := w0.Diverged(ctx, &coordinatorpb.DivergedRequest{Job: name, Node: "worker-0", Divergence: &coordinatorpb.Divergence{
			Node: at, Iteration: 7, What: "parameters", Value: "NaN", Detail: "block 0, element 3"}})
		return err
	}
	if err := report("server-7"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a divergence at server-7 (no member): %v, want InvalidArgument", err)
	}
	if err := report("server-0"); err != nil {
		t.Fatalf("worker-0 reports server-0's divergence: %v", err)
	}
	res, err := d.Manager.Wait(ctx, name)
	if res == nil || res.Diverged == nil || res.Diverged.Node != "server-0" || res.Diverged.Reporter != "worker-0" {
		t.Fatalf("job after the report: %+v, %v; want diverged at server-0, reported by worker-0", res, err)
	}
	if !strings.Contains(fmt.Sprint(err), "diverged") {
		t.Errorf("job's error %v, want diverged", err)
	}
	if n := d.NodePlaneRefused(codes.PermissionDenied); n != 0 {
		t.Errorf("%d node-plane calls refused, want none", n)
	}
	evs, _ := d.Manager.EventsSince(0, 1000)
	for _, e := range evs {
		if e.Kind == "audit" && !e.Allowed {
			t.Errorf("audited as refused: %s", e.Message)
		}
	}
}

// TestAttackRow12: a node's forwarded refusal report names an operator as
// the caller, a foreign address and a 1970 timestamp. The audit record is
// the reporting node's, at the scheduler's time, with the node's words
// shown as its claim (control characters stripped); the metric's labels
// take no made-up method.
func TestAttackRow12(t *testing.T) {
	var got []console.AuditEntry
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	np, err := newNodePlane(Config{DataDir: t.TempDir(), GRPC: "127.0.0.1:0"}, func(e console.AuditEntry) error {
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	np.clk = clock.WithNow(clock.Real(), func() time.Time { return now })
	np.nodeRefusal("joba", "server-0", &agentpb.NodeRefusal{UnixNano: 1, Addr: "10.6.6.6:1", Caller: "kelpie://_/operator/olga (operator)",
		Method: "/kelpie.v1.ParameterServer/Pull\x1b]0;pwned\x07", Code: "PermissionDenied", Reason: "approved by \x1b[2Kolga"})
	if len(got) != 1 {
		t.Fatalf("%d audit records, want 1", len(got))
	}
	e := got[0]
	if e.Who != "kelpie://joba/server-0 (server)" || e.Role != identity.RoleServer {
		t.Errorf("record attributed to %q (%s), want the reporting node kelpie://joba/server-0", e.Who, e.Role)
	}
	if !e.Time.Equal(now) {
		t.Errorf("record at %v, want the scheduler's time %v", e.Time, now)
	}
	if !strings.Contains(e.Detail, "as claimed by server-0: caller kelpie://_/operator/olga (operator)") || !strings.Contains(e.Detail, "10.6.6.6") {
		t.Errorf("detail %q does not show the node's claim as one", e.Detail)
	}
	for _, s := range []string{e.Detail, e.Reason} {
		if strings.ContainsAny(s, "\x1b\x07") {
			t.Errorf("control characters kept: %q", s)
		}
	}
	var m dto.Metric
	if err := np.refused.WithLabelValues("PermissionDenied", "other").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		n := m.GetCounter().GetValue()
		t.Errorf("refusals counted under method \"other\": %v, want 1 (the made-up method)", n)
	}
}

// TestAttackRow10: credentials issued to a node of job "joba" before it was
// resubmitted under the same name are refused by the new instance: its
// agent stream and coordinator calls at the scheduler, a pull at its
// parameter server (gRPC: the server's policy; framed: the instance's
// secret), while the new instance's own credentials are accepted.
func TestAttackRow10(t *testing.T) {
	d := attackScheduler(t, identity.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spec := strings.Replace(memberSpec, "name: victim", "name: joba", 1)
	issue := func() (*identity.Credentials, string) {
		uid := d.Manager.JobInstance("joba")
		path, err := d.np.nodeCert("joba", uid, "worker-0")
		if err != nil {
			t.Fatal(err)
		}
		c, err := identity.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return c, uid
	}
	if _, err := d.Manager.Submit(spec, "test"); err != nil {
		t.Fatal(err)
	}
	old, oldUID := issue()
	if err := d.Manager.Kill("joba", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Manager.Wait(ctx, "joba"); err == nil {
		t.Fatal("the killed job completed")
	}
	if _, err := d.Manager.Submit(spec, "test"); err != nil {
		t.Fatal(err)
	}
	cur, curUID := issue()
	if oldUID == curUID || old.ID.Instance != oldUID || cur.ID.Instance != curUID {
		t.Fatalf("instances: %q then %q; certificates name %q and %q", oldUID, curUID, old.ID.Instance, cur.ID.Instance)
	}
	// kelpie certs issue reads the instance here.
	if b, err := os.ReadFile(pki.InstancePath(filepath.Dir(d.np.certDir), "joba")); err != nil || strings.TrimSpace(string(b)) != curUID {
		t.Errorf("the data dir's instance of joba: %q, %v; want %s", b, err, curUID)
	}

	dial := func(c *identity.Credentials) *grpc.ClientConn {
		cc, err := grpc.NewClient(d.GRPCAddr(), c.DialOption(identity.IsScheduler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	stream := func(c *identity.Credentials) error {
		s, err := agentpb.NewAgentClient(dial(c)).Connect(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Hello{Hello: &agentpb.AgentHello{
			Job: "joba", Node: "worker-0", Role: coordinatorpb.Role_ROLE_WORKER}}}); err != nil {
			return err
		}
		// The scheduler answers a hello with nothing until it has a
		// command: a refusal ends the stream, an accepted stream stays.
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		errc := make(chan error, 1)
		go func() { _, err := s.Recv(); errc <- err }()
		select {
		case err := <-errc:
			return err
		case <-rctx.Done():
			return nil
		}
	}
	register := func(c *identity.Credentials) error {
		_, err := coordinatorpb.NewCoordinatorClient(dial(c)).Register(ctx, &coordinatorpb.RegisterRequest{Job: "joba", Node: "worker-0",
			Role: coordinatorpb.Role_ROLE_WORKER, Addr: "127.0.0.1:1"})
		return err
	}
	if err := stream(old); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the earlier instance's agent stream: %v, want PermissionDenied", err)
	}
	if err := register(old); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the earlier instance's Register: %v, want PermissionDenied", err)
	}
	if err := register(cur); err != nil {
		t.Errorf("the current instance's Register: %v", err)
	}
	if err := stream(cur); err != nil && status.Code(err) == codes.PermissionDenied {
		t.Errorf("the current instance's agent stream: %v", err)
	}

	// At the new instance's parameter server: its policy refuses the
	// earlier instance's worker, and its data-plane secret is another.
	server := identity.Node("joba", "server-0").ForInstance(curUID)
	if err := identity.ServerPolicy(server)(old.ID, "/kelpie.v1.ParameterServer/Pull", nil); err == nil {
		t.Error("the new instance's server lets the earlier instance's worker pull")
	}
	if err := identity.ServerPolicy(server)(cur.ID, "/kelpie.v1.ParameterServer/Pull", nil); err != nil {
		t.Errorf("the new instance's server refuses its own worker: %v", err)
	}
	// The framed data plane admits a connection that proves the job's
	// secret (runtime/framing's TestHandshake refuses every other): the new
	// instance's secret must be its own, another than the earlier one's.
	if len(cur.JobSecret) < 16 || bytes.Equal(cur.JobSecret, old.JobSecret) {
		t.Errorf("the new instance's data-plane secret (%d bytes) is not a fresh one: equal to the earlier instance's: %v",
			len(cur.JobSecret), bytes.Equal(cur.JobSecret, old.JobSecret))
	}
}

// TestAttackNodePlaneTogether: rows 1 and 13 at once — held messages
// without a certificate, oversized ones with one, half-open connections,
// a connection full of Health.Watch streams — while a worker of a job
// registers and reports its progress: the worker's calls succeed, and the
// process (scheduler and attackers together) stays under twice its idle
// RSS (the console port's rows are the console's tests).
func TestAttackNodePlaneTogether(t *testing.T) {
	d := attackScheduler(t, identity.Limits{HandshakeTimeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, err := d.Manager.Submit(memberSpec, "test")
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	idle, fds0, g0 := selfRSS(t)

	var wg sync.WaitGroup
	stops := make(chan func(), 2)
	w0 := identity.Node(name, "worker-0")
	for _, cfg := range []*tls.Config{clientTLS(t, d, nil), clientTLS(t, d, &w0)} {
		_, done, stop := holdMessages(ctx, d.GRPCAddr(), cfg, "/kelpie.v1.Coordinator/Register", size(3, 8), 60<<20-1)
		stops <- stop
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range size(3, 8) {
				select {
				case <-done:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	var half []net.Conn
	for range size(200, 2000) {
		if c, err := net.Dial("tcp", d.GRPCAddr()); err == nil {
			half = append(half, c)
		}
	}
	op := identity.Operator("mallory")
	watched := make(chan int, 1)
	go func() {
		opened, _, _, _ := watchStreams(t, d, &op, size(2000, 10000))
		watched <- opened
	}()

	// A worker of the job, meanwhile: it registers, its agent connects and
	// reports, it fetches a shard.
	c := registerAs(ctx, t, d, name, "worker-0")
	wc, err := d.CA().Credentials(w0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(d.GRPCAddr(), wc.DialOption(identity.IsScheduler))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s, err := agentpb.NewAgentClient(cc).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Hello{Hello: &agentpb.AgentHello{
		Job: name, Node: "worker-0", Role: coordinatorpb.Role_ROLE_WORKER}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.Send(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Report{Report: &coordinatorpb.ProgressReport{
			Job: name, Node: "worker-0", Iteration: int64(i + 1), Samples: 32, BatchSize: 32}}}); err != nil {
			t.Errorf("worker-0's report %d during the attacks: %v", i, err)
		}
	}
	if _, err := c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: name, Node: "worker-0"}); err != nil {
		t.Errorf("worker-0's FetchShard during the attacks: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		evs, _ := d.Manager.EventsSince(0, 1000)
		connected := false
		for _, e := range evs {
			connected = connected || strings.Contains(e.Message, "agent of worker-0 connected")
		}
		if connected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("worker-0's agent stream was not accepted during the attacks")
		}
	}
	wg.Wait()
	during, _, _ := selfRSS(t)
	if n := <-watched; n > int(identity.DefaultLimits().MaxStreams) {
		t.Errorf("%d Health.Watch streams on one connection", n)
	}
	close(stops)
	for stop := range stops {
		stop()
	}
	for _, c := range half {
		c.Close()
	}
	cc.Close()
	t.Logf("RSS idle %d MiB, during the attacks %d MiB", idle, during)
	if during > 2*idle {
		t.Errorf("RSS %d MiB during the attacks, idle %d MiB: want under twice", during, idle)
	}
	settle(t, fds0, g0, idle)
}
