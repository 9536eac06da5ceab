package allreduce

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/scheduler/pki"
)

// syncBuffer is a log destination several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testPKI issues node credentials from one CA, as the scheduler does.
type testPKI struct {
	t  *testing.T
	ca *pki.CA
}

func newTestPKI(t *testing.T) testPKI {
	ca, err := pki.New("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return testPKI{t, ca}
}

// security is node's Security in job with secret; encrypt adds TLS with
// its node certificate.
func (p testPKI) security(job, node, secret string, encrypt bool, log *slog.Logger) *Security {
	sec := &Security{Credentials: framing.SharedSecret(secret), Log: log}
	if encrypt {
		c, err := p.ca.Credentials(identity.Node(job, node), time.Hour)
		if err != nil {
			p.t.Fatal(err)
		}
		sec.ServerTLS, sec.ClientTLS = c.PeerTLS()
		sec.PeerNode = func(cs tls.ConnectionState) (string, error) {
			id, err := identity.TLSPeer(cs)
			return id.Node, err
		}
	}
	return sec
}

func workerName(j int) string { return fmt.Sprintf("worker-%d", j) }

// TestSecuredExchangeMatchesSimulate: with the job's secret, and with TLS
// on node certificates, ring and RAT over real connections compute exactly
// what Simulate does (the credentials change nothing but the connection).
func TestSecuredExchangeMatchesSimulate(t *testing.T) {
	p := newTestPKI(t)
	for _, encrypt := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypt=%v", encrypt), func(t *testing.T) {
			const nodes, n = 4, 5003
			topo := racks(2, 2)
			lis, addrs := listeners(t, nodes)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			xs := make([]*Exchange, nodes)
			errs := make([]error, nodes)
			var wg sync.WaitGroup
			for i := range nodes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					xs[i], errs[i] = Connect(ctx, Config{Self: i, Addrs: addrs, Listener: lis[i], Group: "job-a", Name: workerName,
						Security: p.security("a", workerName(i), "secret-a", encrypt, nil)})
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("node %d: %v", i, err)
				}
				defer xs[i].Close()
			}
			for _, plan := range []*reduceplan.Plan{reduceplan.Ring(nodes, n, topo), reduceplan.RAT(nodes, n, topo, 0)} {
				rng := rand.New(rand.NewPCG(3, 4))
				vecs, want := make([][]float32, nodes), make([][]float32, nodes)
				for i := range vecs {
					vecs[i] = make([]float32, n)
					for j := range vecs[i] {
						vecs[i][j] = float32(rng.NormFloat64())
					}
					want[i] = append([]float32(nil), vecs[i]...)
				}
				if err := plan.Simulate(want); err != nil {
					t.Fatal(err)
				}
				for i, err := range runAll(ctx, xs, plan, vecs) {
					if err != nil {
						t.Fatalf("%s: node %d: %v", plan.Kind, i, err)
					}
				}
				for i := range vecs {
					for j := range vecs[i] {
						if vecs[i][j] != want[i][j] {
							t.Fatalf("%s: node %d element %d = %v; Simulate gives %v", plan.Kind, i, j, vecs[i][j], want[i][j])
						}
					}
				}
			}
		})
	}
}

func listeners(t *testing.T, n int) ([]net.Listener, []string) {
	t.Helper()
	lis := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lis {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		lis[i], addrs[i] = l, l.Addr().String()
	}
	return lis, addrs
}

// TestSecuredExchangeRefusesOthers: node 0 of job a waits for node 1;
// meanwhile peers that are not worker-1 of job a try to take its place: one
// with no credentials, one with another job's secret and certificate, one
// with job a's secret but another job's certificate, one with a certificate
// of job a's worker-2 claiming to be worker-1. Each is refused (its dial
// fails and node 0 logs why), and the real worker-1 then joins and the
// mesh sums.
func TestSecuredExchangeRefusesOthers(t *testing.T) {
	p := newTestPKI(t)
	for _, encrypt := range []bool{false, true} {
		t.Run(fmt.Sprintf("encrypt=%v", encrypt), func(t *testing.T) {
			lis, addrs := listeners(t, 2)
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			type result struct {
				x   *Exchange
				err error
			}
			first := make(chan result, 1)
			go func() {
				x, err := Connect(ctx, Config{Self: 0, Addrs: addrs, Listener: lis[0], Group: "job-a", Name: workerName,
					Security: p.security("a", "worker-0", "secret-a", encrypt, log)})
				first <- result{x, err}
			}()
			type stranger struct {
				name string
				sec  *Security
				want string // in node 0's log
			}
			strangers := []stranger{
				{"no credentials", nil, "bad frame"},
				{"another job's secret", p.security("b", "worker-1", "secret-b", encrypt, nil), "did not prove the job's data-plane secret"},
			}
			if encrypt {
				// A stranger that does not check node 0's certificate, so
				// that node 0 is the one to refuse.
				other := p.security("b", "worker-1", "secret-a", true, nil)
				other.ClientTLS.VerifyConnection = nil
				strangers = append(strangers,
					stranger{"another job's certificate", other, "is not a worker of job a"},
					stranger{"worker-2 claiming worker-1", p.security("a", "worker-2", "secret-a", true, nil), "certificate names worker-2, but it is taken for worker-1"})
			}
			for _, s := range strangers {
				// The stranger dials node 0 as node 1 of the group.
				sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
				e := &Exchange{cfg: Config{Self: 1, Addrs: addrs, Group: "job-a", Name: workerName, Security: s.sec,
					Dial: func(ctx context.Context, addr string) (net.Conn, error) {
						var d net.Dialer
						return d.DialContext(ctx, "tcp", addr)
					}}}
				c, err := e.dialOnce(sctx, 0, addrs[0])
				scancel()
				if err == nil {
					c.Close()
					t.Fatalf("%s: node 0 took the connection", s.name)
				}
				t.Logf("%s: %v", s.name, err)
				deadline := time.Now().Add(10 * time.Second)
				for !strings.Contains(logs.String(), s.want) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: node 0's log does not say %q:\n%s", s.name, s.want, logs.String())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			if n := strings.Count(logs.String(), "refused a peer connection"); n < len(strangers) {
				t.Errorf("%d refusals logged for %d strangers:\n%s", n, len(strangers), logs.String())
			}
			x1, err := Connect(ctx, Config{Self: 1, Addrs: addrs, Listener: lis[1], Group: "job-a", Name: workerName,
				Security: p.security("a", "worker-1", "secret-a", encrypt, nil)})
			if err != nil {
				t.Fatal(err)
			}
			defer x1.Close()
			r := <-first
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.x.Close()
			v := [][]float32{{1, 2}, {3, 4}}
			for i, err := range runAll(ctx, []*Exchange{r.x, x1}, reduceplan.Ring(2, 2, nil), v) {
				if err != nil {
					t.Fatalf("node %d: %v", i, err)
				}
			}
			if v[0][0] != 4 || v[1][1] != 6 {
				t.Errorf("sums %v; want [[4 6] [4 6]]", v)
			}
		})
	}
}
