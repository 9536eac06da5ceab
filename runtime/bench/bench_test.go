package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/wire"
	"github.com/kelpie/kelpie/scheduler/pki"
)

// serveEnv makes the test binary act as a benchmark server process, the
// way `kelpie bench serve` does in the real binary.
const serveEnv = "KELPIE_BENCH_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := RunServer(ctx, os.Args[1:], os.Stdin, os.Stdout)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testLauncher(t testing.TB) Launcher {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Launcher{Exe: exe, Env: []string{serveEnv + "=1"}}
}

// syncBuffer is a Log that tests read while Run writes.
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

var pidRE = regexp.MustCompile(`server pid (\d+)`)

// checkStopped asserts that every server PID named in the log is gone.
func checkStopped(t *testing.T, log string) {
	t.Helper()
	seen := map[int]bool{}
	for _, m := range pidRE.FindAllStringSubmatch(log, -1) {
		pid, _ := strconv.Atoi(m[1])
		seen[pid] = true
	}
	if len(seen) == 0 {
		t.Fatalf("no server pid in the log:\n%s", log)
	}
	for pid := range seen {
		// Reaped children no longer exist: kill(pid, 0) fails with ESRCH.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("server pid %d still exists after Run (kill 0: %v)", pid, err)
		}
	}
}

func tinyConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Topologies = []Topology{{1, 1}}
	cfg.Sizes = []int{4096}
	cfg.Inflight = []int{1, 4}
	cfg.Duration = 20 * time.Millisecond
	cfg.Warmup = 5
	cfg.Pin = false
	cfg.Launcher = testLauncher(t)
	return cfg
}

func TestRunJSONShape(t *testing.T) {
	cfg := tinyConfig(t)
	var log syncBuffer
	cfg.Log = &log
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	out, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	rows, ok := got["results"].([]any)
	if !ok {
		t.Fatalf("results = %T in %s; want an array", got["results"], out)
	}
	if want := len(cfg.Ops) * len(cfg.Inflight); len(rows) != want {
		t.Fatalf("%d results; want %d", len(rows), want)
	}
	positive := []string{"servers", "workers", "bytes", "inflight", "mb_per_s", "mb_per_s_min", "mb_per_s_max",
		"p50_us", "p99_us", "raw_tcp_mb_per_s", "raw_tcp_rtt_p50_us"}
	ops := map[string]bool{}
	for i, r := range rows {
		row := r.(map[string]any)
		op, _ := row["op"].(string)
		ops[op] = true
		for _, k := range positive {
			v, ok := row[k].(float64)
			if !ok || !(v > 0) {
				t.Errorf("results[%d][%q] = %v; want a positive number", i, k, row[k])
			}
		}
		if row["mb_per_s_min"].(float64) > row["mb_per_s"].(float64) || row["mb_per_s"].(float64) > row["mb_per_s_max"].(float64) {
			t.Errorf("results[%d]: min %v, median %v, max %v out of order", i, row["mb_per_s_min"], row["mb_per_s"], row["mb_per_s_max"])
		}
		if row["p50_us"].(float64) > row["p99_us"].(float64) {
			t.Errorf("results[%d]: p50 %v > p99 %v", i, row["p50_us"], row["p99_us"])
		}
		if row["bytes"].(float64) != 4096 || row["servers"].(float64) != 1 || row["workers"].(float64) != 1 {
			t.Errorf("results[%d] = %v; want 4096 bytes, 1 server, 1 worker", i, row)
		}
	}
	for _, o := range []string{"push", "pull", "pushpull"} {
		if !ops[o] {
			t.Errorf("no %s row in %s", o, out)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "kelpie/raw") || strings.Count(table.String(), "\n") != len(rows)+2 {
		t.Errorf("table:\n%s\nwant a header, %d rows and a footnote", table.String(), len(rows))
	}
	checkStopped(t, log.String())
}

// TestRunUnixBaseline: rows over kelpie's Unix socket are divided by a
// raw baseline over a Unix socket (like for like), with raw TCP's beside
// it; TCP rows keep raw TCP.
func TestRunUnixBaseline(t *testing.T) {
	for _, tr := range []string{psclient.TransportUnix, psclient.TransportTCP} {
		cfg := tinyConfig(t)
		cfg.Transport = tr
		cfg.Ops = []Op{Push}
		cfg.Inflight = []int{1}
		var log syncBuffer
		cfg.Log = &log
		rep, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: Run: %v\n%s", tr, err, log.String())
		}
		if len(rep.Results) != 1 {
			t.Fatalf("%s: %d results; want 1", tr, len(rep.Results))
		}
		r := rep.Results[0]
		if r.RawBaseline != tr || !(r.RawMBPerS > 0) || !(r.RatioTCP > 0) {
			t.Errorf("%s: raw baseline %q, raw tcp %v MB/s, ratio to tcp %v; want %s and both positive", tr, r.RawBaseline, r.RawMBPerS, r.RatioTCP, tr)
		}
		want := r.MBPerS / r.RawMBPerS
		if tr == psclient.TransportUnix {
			if !(r.RawUnixMBPerS > 0) || !(r.RawUnixRTTP50US > 0) {
				t.Errorf("unix: raw unix %v MB/s, rtt %v µs; want measured", r.RawUnixMBPerS, r.RawUnixRTTP50US)
			}
			want = r.MBPerS / r.RawUnixMBPerS
		} else if r.RawUnixMBPerS != 0 {
			t.Errorf("tcp: a raw unix baseline was measured (%v MB/s)", r.RawUnixMBPerS)
		}
		if math.Abs(r.Ratio-want) > 1e-9 {
			t.Errorf("%s: kelpie_over_raw %v; want %v (over the %s baseline)", tr, r.Ratio, want, tr)
		}
		checkStopped(t, log.String())
	}
}

func TestRunStopsServersOnCancel(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.Duration = time.Minute // would run far longer than the test
	cfg.MaxOps = 1 << 30
	var log syncBuffer
	cfg.Log = &log
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if strings.Contains(log.String(), "raw server pid") {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	_, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v; want context.Canceled", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %v to stop after cancel", d)
	}
	checkStopped(t, log.String())
}

func TestRunServerFailsToStart(t *testing.T) {
	cfg := tinyConfig(t)
	cfg.Launcher.Args = []string{"--no-such-flag"}
	var log syncBuffer
	cfg.Log = &log
	_, err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "did not report its address") {
		t.Fatalf("Run with a failing server = %v; want a start error", err)
	}
}

// TestPushesAreSummed checks the benchmark's server setup: asp with SGD at
// learning rate 1 subtracts every push, from every worker, from the block.
func TestPushesAreSummed(t *testing.T) {
	sizes := []int{4096, 64 << 10}
	s, err := StartPS("127.0.0.1:0", 2, sizes, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	const n = 50
	grad := make([]float32, sizes[1]/4)
	for i := range grad {
		grad[i] = -1
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w := range 2 {
		c, err := psclient.Dial(s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var prog int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &psStream{conn: c, worker: int32(w), block: 1, op: Push, size: sizes[1], payload: wire.AsBytes(grad), progress: &prog}
			if _, err := drive(st, n, 4, nil); err != nil {
				errs[w] = err
				return
			}
			st.op = PushPull
			_, errs[w] = drive(st, n, 1, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	for i, v := range snap[1] {
		if v != 4*n {
			t.Fatalf("block 1 value %d = %v after %d pushes of 1 from each of 2 workers; want %v", i, v, 2*n, 4*n)
		}
	}
	for i, v := range snap[0] {
		if v != 0 {
			t.Fatalf("block 0 value %d = %v; want 0 (never pushed)", i, v)
		}
	}
}

// TestRawServer: the raw baseline answers over TCP and over its Unix
// socket (the like-for-like baseline of unix rows), and Stop removes the
// socket.
func TestRawServer(t *testing.T) {
	s, err := StartRaw("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	path := RawUnixPath(s.Addr())
	for _, dial := range [][2]string{{"tcp", s.Addr()}, {"unix", path}} {
		c, err := dialRaw(dial[0], dial[1])
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []Op{Push, Pull, PushPull} {
			for _, inflight := range []int{1, 8} {
				lat, err := drive(c.stream(op, 64<<10), 30, inflight, nil)
				if err != nil || len(lat) != 30 {
					t.Errorf("raw %s %s inflight %d: %d latencies, %v; want 30, nil", dial[0], op, inflight, len(lat), err)
				}
			}
		}
		c.conn.Close()
	}
	s.Stop()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the raw server's Unix socket %s is left after Stop (%v)", path, err)
	}
}

// BenchmarkPushPull times one worker against an in-process server on
// 127.0.0.1, one request in flight, over each transport (b.N operations;
// MB/s counts value bytes; allocations are the whole round trip's, both
// ends, since the server runs in this process).
func BenchmarkPushPull(b *testing.B) {
	sizes := []int{4 << 10, 64 << 10, 1 << 20, 4 << 20}
	s, err := StartPS("127.0.0.1:0", 1, sizes, false)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Stop()
	var prog int64
	for _, tr := range []string{psclient.TransportTCP, psclient.TransportUnix, psclient.TransportGRPC} {
		c, err := psclient.DialWith(context.Background(), s.Addr(), psclient.Options{Transport: tr})
		if err != nil {
			b.Fatal(err)
		}
		for _, op := range []Op{Push, Pull, PushPull} {
			for bi, size := range sizes {
				b.Run(fmt.Sprintf("%s/%s/%s", tr, op, FormatSize(size)), func(b *testing.B) {
					st := &psStream{conn: c, block: uint32(bi), op: op, size: size,
						payload: make([]byte, size), progress: &prog}
					b.SetBytes(op.Moved(size))
					b.ReportAllocs()
					b.ResetTimer()
					lat, err := drive(st, b.N, 1, make([]time.Duration, 0, b.N))
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					slices.Sort(lat)
					b.ReportMetric(float64(Percentile(lat, 0.5))/1e3, "p50-µs")
				})
			}
		}
		c.Close()
	}
}

// securityChildEnv marks the process TestSecurityCost starts with node
// credentials: identity loads them once per process, so a run with them
// needs a process of its own.
const securityChildEnv = "KELPIE_BENCH_TEST_SECURITY"

// TestSecurityCost: with node credentials and encryption on, kelpie's rows
// run authenticated and in TLS, and every row also carries the same
// measurement against servers without any security and the ratio.
func TestSecurityCost(t *testing.T) {
	if serverCert := os.Getenv(securityChildEnv); serverCert != "" {
		securityCostChild(t, serverCert)
		return
	}
	dir := t.TempDir()
	ca, err := pki.New("bench test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := pki.JobSecret([]byte("bench test key.................."), "bench")
	worker, server := filepath.Join(dir, "worker.pem"), filepath.Join(dir, "server.pem")
	for path, node := range map[string]string{worker: "worker-0", server: "server-0"} {
		if err := ca.WriteNodeBundle(path, identity.Node("bench", node), time.Hour, secret, pki.LocalHosts()...); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSecurityCost$", "-test.v")
	cmd.Env = append(os.Environ(), identity.EnvCert+"="+worker, securityChildEnv+"="+server)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "security cost measured") {
		t.Fatalf("the run with credentials: %v\n%s", err, out)
	}
}

func securityCostChild(t *testing.T, serverCert string) {
	if c, err := identity.Process(); err != nil || c == nil {
		t.Fatalf("this process's credentials: %v", err)
	}
	// The servers this process starts are the job's servers.
	t.Setenv(identity.EnvCert, serverCert)
	cfg := tinyConfig(t)
	cfg.Sizes = []int{64 << 10}
	cfg.Ops = []Op{Push, Pull}
	cfg.Inflight = []int{1}
	cfg.Encrypt, cfg.SecurityCost = true, true
	var log syncBuffer
	cfg.Log = &log
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, log.String())
	}
	if !rep.Authenticated || rep.Encryption != "on" || len(rep.Results) != 2 {
		t.Fatalf("report: authenticated %v, encryption %q, %d rows; want true, on, 2", rep.Authenticated, rep.Encryption, len(rep.Results))
	}
	for _, r := range rep.Results {
		if !(r.MBPerS > 0 && r.PlainMBPerS > 0 && r.PlainP50US > 0) || math.Abs(r.SecureOverPlain-r.MBPerS/r.PlainMBPerS) > 1e-9 {
			t.Errorf("%s row: %.1f MB/s secure, %.1f plain, ratio %v", r.Op, r.MBPerS, r.PlainMBPerS, r.SecureOverPlain)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "secure/plain") || !strings.Contains(table.String(), "encryption on") {
		t.Errorf("table:\n%s\nwant a secure/plain column and the encryption named", table.String())
	}
	checkStopped(t, log.String())
	if strings.Count(log.String(), "ps (plain) server pid") != 1 {
		t.Errorf("log:\n%s\nwant one server without security", log.String())
	}
	t.Log("security cost measured")
}
