package pki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/pspb"
)

func TestLoadOrCreate(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v %v, want 0600", fi.Mode().Perm(), err)
	}
	again, err := LoadOrCreate(dir)
	if err != nil || Fingerprint(again.Cert) != Fingerprint(ca.Cert) {
		t.Fatalf("reload: %v, fingerprint changed", err)
	}
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(dir); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("a world-readable key was accepted: %v", err)
	}
}

func TestIdentities(t *testing.T) {
	ca, err := New("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []identity.Identity{identity.Node("mnist", "worker-3"), identity.Node("a-b", "server-0"),
		identity.Scheduler(), identity.Operator("alice")} {
		c, err := ca.Issue(id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got, err := identity.FromCertificate(c.Leaf)
		if err != nil || got != id {
			t.Errorf("%v: got %v %v", id, got, err)
		}
	}
	for _, bad := range []identity.Identity{{Job: "x", Node: "worker-1", Role: "server"}, {Job: "X", Node: "worker-1", Role: "worker"},
		{Job: "x", Node: "worker-01", Role: "worker"}, {Node: "scheduler", Role: "root"}, {Job: "x", Node: "n", Role: "operator"}} {
		if _, err := ca.Issue(bad, time.Hour); err == nil {
			t.Errorf("issued %+v", bad)
		}
	}
}

func TestBundleAndRotation(t *testing.T) {
	dir := t.TempDir()
	ca, err := New("old", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "n", "node.pem")
	if err := ca.WriteBundle(path, identity.Node("j", "worker-0"), time.Hour); err != nil {
		t.Fatal(err)
	}
	creds, err := identity.Load(path)
	if err != nil || creds.ID != identity.Node("j", "worker-0") {
		t.Fatalf("load: %v %v", creds, err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Load(path); err == nil {
		t.Fatal("a group-readable credentials file was accepted")
	}
	oldCert, _ := ca.Issue(identity.Node("j", "worker-1"), time.Hour)
	verify := func(c *CA) error {
		pool := x509.NewCertPool()
		for _, t := range c.Trusted {
			pool.AddCert(t)
		}
		_, err := oldCert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	rot, err := ca.Rotate(false)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(rot); err != nil {
		t.Errorf("after rotation an old certificate no longer verifies: %v", err)
	}
	if err := rot.Save(dir); err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile))
	if err != nil || len(loaded.Trusted) != 2 || Fingerprint(loaded.Cert) != Fingerprint(rot.Cert) {
		t.Fatalf("reload rotated: %v", err)
	}
	dropped, _ := rot.Rotate(true)
	if err := verify(dropped); err == nil {
		t.Error("after --drop-old an old certificate still verifies")
	}
}

// psServer is a parameter server that answers every allowed call with
// Unimplemented, so a test tells allowed (Unimplemented) from refused.
type psServer struct {
	pspb.UnimplementedParameterServerServer
}

// Exchange echoes ids, so that the guard sees every request of the stream.
func (psServer) Exchange(s pspb.ParameterServer_ExchangeServer) error {
	for {
		r, err := s.Recv()
		if err != nil {
			return err
		}
		if err := s.Send(&pspb.PSResponse{Id: r.Id}); err != nil {
			return err
		}
	}
}

// TestServerGuard runs a real gRPC server with a server's credentials and
// the guard, and calls it as the attacks of issue 11 would.
func TestServerGuard(t *testing.T) {
	ca, err := New("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	creds := func(id identity.Identity) *identity.Credentials {
		c, err := ca.Credentials(id, time.Hour, LocalHosts()...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	self := creds(identity.Node("a", "server-0"))
	var reported []identity.Refusal
	g := identity.NewGuard(identity.ServerPolicy(self.ID), identity.GuardOptions{Report: func(r identity.Refusal) { reported = append(reported, r) }})
	gs := grpc.NewServer(g.ServerOptionsFor(self)...)
	pspb.RegisterParameterServerServer(gs, psServer{})
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	defer gs.Stop()
	addr := lis.Addr().String()

	dial := func(opt grpc.DialOption) pspb.ParameterServerClient {
		cc, err := grpc.NewClient(addr, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return pspb.NewParameterServerClient(cc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := func(err error) codes.Code { return status.Code(err) }

	// Plaintext: no answer at all.
	if _, err := dial(grpc.WithTransportCredentials(insecure.NewCredentials())).Stats(ctx, &pspb.StatsRequest{}); code(err) != codes.Unavailable {
		t.Errorf("plaintext: %v, want Unavailable", err)
	}
	// TLS without a client certificate: the handshake fails (refused as
	// Unauthenticated, method tls-handshake), health included.
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	noCert := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))
	if _, err := dial(noCert).Stats(ctx, &pspb.StatsRequest{}); code(err) != codes.Unavailable {
		t.Errorf("no certificate: %v, want Unavailable", err)
	}
	cc, _ := grpc.NewClient(addr, noCert)
	defer cc.Close()
	if r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); code(err) != codes.Unavailable {
		t.Errorf("health without certificate: %v %v, want Unavailable", r, err)
	}
	// A certificate from another CA: the handshake fails.
	other, _ := New("other", time.Now())
	oc, _ := other.Credentials(identity.Node("a", "worker-0"), time.Hour)
	if _, err := dial(oc.DialOption(nil)).Stats(ctx, &pspb.StatsRequest{}); code(err) != codes.Unavailable {
		t.Errorf("foreign CA: %v, want Unavailable", err)
	}

	w0 := dial(creds(identity.Node("a", "worker-0")).DialOption(identity.ServerOf("a")))
	wB := dial(creds(identity.Node("b", "worker-0")).DialOption(nil))
	s1 := dial(creds(identity.Node("a", "server-1")).DialOption(nil))
	sched := dial(creds(identity.Scheduler()).DialOption(identity.ServerOf("")))
	opOpt := creds(identity.Operator("alice")).DialOption(nil)
	op := dial(opOpt)
	// Health answers any certificate of the CA.
	hc, _ := grpc.NewClient(addr, opOpt)
	defer hc.Close()
	if r, err := healthpb.NewHealthClient(hc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health with an operator's certificate: %v %v", r, err)
	}
	allowed, denied := codes.Unimplemented, codes.PermissionDenied
	for _, tt := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"worker-0 pushes as 0", func() error { _, err := w0.Push(ctx, &pspb.PSRequest{Worker: 0}); return err }, allowed},
		{"worker-0 pushes as 1", func() error { _, err := w0.Push(ctx, &pspb.PSRequest{Worker: 1}); return err }, denied},
		{"worker-0 pulls as 1", func() error { _, err := w0.Pull(ctx, &pspb.PSRequest{Worker: 1}); return err }, denied},
		{"worker-0 SetSync", func() error { _, err := w0.SetSync(ctx, &pspb.SyncSettings{}); return err }, denied},
		{"worker-0 Shutdown", func() error { _, err := w0.Shutdown(ctx, &pspb.ShutdownRequest{}); return err }, denied},
		{"worker-0 Retable", func() error { _, err := w0.Retable(ctx, &pspb.RetableRequest{}); return err }, denied},
		{"worker-0 Migrate", func() error { _, err := w0.Migrate(ctx, &pspb.MigrateRequest{}); return err }, denied},
		{"job b pushes", func() error { _, err := wB.Push(ctx, &pspb.PSRequest{Worker: 0}); return err }, denied},
		{"job b stats", func() error { _, err := wB.Stats(ctx, &pspb.StatsRequest{}); return err }, denied},
		{"server-1 migrates", func() error { _, err := s1.Migrate(ctx, &pspb.MigrateRequest{}); return err }, allowed},
		{"server-1 pushes", func() error { _, err := s1.Push(ctx, &pspb.PSRequest{}); return err }, denied},
		{"scheduler SetSync", func() error { _, err := sched.SetSync(ctx, &pspb.SyncSettings{}); return err }, allowed},
		{"scheduler Shutdown", func() error { _, err := sched.Shutdown(ctx, &pspb.ShutdownRequest{}); return err }, allowed},
		{"scheduler pushes", func() error { _, err := sched.Push(ctx, &pspb.PSRequest{}); return err }, denied},
		{"operator pulls", func() error { _, err := op.Pull(ctx, &pspb.PSRequest{}); return err }, denied},
		{"worker-0 exchange as 0 then as 1", func() error {
			s, err := w0.Exchange(ctx)
			if err != nil {
				return err
			}
			for _, w := range []int32{0, 1} {
				if err := s.Send(&pspb.PSRequest{Id: uint64(w), Worker: w}); err != nil {
					return err
				}
				if _, err = s.Recv(); err != nil {
					return err
				}
			}
			return nil
		}, denied},
	} {
		if err := tt.call(); code(err) != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
	if n := g.Refused(codes.PermissionDenied); n != 12 {
		t.Errorf("refused PermissionDenied %d times, want 12", n)
	}
	if n := g.Refused(codes.Unauthenticated); n < 1 {
		t.Errorf("refused Unauthenticated %d times, want the handshakes without a certificate", n)
	}
	if reported[0].Method != identity.HandshakeMethod || reported[0].Code != codes.Unauthenticated {
		t.Errorf("first refusal reported: %+v, want the handshake without a certificate", reported[0])
	}
	if len(reported) != 13 || reported[len(reported)-1].ID != identity.Node("a", "worker-0") {
		t.Errorf("reported %d refusals (%+v), want 13", len(reported), reported)
	}
	// A flood of the same refusal is counted, not reported again.
	for range 100 {
		if _, err := w0.SetSync(ctx, &pspb.SyncSettings{}); code(err) != codes.PermissionDenied {
			t.Fatal(err)
		}
	}
	if n := g.Refused(codes.PermissionDenied); n != 112 || len(reported) != 13 {
		t.Errorf("after 100 more: %d refused, %d reported; want 112 and still 13", n, len(reported))
	}
	// A worker refuses a server of another job.
	self2 := creds(identity.Node("b", "worker-0"))
	wrong := dial(self2.DialOption(identity.ServerOf("b")))
	if _, err := wrong.Stats(ctx, &pspb.StatsRequest{}); code(err) != codes.Unavailable {
		t.Errorf("worker of b accepted a server of a: %v", err)
	}
}
