package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// envDuration reads a duration from the environment (make faults sets the
// long ones).
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// scheduler is a `kelpie scheduler` process on fixed addresses and a data
// dir, so that it can be killed and started again.
type scheduler struct {
	t                  *testing.T
	tag, dir, tokens   string
	grpcAddr, httpAddr string
	extra              []string
	cmd                *exec.Cmd
	starts             int // processes started so far
}

func newScheduler(t *testing.T, tag string, extra ...string) *scheduler {
	return &scheduler{t: t, tag: tag, dir: t.TempDir(), tokens: writeTokens(t), grpcAddr: freeAddr(t), httpAddr: freeAddr(t), extra: extra}
}

// runScheduler starts a scheduler for a test whose processes carry a tag
// made of name; when the test ends the scheduler stops and every tagged
// process still running is killed (before the test's temporary
// directories go).
func runScheduler(t *testing.T, name string, extra ...string) *scheduler {
	t.Helper()
	tag := fmt.Sprintf("KELPIE_TEST_TAG=%s-%d", name, time.Now().UnixNano())
	s := newScheduler(t, tag, extra...)
	t.Cleanup(func() {
		s.stop()
		killTagged(tag)
	})
	s.start()
	return s
}

func (s *scheduler) start() {
	s.t.Helper()
	args := append([]string{"scheduler", "--grpc", s.grpcAddr, "--http", s.httpAddr, "--data-dir", s.dir, "--tokens", s.tokens}, s.extra...)
	s.cmd = exec.Command(kelpieBin, args...)
	s.cmd.Env = append(os.Environ(), s.tag)
	s.cmd.Stderr = logWriter{s.t}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.starts++
}

// waitHTTP waits (30 s at most) until the scheduler's console port answers
// its health check: the CLI fails at once on a port nobody listens on,
// so a script that just restarted the scheduler waits for it like this.
func (s *scheduler) waitHTTP() {
	s.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + s.httpAddr + "/api/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the scheduler's console port %s did not answer within 30 s: %v", s.httpAddr, err)
		}
	}
}

func (s *scheduler) kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	_ = s.cmd.Wait()
}

func (s *scheduler) stop() {
	if s.cmd != nil && s.cmd.ProcessState == nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
	}
}

// console subscribes to one job on the scheduler's console (reconnecting
// across restarts).
func (s *scheduler) console(ctx context.Context, job string) (*client.Client, *watcher) {
	s.t.Helper()
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	c, err := client.Dial(ctx, s.httpAddr, "op-token", client.WithSubscription([]string{job}, 10, 10),
		client.WithHandler(w.handle), client.WithBackoff(100*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		s.t.Fatal(err)
	}
	if err := c.WaitConnected(ctx); err != nil {
		s.t.Fatal(err)
	}
	return c, w
}

func (s *scheduler) submit(ctx context.Context, c *client.Client, spec string) {
	s.t.Helper()
	if r, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: spec}}}); err != nil || !r.Ok {
		s.t.Fatalf("submit: %v %v", r, err)
	}
}

// dumpLogs copies the job's node logs into the test log (on failure).
func (s *scheduler) dumpLogs(job string) {
	files, _ := filepath.Glob(filepath.Join(s.dir, "logs", job, "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		s.t.Logf("--- %s\n%s", filepath.Base(f), b)
	}
}

const outageSpec = `
name: outage
model: {kind: softmax}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 1, workers: 2}
stragglers:
  - {node: worker-1, kind: compute, sleep: 6ms, intensity: 1}
`

// TestSchedulerOutage: the scheduler is killed mid-job and stays away
// longer than agents used to last (KELPIE_FAULTS_OUTAGE, 75 s by default;
// make faults: 3 min); every agent and role keeps running meanwhile, and
// once it is back the job completes with every shard DONE exactly once and
// a normal accuracy.
func TestSchedulerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process outage test")
	}
	// Mostly waiting (an outage, an orphan timeout): runs beside the other
	// waiting tests.
	t.Parallel()
	outage := envDuration(t, "KELPIE_FAULTS_OUTAGE", 75*time.Second)
	s := runScheduler(t, "outage")
	ctx, cancel := context.WithTimeout(context.Background(), outage+6*time.Minute)
	defer cancel()
	c, w := s.console(ctx, "outage")
	defer c.Close()
	s.submit(ctx, c, outageSpec)
	_ = c.Subscribe(ctx, []string{"outage"})
	w.until(t, "training", 2*time.Minute, func(j *consolepb.JobView) bool { return j.Iteration > 30 })
	s.kill9()
	procs := tagged(s.tag)
	if len(procs) != 6 {
		t.Fatalf("%d processes of the job after the scheduler died; want 3 agents and 3 roles", len(procs))
	}
	t.Logf("scheduler killed; away for %v", outage)
	time.Sleep(outage)
	// Nothing gave up.
	for _, pid := range procs {
		if err := syscall.Kill(pid, 0); err != nil {
			s.dumpLogs("outage")
			t.Fatalf("process %d of the job ended during a %v outage: %v", pid, outage, err)
		}
	}
	w.mu.Lock()
	w.job = nil
	w.mu.Unlock()
	s.start()
	final := w.until(t, "completion", 4*time.Minute, func(j *consolepb.JobView) bool {
		return j.State != "running" && j.State != "starting"
	})
	if final.State != "completed" {
		s.dumpLogs("outage")
		t.Fatalf("job ended %s: %s", final.State, final.Error)
	}
	if final.ShardsDone != final.ShardsTotal || final.ShardsTodo != 0 || final.ShardsDoing != 0 {
		t.Errorf("after the outage: shards todo %d doing %d done %d of %d", final.ShardsTodo, final.ShardsDoing, final.ShardsDone, final.ShardsTotal)
	}
	// Softmax regression on MNIST, 2 epochs: about 0.91 undisturbed.
	if final.Accuracy < 0.89 {
		t.Errorf("accuracy %.4f after the outage; want a normal one (about 0.91)", final.Accuracy)
	}
	for _, n := range final.Nodes {
		if n.State == "lost" {
			t.Errorf("%s is lost after the outage; every node came back", n.Name)
		}
	}
	t.Logf("completed after a %v outage: accuracy %.4f, shards %d/%d", outage, final.Accuracy, final.ShardsDone, final.ShardsTotal)
}

// TestSchedulerGoneForGood: with the scheduler killed for good, every
// agent stops its role and exits once --orphan-timeout has passed: nothing
// of the job is left running.
func TestSchedulerGoneForGood(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process outage test")
	}
	// Mostly waiting (an outage, an orphan timeout): runs beside the other
	// waiting tests.
	t.Parallel()
	const orphan = 15 * time.Second
	s := runScheduler(t, "orphan", "--orphan-timeout", orphan.String())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s.outageTraining(ctx)
	s.kill9()
	killed := time.Now()
	if n := len(tagged(s.tag)); n != 6 {
		t.Fatalf("%d processes of the job after the scheduler died; want 3 agents and 3 roles", n)
	}
	// Bounded wait (not a threshold): they go once the orphan timeout has
	// passed and their next reconnect fails.
	for len(tagged(s.tag)) > 0 {
		if time.Since(killed) > orphan+2*time.Minute {
			s.dumpLogs("outage")
			t.Fatalf("processes of the job still running %v after the scheduler died (orphan timeout %v): %v",
				time.Since(killed).Round(time.Second), orphan, tagged(s.tag))
		}
		time.Sleep(500 * time.Millisecond)
	}
	gone := time.Since(killed)
	if gone < orphan {
		t.Errorf("the job's processes ended %v after the scheduler died, before the orphan timeout of %v", gone, orphan)
	}
	t.Logf("every process of the job gone %v after the scheduler died (orphan timeout %v)", gone.Round(time.Second), orphan)
}

// TestKillBeforeReconnect: a job killed from the console stops all its
// processes whether or not their agents are connected: killed on a
// scheduler restarted a moment before (its agents not back yet), or on the
// scheduler that launched it; either way the scheduler is then killed -9
// at once, and nothing of the job is left running.
func TestKillBeforeReconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	// Mostly waiting (an outage, an orphan timeout): runs beside the other
	// waiting tests.
	t.Parallel()
	for _, restart := range []bool{true, false} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			s := runScheduler(t, "killreconnect")
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			s.outageTraining(ctx)
			if restart {
				s.kill9()
				s.start()
				s.waitHTTP()
			}
			out, err := exec.CommandContext(ctx, kelpieBin, "job", "kill", "outage", "--scheduler", s.httpAddr, "--token", "op-token").CombinedOutput()
			if err != nil {
				t.Fatalf("kelpie job kill: %v\n%s", err, out)
			}
			s.kill9()
			start := time.Now()
			for len(tagged(s.tag)) > 0 {
				if time.Since(start) > time.Minute {
					s.dumpLogs("outage")
					t.Fatalf("processes of the killed job still running a minute later: %v", tagged(s.tag))
				}
				time.Sleep(200 * time.Millisecond)
			}
			t.Logf("nothing of the killed job left %v after the scheduler died", time.Since(start).Round(time.Millisecond))
		})
	}
}

// outageTraining submits outageSpec to s and waits until the job trains
// (past iteration 30); its console closes when the test ends.
func (s *scheduler) outageTraining(ctx context.Context) {
	s.t.Helper()
	c, w := s.console(ctx, "outage")
	s.t.Cleanup(func() { c.Close() })
	s.submit(ctx, c, outageSpec)
	_ = c.Subscribe(ctx, []string{"outage"})
	w.until(s.t, "training", 2*time.Minute, func(j *consolepb.JobView) bool { return j.Iteration > 30 })
}

// TestAdoptedAgentKilled: after a scheduler restart, a worker's agent
// comes back and is then killed -9 (its role dies with it). The restarted
// scheduler did not launch that agent, so it learns of its end from the
// launch records once the node is lost: it launches the agent again, and
// the job completes with every shard done.
func TestAdoptedAgentKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel()
	s := runScheduler(t, "adoptkill")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s.outageTraining(ctx)
	s.kill9()
	s.start()
	restarted := time.Now()
	c2, w2 := s.console(ctx, "outage")
	defer c2.Close()
	_ = c2.Subscribe(ctx, []string{"outage"})
	// Every agent back: each node reporting to the new scheduler.
	w2.until(t, "agents back", 2*time.Minute, func(j *consolepb.JobView) bool {
		for _, n := range []string{"server-0", "worker-0", "worker-1"} {
			nv := node2(j, n)
			if nv == nil || nv.State != "running" || !nv.GetLastReport().AsTime().After(restarted) {
				return false
			}
		}
		return true
	})
	rf := &roundFaults{s: s, job: "outage", w: w2}
	pid := rf.agentPid("worker-0")
	if err := signal(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the agent of worker-0 (pid %d): %v", pid, err)
	}
	end := w2.until(t, "outage end", 3*time.Minute, func(j *consolepb.JobView) bool {
		return j.State != "running" && j.State != "starting" && j.State != ""
	})
	if end.State != "completed" || end.ShardsDone != end.ShardsTotal {
		s.dumpLogs("outage")
		t.Fatalf("job ended %s (%s), shards %d of %d; want completed with every shard", end.State, end.Error, end.ShardsDone, end.ShardsTotal)
	}
	if after := rf.agentPid("worker-0"); after == pid {
		t.Errorf("worker-0's agent was not launched again (newest record pid %d)", after)
	}
	// Lost once, launched again once: the new agent had the heartbeat
	// timeout to connect.
	w2.mu.Lock()
	var lost, again []string
	for _, e := range w2.events {
		switch {
		case strings.HasPrefix(e.Message, "worker-0 lost"):
			lost = append(lost, e.Message)
		case strings.Contains(e.Message, "worker-0") && strings.Contains(e.Message, "launched again"):
			again = append(again, e.Message)
		}
	}
	w2.mu.Unlock()
	if len(lost) != 1 || len(again) != 1 {
		t.Errorf("worker-0 lost %d times %q and launched again %d times %q; want once each", len(lost), lost, len(again), again)
	}
}
