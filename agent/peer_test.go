package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/scheduler/pki"
)

// testCA issues node credentials for the peer-service tests.
type testCA struct {
	t  *testing.T
	ca *pki.CA
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	ca, err := pki.New("agent test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{t, ca}
}

func (c *testCA) node(job, node string) *identity.Credentials {
	c.t.Helper()
	cr, err := c.ca.Credentials(identity.Node(job, node), time.Hour, "127.0.0.1")
	if err != nil {
		c.t.Fatal(err)
	}
	return cr
}

// signed is cmd as the scheduler issues it for primary to forward.
func (c *testCA) signed(cmd *agentpb.ActionCommand, primary string) *agentpb.ActionCommand {
	c.t.Helper()
	sched, err := c.ca.Credentials(identity.Scheduler(), time.Hour)
	if err != nil {
		c.t.Fatal(err)
	}
	if err := sched.SignAction(cmd, primary); err != nil {
		c.t.Fatal(err)
	}
	return cmd
}

// peerAgent is an agent serving only its peer service (no role, no
// scheduler): what it takes and what it would tell the scheduler are read
// from its state and its outbox.
func peerAgent(t *testing.T, job, node string, creds *identity.Credentials) *Agent {
	t.Helper()
	a := New(Options{Job: job, Node: node, Credentials: creds, PeerListen: "127.0.0.1:0", PeerTimeout: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var wg sync.WaitGroup
	stop := a.startPeers(&wg)
	if a.peerAddr == "" {
		t.Fatal("no peer service")
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	return a
}

// next is the next message the agent would send the scheduler.
func next(t *testing.T, a *Agent) *agentpb.AgentMessage {
	t.Helper()
	select {
	case m := <-a.outbox:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("the agent sent the scheduler nothing")
		return nil
	}
}

// nextOf skips heartbeats and acks until a message that pick accepts.
func nextOf[T any](t *testing.T, a *Agent, pick func(*agentpb.AgentMessage) (T, bool)) T {
	t.Helper()
	for {
		if v, ok := pick(next(t, a)); ok {
			return v
		}
	}
}

func refusalOf(m *agentpb.AgentMessage) (*agentpb.NodeRefusal, bool) {
	r := m.GetRefusal()
	return r, r != nil
}

func forwardedOf(m *agentpb.AgentMessage) (*agentpb.ActionForwarded, bool) {
	r := m.GetForwarded()
	return r, r != nil
}

// TestPeerServiceTrust: the peer service of an agent of job a takes a
// global action from another agent of job a (once: again, it is a
// duplicate), and refuses an agent of job b (PermissionDenied), a caller
// without a certificate (Unauthenticated), a node of its job forwarding as
// another, and a forward of a kind that only the scheduler sends. The
// guard's refusals go to the scheduler on the agent's stream (NodeRefusal).
func TestPeerServiceTrust(t *testing.T) {
	ca := newTestCA(t)
	a := peerAgent(t, "a", "worker-1", ca.node("a", "worker-1"))
	ctx := context.Background()
	dial := func(opt grpc.DialOption) agentpb.AgentPeerClient {
		cc, err := grpc.NewClient(a.peerAddr, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return agentpb.NewAgentPeerClient(cc)
	}
	fwd := func(job, node, kind, id string) *agentpb.ForwardRequest {
		return &agentpb.ForwardRequest{Job: job, Node: node, Command: ca.signed(&agentpb.ActionCommand{ActionId: id, Kind: kind,
			TargetIteration: 40, BatchSizes: map[string]int32{"worker-0": 32, "worker-1": 32}}, node)}
	}
	sameJob := dial(ca.node("a", "worker-0").DialOption(identity.NodeOf("a", "worker-1")))
	otherJob := dial(ca.node("b", "worker-0").DialOption(nil))
	pool := x509.NewCertPool()
	pool.AddCert(ca.ca.Cert)
	noCert := dial(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})))

	r, err := sameJob.Forward(ctx, fwd("a", "worker-0", "ADJUST_BS", "a-1"))
	if err != nil || r.Duplicate {
		t.Fatalf("Forward from worker-0 of job a = %v, %v; want taken", r, err)
	}
	a.mu.Lock()
	_, taken := a.taken["a-1"]
	queued := len(a.queued)
	a.mu.Unlock()
	if !taken || queued != 1 {
		t.Fatalf("after the forward: taken %v, %d queued for the role; want taken, 1 queued", taken, queued)
	}
	if r, err := sameJob.Forward(ctx, fwd("a", "worker-0", "ADJUST_BS", "a-1")); err != nil || !r.Duplicate {
		t.Errorf("the same forward again = %v, %v; want a duplicate", r, err)
	}

	for _, tt := range []struct {
		name string
		c    agentpb.AgentPeerClient
		req  *agentpb.ForwardRequest
		want codes.Code
	}{
		{"an agent of job b", otherJob, fwd("b", "worker-0", "ADJUST_BS", "b-1"), codes.PermissionDenied},
		{"an agent of job b, naming job a", otherJob, fwd("a", "worker-0", "ADJUST_BS", "b-2"), codes.PermissionDenied},
		{"no certificate", noCert, fwd("a", "worker-0", "ADJUST_BS", "a-2"), codes.Unavailable}, // refused in the handshake
		{"worker-0 as worker-2", sameJob, fwd("a", "worker-2", "ADJUST_BS", "a-3"), codes.PermissionDenied},
		{"a restart", sameJob, fwd("a", "worker-0", "KILL_RESTART", "a-4"), codes.PermissionDenied},
		{"a server's command", sameJob, fwd("a", "worker-0", "SHUTDOWN", "a-5"), codes.PermissionDenied},
	} {
		if _, err := tt.c.Forward(ctx, tt.req); status.Code(err) != tt.want {
			t.Errorf("Forward(%s) = %v; want %v", tt.name, err, tt.want)
		}
	}
	a.mu.Lock()
	for _, id := range []string{"b-1", "b-2", "a-2", "a-3", "a-4", "a-5"} {
		if _, ok := a.taken[id]; ok {
			t.Errorf("refused forward %s was taken", id)
		}
	}
	a.mu.Unlock()

	// The guard's refusals, for the scheduler's audit log: job b's two
	// calls (one report per caller and method a minute), the certificate-less
	// handshake, and worker-0's claim to be worker-2.
	var got []string
	for range 3 {
		r := nextOf(t, a, refusalOf)
		got = append(got, r.Code+" "+r.CallerJob+" "+r.Method)
	}
	sort.Strings(got)
	want := []string{"PermissionDenied a /kelpie.v1.AgentPeer/Forward", "PermissionDenied b /kelpie.v1.AgentPeer/Forward",
		"Unauthenticated  " + identity.HandshakeMethod}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("refusals reported:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPrimaryForwards: a primary agent forwards a global action to every
// secondary it names, then tells the scheduler whom it reached and whom not:
// one secondary takes it, one is not listening, and at the address of the
// third answers an agent of another job (its certificate does not name the
// node the primary was told of).
func TestPrimaryForwards(t *testing.T) {
	ca := newTestCA(t)
	s1 := peerAgent(t, "a", "worker-1", ca.node("a", "worker-1"))
	impostor := peerAgent(t, "b", "worker-3", ca.node("b", "worker-3"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	p := New(Options{Job: "a", Node: "worker-0", Credentials: ca.node("a", "worker-0"), PeerTimeout: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.forwardLoop(ctx) }()
	defer func() { cancel(); <-done }()

	cmd := ca.signed(&agentpb.ActionCommand{ActionId: "a-7", Kind: "ADJUST_BS", TargetIteration: 50,
		BatchSizes: map[string]int32{"worker-0": 16, "worker-1": 16, "worker-2": 16, "worker-3": 16}}, "worker-0")
	cmd.Primary = true
	cmd.Peers = []*agentpb.PeerAddr{{Peer: "worker-1", Addr: s1.peerAddr}, {Peer: "worker-2", Addr: closed},
		{Peer: "worker-3", Addr: impostor.peerAddr}}
	if !p.take(cmd) {
		t.Fatal("the primary did not take its command")
	}
	rep := nextOf(t, p, forwardedOf)
	if rep.ActionId != "a-7" || len(rep.Reached) != 1 || rep.Reached[0] != "worker-1" {
		t.Errorf("reached %v (action %s); want worker-1 (a-7)", rep.Reached, rep.ActionId)
	}
	var unreached []string
	for _, u := range rep.Unreached {
		unreached = append(unreached, u.Peer)
		if !strings.HasPrefix(u.Error, "Unavailable") {
			t.Errorf("%s: %q; want Unavailable", u.Peer, u.Error)
		}
	}
	if strings.Join(unreached, ",") != "worker-2,worker-3" {
		t.Errorf("unreached %v; want worker-2, worker-3", unreached)
	}
	s1.mu.Lock()
	var got *agentpb.ActionCommand
	if len(s1.queued) == 1 {
		got = s1.queued[0]
	}
	s1.mu.Unlock()
	if got == nil || got.ActionId != "a-7" || got.TargetIteration != 50 || got.Primary || len(got.Peers) != 0 || got.BatchSizes["worker-1"] != 16 {
		t.Errorf("worker-1 holds %v for its role; want a-7 at iteration 50, as a secondary", got)
	}
	impostor.mu.Lock()
	n := len(impostor.taken)
	impostor.mu.Unlock()
	if n != 0 {
		t.Errorf("the agent of job b took %d actions", n)
	}
}

// TestAttackRow9: server-0's certificate forwards a made-up ADJUST_BS to
// worker-1's agent; worker-0, a member of the job but not the primary the
// scheduler designated, forwards a command the scheduler signed for
// worker-2; worker-0 forwards one the scheduler signed for it but with the
// batch sizes changed. Each is refused (PermissionDenied) and reported to
// the scheduler for its audit log, and worker-1 applies none; the command
// the scheduler signed, forwarded by its designated primary, is taken.
func TestAttackRow9(t *testing.T) {
	ca := newTestCA(t)
	a := peerAgent(t, "a", "worker-1", ca.node("a", "worker-1"))
	ctx := context.Background()
	dial := func(c *identity.Credentials) agentpb.AgentPeerClient {
		cc, err := grpc.NewClient(a.peerAddr, c.DialOption(identity.NodeOf("a", "worker-1")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return agentpb.NewAgentPeerClient(cc)
	}
	adjust := func(id string) *agentpb.ActionCommand {
		return &agentpb.ActionCommand{ActionId: id, Kind: "ADJUST_BS", TargetIteration: 1, BatchSizes: map[string]int32{"worker-0": 1, "worker-1": 63}}
	}
	server, w0 := dial(ca.node("a", "server-0")), dial(ca.node("a", "worker-0"))
	tampered := ca.signed(adjust("a-3"), "worker-0")
	tampered.BatchSizes["worker-1"] = 64
	for _, tt := range []struct {
		name string
		c    agentpb.AgentPeerClient
		req  *agentpb.ForwardRequest
	}{
		{"server-0's made-up ADJUST_BS", server, &agentpb.ForwardRequest{Job: "a", Node: "server-0", Command: adjust("a-1")}},
		{"worker-0 forwards worker-2's action", w0, &agentpb.ForwardRequest{Job: "a", Node: "worker-0", Command: ca.signed(adjust("a-2"), "worker-2")}},
		{"worker-0 forwards a changed action", w0, &agentpb.ForwardRequest{Job: "a", Node: "worker-0", Command: tampered}},
	} {
		if _, err := tt.c.Forward(ctx, tt.req); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: %v, want PermissionDenied", tt.name, err)
		}
	}
	a.mu.Lock()
	taken := len(a.taken)
	a.mu.Unlock()
	if taken != 0 {
		t.Errorf("worker-1's agent took %d refused actions", taken)
	}
	// Reported for the audit log: one per caller and method a minute.
	got := map[string]bool{}
	for range 2 {
		r := nextOf(t, a, refusalOf)
		got[r.Caller+" "+r.Code] = true
		if !strings.Contains(r.Reason, "signed") && !strings.Contains(r.Reason, "to forward") {
			t.Errorf("refusal reason %q", r.Reason)
		}
	}
	for _, want := range []string{"kelpie://a/server-0 (server) PermissionDenied", "kelpie://a/worker-0 (worker) PermissionDenied"} {
		if !got[want] {
			t.Errorf("refusals reported %v, want %s", got, want)
		}
	}
	// The real thing: signed for worker-0, forwarded by worker-0.
	if r, err := w0.Forward(ctx, &agentpb.ForwardRequest{Job: "a", Node: "worker-0", Command: ca.signed(adjust("a-4"), "worker-0")}); err != nil || r.Duplicate {
		t.Errorf("the scheduler's action from its primary: %v, %v; want taken", r, err)
	}
}
