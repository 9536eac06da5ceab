package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// kelpieBin is the kelpie binary that agents and roles run, built once.
var kelpieBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kelpie-daemon-test")
	if err != nil {
		panic(err)
	}
	kelpieBin = filepath.Join(dir, "kelpie")
	out, err := exec.Command("go", "build", "-o", kelpieBin, "github.com/kelpie/kelpie/cmd/kelpie").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		panic("building kelpie: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func writeTokens(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("# test tokens\nop-token operator alice\nview-token viewer bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// watcher keeps the latest view of one job from the console stream.
type watcher struct {
	mu     sync.Mutex
	job    *consolepb.JobView
	events []*consolepb.Event
	seen   map[string]map[string]bool // node -> classes seen
	bpt    map[string]bool            // nodes seen with a BPT
	change chan struct{}
	// overshoot is the first view whose iteration counter passed its
	// total ("iter 240/235"), or reached it while the job ran ("9880/9880"
	// with a shard still being trained), or whose total went down, if any.
	overshoot string
	total     int64 // the last total seen while the job ran
}

func (w *watcher) handle(m any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var jobs []*consolepb.JobView
	switch x := m.(type) {
	case client.SnapshotMsg:
		jobs = x.Snapshot.Jobs
		w.events = append(w.events, x.Snapshot.Events...)
	case client.DeltaMsg:
		jobs = x.Delta.Jobs
		w.events = append(w.events, x.Delta.Events...)
	}
	for _, j := range jobs {
		w.job = j
		switch {
		case w.overshoot != "":
		case j.Iterations > 0 && j.Iteration > j.Iterations:
			w.overshoot = fmt.Sprintf("iteration %d of %d (%s)", j.Iteration, j.Iterations, j.State)
		case j.State == "running" && j.Iterations > 0 && j.Iteration >= j.Iterations:
			w.overshoot = fmt.Sprintf("iteration %d of %d while running (%d shards doing)", j.Iteration, j.Iterations, j.ShardsDoing)
		case j.State == "running" && j.Iterations < w.total:
			w.overshoot = fmt.Sprintf("total %d after %d while running", j.Iterations, w.total)
		}
		if j.State == "running" {
			w.total = j.Iterations
		}
		for _, n := range j.Nodes {
			if w.seen[n.Name] == nil {
				w.seen[n.Name] = map[string]bool{}
			}
			w.seen[n.Name][n.Class] = true
			if n.Role == "worker" && n.BptShortS > 0 {
				w.bpt[n.Name] = true
			}
		}
	}
	select {
	case w.change <- struct{}{}:
	default:
	}
}

// latest is the latest view of the job (the handler replaces it; views are never changed).
func (w *watcher) latest() *consolepb.JobView {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.job
}

// until waits (bounded) for cond on the latest view.
func (w *watcher) until(t *testing.T, what string, d time.Duration, cond func(*consolepb.JobView) bool) *consolepb.JobView {
	t.Helper()
	deadline := time.After(d)
	for {
		w.mu.Lock()
		j := w.job
		ok := j != nil && cond(j)
		w.mu.Unlock()
		if ok {
			return j
		}
		select {
		case <-w.change:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s; last view: %v", d, what, j)
		}
	}
}

func node(j *consolepb.JobView, name string) *consolepb.NodeView {
	for _, n := range j.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

const controlSpec = `
name: control
model: {kind: softmax}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 2, workers: 4}
sync: {model: bsp}
policies:
  antdt-nd: {mode: off, lambda: 1.5, window_transient: 1s, window_persistent: 4s}
stragglers:
  - {node: worker-2, kind: compute, sleep: 8ms, intensity: 1, start: 0s}
  - {node: worker-3, kind: compute, sleep: 8ms, intensity: 1, period: 8s, on: 1500ms, start: 3s}
`

// TestControlPlane runs a real job through the scheduler, agents and roles
// (separate processes on 127.0.0.1) and checks the points: every
// node's BPT on the console stream, persistent and transient stragglers
// classified, a restart through the console applied exactly once and
// audited, a viewer refused and audited, a killed worker process restarted
// by its agent, /metrics, and no process left behind.
func TestControlPlane(t *testing.T) {
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Tokens: writeTokens(t),
		Exe: kelpieBin, NodeLog: logWriter{t}, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			d.Close(true)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	op, err := client.Dial(ctx, d.HTTPAddr(), "op-token", client.WithSubscription([]string{"control"}, 10, 30), client.WithHandler(w.handle))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	if err := op.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := op.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: controlSpec}}})
	if err != nil || !res.Ok {
		t.Fatalf("submit: %v %v", res, err)
	}
	if err := op.Subscribe(ctx, []string{"control"}); err != nil {
		t.Fatal(err)
	}

	// Every worker's BPT shows on the stream; worker-2 is classified a
	// persistent straggler and worker-3, slow 1.5 s of every 8 s, transient.
	w.until(t, "BPT of every worker", time.Minute, func(*consolepb.JobView) bool { return len(w.bpt) == 4 })
	w.until(t, "worker-2 persistent, worker-3 transient", 90*time.Second, func(*consolepb.JobView) bool {
		return w.seen["worker-2"]["persistent"] && w.seen["worker-3"]["transient"]
	})
	w.mu.Lock()
	if w.seen["worker-0"]["persistent"] || w.seen["worker-0"]["transient"] {
		t.Errorf("worker-0 (no injection) was classified a straggler: %v", w.seen["worker-0"])
	}
	w.mu.Unlock()

	// A viewer's command is refused with a clear error, and audited.
	viewer, err := client.Dial(ctx, d.HTTPAddr(), "view-token")
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	if err := viewer.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	restart := &consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: "control",
		Action: &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-1"}}}}
	vr, err := viewer.Send(ctx, restart)
	if err != nil {
		t.Fatal(err)
	}
	if vr.Ok || !strings.Contains(vr.Error, "operator") {
		t.Errorf("viewer's restart = %+v; want a refusal naming the operator role", vr)
	}

	// An operator's restart is applied exactly once.
	before := node(w.latest(), "worker-1")
	r, err := op.Send(ctx, restart)
	if err != nil || !r.Ok {
		t.Fatalf("operator restart: %v %v", r, err)
	}
	j := w.until(t, "the restart applied", time.Minute, func(j *consolepb.JobView) bool {
		for _, a := range j.Actions {
			if a.Id == r.ActionId {
				return a.State == "applied"
			}
		}
		return false
	})
	if n := node(j, "worker-1"); n.Restarts != before.Restarts+1 {
		t.Errorf("worker-1 restarts %d → %d; want exactly one more", before.Restarts, n.Restarts)
	}

	// kill -9 of a worker's role process: its agent restarts it.
	victim := node(w.latest(), "worker-0")
	if victim.Pid == 0 {
		t.Fatal("worker-0 has no pid in the view")
	}
	if err := syscall.Kill(int(victim.Pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	w.until(t, "worker-0 restarted by its agent", time.Minute, func(j *consolepb.JobView) bool {
		n := node(j, "worker-0")
		return n.Restarts > victim.Restarts && n.State == "running" && n.Pid != victim.Pid
	})

	// /metrics serves the Monitor's figures.
	resp, err := http.Get("http://" + d.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`kelpie_node_bpt_seconds{kelpie_job="control",node="worker-2",window="transient"}`, "kelpie_actions{", "kelpie_server_speed_bytes_per_second"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// The job completes despite everything.
	final := w.until(t, "completion", 2*time.Minute, func(j *consolepb.JobView) bool { return j.State != "running" && j.State != "starting" })
	if final.State != "completed" {
		t.Fatalf("job ended %s: %s", final.State, final.Error)
	}
	if final.ShardsDone != final.ShardsTotal {
		t.Errorf("shards %d/%d", final.ShardsDone, final.ShardsTotal)
	}
	for _, n := range final.Nodes {
		if n.State == "running" || n.State == "starting" || n.State == "restarting" {
			t.Errorf("%s shows %s in a completed job", n.Name, n.State)
		}
	}
	w.mu.Lock()
	if w.overshoot != "" {
		t.Errorf("a view showed %s: the counter passed its total", w.overshoot)
	}
	w.mu.Unlock()

	// The audit log holds both commands, allowed and refused.
	audit, err := d.store.ListAudit(time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var refused, allowed bool
	for _, e := range audit {
		if e.Who == "bob" && !e.Allowed && strings.Contains(e.What, "trigger") {
			refused = true
		}
		if e.Who == "alice" && e.Allowed && strings.Contains(e.What, "KILL_RESTART") {
			allowed = true
		}
	}
	if !refused || !allowed {
		t.Errorf("audit log %v: want bob's refused trigger and alice's allowed restart", audit)
	}
	procs := d.Manager.Procs("control")
	d.Close(true)
	stopped = true
	for _, p := range procs {
		if syscall.Kill(p.Pid(), 0) == nil {
			t.Errorf("%s (pid %d) still runs after the scheduler stopped", p.Name, p.Pid())
		}
	}
}

// TestWorkerCrashLoopFailsJob: a worker that keeps dying after its agent
// has restarted it as often as allowed fails the job with a message that
// names it, and nothing is left running.
func TestWorkerCrashLoopFailsJob(t *testing.T) {
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Exe: kelpieBin,
		NodeLog: logWriter{t}, Tick: 200 * time.Millisecond, MaxRestarts: 1, AllowAnonymousViewer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	c, err := client.Dial(ctx, d.HTTPAddr(), "", client.WithSubscription([]string{"doomed"}, 10, 10), client.WithHandler(w.handle))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := d.Manager.Submit(strings.Replace(restartSpec, "survivor", "doomed", 1), "test"); err != nil {
		t.Fatal(err)
	}
	_ = c.Subscribe(ctx, []string{"doomed"})
	var last int32
	for kill := 0; kill < 2; kill++ {
		v := w.until(t, "worker-1 running", time.Minute, func(j *consolepb.JobView) bool {
			n := node(j, "worker-1")
			return n != nil && n.State == "running" && n.Pid != 0 && n.Pid != last
		})
		last = node(v, "worker-1").Pid
		_ = syscall.Kill(int(last), syscall.SIGKILL)
	}
	final := w.until(t, "the job to fail", time.Minute, func(j *consolepb.JobView) bool { return j.State == "failed" })
	if !strings.Contains(final.Error, "worker-1") {
		t.Errorf("job error %q does not name worker-1", final.Error)
	}
	procs := d.Manager.Procs("doomed")
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range procs {
		for syscall.Kill(p.Pid(), 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if syscall.Kill(p.Pid(), 0) == nil {
			t.Errorf("%s (pid %d) still runs after the job failed", p.Name, p.Pid())
		}
	}
}

// startLogged starts a scheduler for a test on 127.0.0.1 with a fresh data
// directory and the built kelpie, its own log and its nodes' logs in the
// test's, ticking every 200 ms. The caller closes it.
func startLogged(t *testing.T) *Daemon {
	t.Helper()
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Exe: kelpieBin,
		NodeLog: logWriter{t}, Log: slog.New(slog.NewTextHandler(logWriter{t}, nil)), Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
