package systest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/scheduler/daemon"
)

// attackSpec runs long enough (worker-0 sleeps 10 ms an iteration) for the
// attacks to meet a live job.
const attackSpec = `
name: victim
model: {kind: softmax}
data: {kind: mnist, epochs: 1, batches_per_shard: 10, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 1, workers: 2, block_bytes: 32768}
sync: {model: bsp}
stragglers:
  - {node: worker-0, kind: compute, sleep: 10ms, intensity: 1, probability: 1}
`

// TestAttacks repeats the attacks of issue 11 against a live job, as a
// process on the same machine would: each is refused, counted and audited,
// and the job then completes with exact shards and its normal accuracy.
func TestAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	dataDir := t.TempDir()
	d, err := daemon.Start(daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dataDir, Tokens: writeTokens(t),
		Exe: kelpieBin, NodeLog: logWriter{t}, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name, err := d.Manager.Submit(attackSpec, "test")
	if err != nil {
		t.Fatal(err)
	}

	// Wait for the server's address and worker-1's agent's peer service:
	// the job is live.
	var serverAddr, peerAddr string
	for serverAddr == "" || peerAddr == "" {
		if j, ok := d.Manager.Coordinator().Job(name); ok {
			if a := j.ServerAddrs(); len(a) == 1 && a[0] != "" {
				serverAddr = a[0]
			}
		}
		peerAddr, _ = d.Manager.AgentPeerAddr(name, "worker-1")
		select {
		case <-ctx.Done():
			t.Fatal("no server address")
		case <-time.After(50 * time.Millisecond):
		}
	}

	ca := d.CA()
	creds := func(id identity.Identity) *identity.Credentials {
		c, err := ca.Credentials(id, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dial := func(addr string, opt grpc.DialOption) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	noCert := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))
	w0 := creds(identity.Node(name, "worker-0")).DialOption(nil)
	otherJob := creds(identity.Node("other", "worker-0")).DialOption(nil)

	sched := func(opt grpc.DialOption) coordinatorpb.CoordinatorClient {
		return coordinatorpb.NewCoordinatorClient(dial(d.GRPCAddr(), opt))
	}
	ps := func(opt grpc.DialOption) pspb.ParameterServerClient {
		return pspb.NewParameterServerClient(dial(serverAddr, opt))
	}
	peers := func(opt grpc.DialOption) agentpb.AgentPeerClient {
		return agentpb.NewAgentPeerClient(dial(peerAddr, opt))
	}
	forward := func(opt grpc.DialOption, job, node, kind string) error {
		_, err := peers(opt).Forward(ctx, &agentpb.ForwardRequest{Job: job, Node: node, Command: &agentpb.ActionCommand{
			ActionId: "attack-" + kind, Kind: kind, TargetIteration: 1, BatchSizes: map[string]int32{"worker-0": 1, "worker-1": 63}}})
		return err
	}
	fetchAs := func(c coordinatorpb.CoordinatorClient, job, node string) error {
		_, err := c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: job, Node: node})
		return err
	}
	for _, a := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"plaintext FetchShard at the scheduler", func() error { return fetchAs(sched(plain), name, "worker-0") }, codes.Unavailable},
		// Without a client certificate the TLS handshake fails: no call.
		{"certificate-less FetchShard at the scheduler", func() error { return fetchAs(sched(noCert), name, "worker-0") }, codes.Unavailable},
		{"job other's certificate fetches in the job", func() error { return fetchAs(sched(otherJob), name, "worker-0") }, codes.PermissionDenied},
		{"worker-0 fetches as worker-1", func() error { return fetchAs(sched(w0), name, "worker-1") }, codes.PermissionDenied},
		{"worker-0 reports shards as worker-1", func() error {
			_, err := sched(w0).ReportShard(ctx, &coordinatorpb.ReportShardRequest{Job: name, Node: "worker-1", Ids: []int64{0, 1, 2}})
			return err
		}, codes.PermissionDenied},
		{"worker-0 registers as a server", func() error {
			_, err := sched(w0).Register(ctx, &coordinatorpb.RegisterRequest{Job: name, Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER, Addr: "127.0.0.1:1"})
			return err
		}, codes.PermissionDenied},
		{"worker-0's agent stream as worker-1", func() error {
			s, err := agentpb.NewAgentClient(dial(d.GRPCAddr(), w0)).Connect(ctx)
			if err != nil {
				return err
			}
			if err := s.Send(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Hello{Hello: &agentpb.AgentHello{
				Job: name, Node: "worker-1", Role: coordinatorpb.Role_ROLE_WORKER}}}); err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, codes.PermissionDenied},
		{"plaintext Pull at the server", func() error {
			_, err := ps(plain).Pull(ctx, &pspb.PSRequest{Worker: 0})
			return err
		}, codes.Unavailable},
		{"certificate-less Pull at the server", func() error {
			_, err := ps(noCert).Pull(ctx, &pspb.PSRequest{Worker: 0})
			return err
		}, codes.Unavailable},
		{"worker-0 pushes as worker-1", func() error {
			_, err := ps(w0).Push(ctx, &pspb.PSRequest{Worker: 1, Op: pspb.Op_OP_PUSH})
			return err
		}, codes.PermissionDenied},
		{"worker-0 SetSync asp", func() error {
			_, err := ps(w0).SetSync(ctx, &pspb.SyncSettings{})
			return err
		}, codes.PermissionDenied},
		{"worker-0 Shutdown", func() error {
			_, err := ps(w0).Shutdown(ctx, &pspb.ShutdownRequest{Reason: "attack"})
			return err
		}, codes.PermissionDenied},
		{"worker-0 Retable", func() error {
			_, err := ps(w0).Retable(ctx, &pspb.RetableRequest{})
			return err
		}, codes.PermissionDenied},
		{"worker-0 Migrate", func() error {
			_, err := ps(w0).Migrate(ctx, &pspb.MigrateRequest{})
			return err
		}, codes.PermissionDenied},
		{"job other's certificate pulls", func() error {
			_, err := ps(otherJob).Pull(ctx, &pspb.PSRequest{Worker: 0})
			return err
		}, codes.PermissionDenied},
		// An agent's peer service, where a primary agent forwards a global
		// action: only an agent of the job may call it, and only with a
		// global action.
		{"plaintext forward to worker-1's agent", func() error { return forward(plain, name, "worker-0", "ADJUST_BS") }, codes.Unavailable},
		{"certificate-less forward to worker-1's agent", func() error { return forward(noCert, name, "worker-0", "ADJUST_BS") }, codes.Unavailable},
		{"job other's agent forwards to worker-1's agent", func() error { return forward(otherJob, "other", "worker-0", "ADJUST_BS") }, codes.PermissionDenied},
		{"worker-0 forwards a restart to worker-1's agent", func() error { return forward(w0, name, "worker-0", "KILL_RESTART") }, codes.PermissionDenied},
		// A global action the scheduler did not sign (issue 24, row 9).
		{"server-0 forwards a made-up ADJUST_BS to worker-1's agent", func() error {
			return forward(creds(identity.Node(name, "server-0")).DialOption(nil), name, "server-0", "ADJUST_BS")
		}, codes.PermissionDenied},
	} {
		if err := a.call(); status.Code(err) != a.want {
			t.Errorf("%s: %v, want %v", a.name, err, a.want)
		}
	}

	// The framed data plane (the default transport) shares the server's
	// port: a connection that cannot prove the job's secret is refused.
	for _, creds := range []framing.Credentials{framing.SharedSecret(nil), framing.SharedSecret([]byte("guess"))} {
		if c, err := psclient.DialWith(ctx, serverAddr, psclient.Options{Transport: psclient.TransportTCP, Credentials: creds}); err == nil {
			c.Close()
			t.Errorf("framed connection with secret %q accepted", creds)
		}
	}

	// The grpcurl check: reflection answers nothing in plaintext, and lists
	// the services to an operator's certificate.
	list := func(opt grpc.DialOption) ([]string, error) {
		s, err := reflectionpb.NewServerReflectionClient(dial(d.GRPCAddr(), opt)).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			return nil, err
		}
		r, err := s.Recv()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, sv := range r.GetListServicesResponse().GetService() {
			names = append(names, sv.Name)
		}
		return names, nil
	}
	if _, err := list(plain); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext reflection: %v, want no answer", err)
	}
	if names, err := list(creds(identity.Operator("alice")).DialOption(identity.IsScheduler)); err != nil ||
		!strings.Contains(strings.Join(names, " "), "kelpie.v1.Coordinator") {
		t.Errorf("reflection with an operator certificate: %v %v", names, err)
	}

	// The scheduler's refusals are counted and audited: five
	// PermissionDenied, and the handshakes without a certificate (or in
	// plaintext) as Unauthenticated, audited once for the address; the
	// server's seven (its refused handshakes, six PermissionDenied) reach
	// the audit log through its agent.
	if n := d.NodePlaneRefused(codes.PermissionDenied); n != 5 {
		t.Errorf("scheduler refused %d calls with PermissionDenied, want 5", n)
	}
	if n := d.NodePlaneRefused(codes.Unauthenticated); n < 1 {
		t.Errorf("scheduler refused %d handshakes as Unauthenticated, want at least 1", n)
	}
	audited := func() (atScheduler, atServer, atAgent int) {
		evs, _ := d.Manager.EventsSince(0, 10000)
		for _, e := range evs {
			if e.Kind != "audit" || !strings.Contains(e.Message, "node-plane") || e.Allowed {
				continue
			}
			switch {
			case strings.Contains(e.Message, " at server-0 (as claimed"):
				atServer++
			case strings.Contains(e.Message, " at worker-1 (as claimed"):
				atAgent++
			default:
				atScheduler++
			}
		}
		return
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, n, a := audited(); n >= 7 && a >= 4 {
			break
		}
	}
	// worker-1's agent's guard refused four: a handshake without a
	// certificate, job other's, and the two forwards the scheduler did not
	// sign (worker-0's restart, server-0's ADJUST_BS).
	if sched, server, agent := audited(); sched != 6 || server != 7 || agent != 4 {
		t.Errorf("node-plane refusals audited: %d at the scheduler, %d at the server, %d at worker-1's agent; want 6, 7 and 4", sched, server, agent)
	}
	resp, err := http.Get("http://" + d.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`kelpie_node_plane_refused_total{code="PermissionDenied",method="/kelpie.v1.Coordinator/FetchShard"} 2`,
		`kelpie_node_plane_refused_total{code="PermissionDenied",method="/kelpie.v1.ParameterServer/Shutdown"} 1`,
		`kelpie_node_plane_refused_total{code="Unauthenticated",method="tls-handshake"} `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(body), "refused"))
		}
	}

	// The same with grpcurl itself, against the scheduler and the server,
	// as docs/security.md tells an operator to.
	grpcurlCheck(t, ctx, dataDir, d.GRPCAddr(), serverAddr)

	// The job completes with exact shards and its normal accuracy.
	res, err := d.Manager.Wait(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if res.ShardsDone != res.ShardsTotal || res.ShardsTotal != 94 || res.Accuracy < 0.85 {
		t.Errorf("job after the attacks: shards %d/%d, accuracy %.4f", res.ShardsDone, res.ShardsTotal, res.Accuracy)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// grpcurlCheck runs grpcurl (when installed: go install
// github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4) against each address:
// in plaintext, or over TLS without a client certificate, it lists nothing;
// with an operator's credentials file from `kelpie certs issue` it lists the
// kelpie services, and an operator still may not act as a node.
func grpcurlCheck(t *testing.T, ctx context.Context, dataDir string, sched, server string) {
	t.Helper()
	bin, err := exec.LookPath("grpcurl")
	if err != nil {
		gobin := filepath.Join(os.Getenv("HOME"), "go", "bin", "grpcurl")
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gobin = filepath.Join(strings.TrimSpace(string(out)), "bin", "grpcurl")
		}
		if _, err := os.Stat(gobin); err != nil {
			t.Log("grpcurl not installed: its check is left out (go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4)")
			return
		}
		bin = gobin
	}
	creds := filepath.Join(t.TempDir(), "alice.pem")
	if out, err := exec.CommandContext(ctx, kelpieBin, "certs", "issue", "--data-dir", dataDir, "--operator", "alice", "--out", creds).CombinedOutput(); err != nil {
		t.Fatalf("kelpie certs issue: %v\n%s", err, out)
	}
	ca := filepath.Join(dataDir, "ca.crt")
	grpcurl := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, bin, append([]string{"-max-time", "10"}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, at := range []struct{ addr, service string }{{sched, "kelpie.v1.Coordinator"}, {server, "kelpie.v1.ParameterServer"}} {
		for _, args := range [][]string{{"-plaintext"}, {"-cacert", ca}} {
			out, err := grpcurl(append(args, at.addr, "list")...)
			if err == nil || strings.Contains(out, "kelpie.v1") {
				t.Errorf("grpcurl %v %s list answered: %v\n%s", args, at.addr, err, out)
			}
		}
		out, err := grpcurl("-cacert", ca, "-cert", creds, "-key", creds, at.addr, "list")
		if err != nil || !strings.Contains(out, at.service) {
			t.Errorf("grpcurl with alice's certificate, %s list: %v\n%s", at.addr, err, out)
		}
	}
	out, err := grpcurl("-cacert", ca, "-cert", creds, "-key", creds, "-d", `{"job":"victim","node":"worker-0"}`, sched, "kelpie.v1.Coordinator/FetchShard")
	if err == nil || !strings.Contains(out, "PermissionDenied") {
		t.Errorf("an operator's FetchShard through grpcurl: %v\n%s", err, out)
	}
}
