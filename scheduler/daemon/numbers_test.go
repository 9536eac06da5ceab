package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

const numbersSpec = `
name: numbers
model: {kind: softmax}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 1, workers: 3}
sync: {model: bsp}
policies:
  antdt-nd: {mode: off, lambda: 1.5, window_transient: 1s, window_persistent: 3s}
stragglers:
  - {node: worker-2, kind: compute, sleep: 30ms, intensity: 0.8, start: 0s}
`

// TestThroughputAndAlerts runs a real BSP job (scheduler, agents, one
// server and three workers as processes, worker-2 slowed 30 ms × 0.8) with
// a real Prometheus server scraping the scheduler under the shipped rules:
//   - the throughput the console shows is the samples trained per
//     wall-clock second, checked against an independent count: iterations
//     over 10 s of wall-clock time times the global batch (the old figure,
//     Σ B_i/T_i, was ~10× that);
//   - the job's progress series are on /metrics;
//   - KelpiePersistentStraggler fires for worker-2 (its "for" shortened to
//     a few seconds) and resolves once the job is killed: the killed job's
//     node series are gone from the next scrape on.
func TestThroughputAndAlerts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a job for about a minute")
	}
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no prometheus on PATH (make rules installs Debian's prometheus package)")
		}
		t.Skip("no prometheus on PATH (apt-get install prometheus)")
	}
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Tokens: writeTokens(t),
		Exe: kelpieBin, NodeLog: logWriter{t}, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	prom := startPrometheus(t, promBin, d.HTTPAddr())

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	op, err := client.Dial(ctx, d.HTTPAddr(), "op-token", client.WithSubscription([]string{"numbers"}, 10, 30), client.WithHandler(w.handle))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := op.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: numbersSpec}}})
	if err != nil || !res.Ok {
		t.Fatalf("submit: %v %v", res, err)
	}
	if err := op.Subscribe(ctx, []string{"numbers"}); err != nil {
		t.Fatal(err)
	}

	// The independent count: the iteration counter over 10 s of wall-clock
	// time, once the job has trained for a while (the console's window is
	// full).
	w.until(t, "the job training for 12 s", time.Minute, func(j *consolepb.JobView) bool {
		return j.State == "running" && j.Started != nil && time.Since(j.Started.AsTime()) > 12*time.Second
	})
	it0, t0 := w.latest().Iteration, time.Now()
	time.Sleep(10 * time.Second)
	v := w.latest()
	counted := float64(v.Iteration-it0) * 64 / time.Since(t0).Seconds()
	t.Logf("throughput shown %.0f samples/s; counted %d iterations × 64 over %.1fs = %.0f samples/s", v.Throughput,
		v.Iteration-it0, time.Since(t0).Seconds(), counted)
	if counted <= 0 || math.Abs(v.Throughput-counted)/counted > 0.25 {
		t.Errorf("throughput shown %.0f samples/s; the iterations counted over the same 10 s say %.0f", v.Throughput, counted)
	}
	var vi float64
	for _, n := range v.Nodes {
		vi += n.Throughput
	}
	t.Logf("Σ B_i/T_i (the old figure) %.0f samples/s", vi)

	body := get(t, "http://"+d.HTTPAddr()+"/metrics")
	for _, want := range []string{`kelpie_job_iteration{kelpie_job="numbers"}`, `kelpie_job_samples_total{kelpie_job="numbers"}`,
		`kelpie_job_loss{kelpie_job="numbers"}`, `kelpie_job_throughput_samples_per_second{kelpie_job="numbers"}`,
		"# TYPE kelpie_job_samples_total counter", "# TYPE kelpie_server_delayed_pulls_total counter"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Prometheus fires the straggler alert for worker-2 ...
	firing := func() []string {
		var out []string
		for _, a := range alerts(t, prom) {
			if a.State == "firing" && a.Labels["alertname"] == "KelpiePersistentStraggler" && a.Labels["kelpie_job"] == "numbers" {
				out = append(out, a.Labels["node"])
			}
		}
		return out
	}
	waitFor(t, "KelpiePersistentStraggler firing for worker-2", time.Minute, func() bool {
		return strings.Contains(strings.Join(firing(), ","), "worker-2")
	})
	// ... and resolves once the job is killed (scrapes every second,
	// rules evaluated every second: a few seconds).
	r, err := op.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: "numbers"}}})
	if err != nil || !r.Ok {
		t.Fatalf("kill: %v %v", r, err)
	}
	killed := time.Now()
	body = get(t, "http://"+d.HTTPAddr()+"/metrics")
	for _, stale := range []string{"kelpie_node_straggler{", "kelpie_node_bpt_seconds{", "kelpie_action_pending_seconds{"} {
		if strings.Contains(body, stale) {
			t.Errorf("/metrics right after the kill still has %s…", stale)
		}
	}
	waitFor(t, "KelpiePersistentStraggler resolved after the kill", 30*time.Second, func() bool { return len(firing()) == 0 })
	t.Logf("alert resolved %.1fs after the kill", time.Since(killed).Seconds())
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.overshoot != "" {
		t.Errorf("a view showed %s", w.overshoot)
	}
}

// startPrometheus runs Prometheus scraping target's /metrics every second
// under deploy/prometheus/kelpie-rules.yaml, evaluated every second, with
// each alert's "for" cut to 2 s. It returns its address; it is stopped
// when the test ends.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	rules, err := os.ReadFile("../../deploy/prometheus/kelpie-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	short := strings.ReplaceAll(string(rules), "for: 5m", "for: 2s")
	if short == string(rules) {
		t.Fatal(`the rules file has no "for: 5m" to shorten`)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(short), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [rules.yaml]\n"+
		"scrape_configs:\n  - job_name: kelpie\n    static_configs: [{targets: [%q]}]\n", target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if testing.Verbose() {
		cmd.Stderr = logWriter{t}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	waitFor(t, "Prometheus ready", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return addr
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// alerts is what Prometheus at addr says is pending or firing.
func alerts(t *testing.T, addr string) []promAlert {
	t.Helper()
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(get(t, "http://"+addr+"/api/v1/alerts")), &r); err != nil {
		t.Fatal(err)
	}
	return r.Data.Alerts
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls cond every 200 ms for at most d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
