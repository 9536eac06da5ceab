package daemon

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
	"github.com/kelpie/kelpie/scheduler/store"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// tagged lists the processes whose environment carries tag.
func tagged(tag string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte(tag)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

const restartSpec = `
name: survivor
model: {kind: softmax}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 1, workers: 2}
stragglers:
  - {node: worker-1, kind: compute, sleep: 6ms, intensity: 1}
`

// TestSchedulerKill9: kill -9 the scheduler mid-job and start it again on
// the same data dir and addresses: the job, its actions and the audit log
// are intact, the agents reconnect, and the job completes.
func TestSchedulerKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process restart test")
	}
	tag := fmt.Sprintf("KELPIE_TEST_TAG=restart-%d", time.Now().UnixNano())
	defer func() {
		for _, pid := range tagged(tag) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	dir := t.TempDir()
	tokens := writeTokens(t)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(kelpieBin, "scheduler", "--grpc", grpcAddr, "--http", httpAddr, "--data-dir", dir, "--tokens", tokens)
		cmd.Env = append(os.Environ(), tag)
		cmd.Stderr = logWriter{t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	sched := start()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	c, err := client.Dial(ctx, httpAddr, "op-token", client.WithSubscription([]string{"survivor"}, 10, 10),
		client.WithHandler(w.handle), client.WithBackoff(100*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: restartSpec}}}); err != nil || !r.Ok {
		t.Fatalf("submit: %v %v", r, err)
	}
	_ = c.Subscribe(ctx, []string{"survivor"})
	w.until(t, "training", time.Minute, func(j *consolepb.JobView) bool { return j.Iteration > 50 })
	r, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: "survivor",
		Action: &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-0"}}}})
	if err != nil || !r.Ok {
		t.Fatalf("restart: %v %v", r, err)
	}
	w.until(t, "the restart applied", time.Minute, func(j *consolepb.JobView) bool {
		return len(j.Actions) > 0 && j.Actions[0].State == "applied"
	})

	if err := sched.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = sched.Wait()
	w.mu.Lock()
	w.job = nil
	w.mu.Unlock()
	sched = start()
	defer func() {
		_ = sched.Process.Signal(syscall.SIGTERM)
		_ = sched.Wait()
	}()

	// The job and its action are back, and the agents report again.
	w.until(t, "the job after the restart", time.Minute, func(j *consolepb.JobView) bool {
		if len(j.Actions) == 0 || j.Actions[0].Id != r.ActionId || j.Actions[0].State != "applied" {
			return false
		}
		for _, n := range j.Nodes {
			if n.LastReport == nil {
				return false
			}
		}
		return true
	})
	final := w.until(t, "completion", 3*time.Minute, func(j *consolepb.JobView) bool { return j.State != "running" && j.State != "starting" })
	if final.State != "completed" {
		t.Fatalf("job ended %s: %s", final.State, final.Error)
	}
	// The shard queue came back from the store: every shard is DONE,
	// none lost, none counted twice.
	if final.ShardsDone != final.ShardsTotal || final.ShardsTodo != 0 || final.ShardsDoing != 0 {
		t.Errorf("after the restart: shards todo %d doing %d done %d of %d", final.ShardsTodo, final.ShardsDoing, final.ShardsDone, final.ShardsTotal)
	}
	_ = sched.Process.Signal(syscall.SIGTERM)
	_ = sched.Wait()

	st, err := store.Open(filepath.Join(dir, "kelpie.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	audit, _ := st.ListAudit(time.Time{}, 100)
	var kinds []string
	for _, e := range audit {
		kinds = append(kinds, e.What)
	}
	joined := strings.Join(kinds, "; ")
	if !strings.Contains(joined, "submit_job") || !strings.Contains(joined, "KILL_RESTART") {
		t.Errorf("audit log after the restart: %s; want the submit and the restart", joined)
	}
	// An agent whose role has finished sends its last state before it
	// exits (for up to 2 s while the scheduler is away): wait for them to
	// go, bounded generously for a loaded machine under -race.
	left := tagged(tag)
	for deadline := time.Now().Add(30 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = tagged(tag) {
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("processes left after the scheduler stopped: %v", left)
	}
}

// TestServerMovedThenSchedulerRestart: a server killed -9 comes back from
// its snapshot at a new address; then the scheduler is killed -9 and
// restarted, and a worker restarted after that must be handed the server's
// new address, not the one the job started with (the fault rounds found a
// job hung this way): the job completes with every shard DONE once.
func TestServerMovedThenSchedulerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	s := runScheduler(t, "moved")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	spec := strings.Replace(strings.Replace(outageSpec, "name: outage", "name: moved", 1),
		"cluster: {servers: 1, workers: 2}", "cluster: {servers: 1, workers: 2, snapshot_interval: 500ms}", 1)
	c, w := s.console(ctx, "moved")
	defer c.Close()
	s.submit(ctx, c, spec)
	_ = c.Subscribe(ctx, []string{"moved"})
	first := w.until(t, "training", 2*time.Minute, func(j *consolepb.JobView) bool {
		return j.Iteration > 30 && node(j, "server-0").GetPid() > 0
	})
	old := node(first, "server-0").GetPid()
	if err := syscall.Kill(int(old), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	moved := w.until(t, "server-0 back and training on", 2*time.Minute, func(j *consolepb.JobView) bool {
		n := node(j, "server-0")
		return n.GetPid() > 0 && n.GetPid() != old && n.GetState() == "running" && j.Iteration > first.Iteration+30
	})
	s.kill9()
	s.start()
	w.until(t, "the agents back", 2*time.Minute, func(j *consolepb.JobView) bool {
		return j.Iteration > moved.Iteration
	})
	if r, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: "moved",
		Action: &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-0"}}}}); err != nil || !r.Ok {
		t.Fatalf("restart worker-0: %v %v", r, err)
	}
	final := w.until(t, "the job's end", 3*time.Minute, func(j *consolepb.JobView) bool {
		return j.State != "running" && j.State != "starting" && j.State != ""
	})
	if final.State != "completed" || final.ShardsDone != final.ShardsTotal || final.Accuracy < 0.89 {
		s.dumpLogs("moved")
		t.Fatalf("job ended %s (%s): shards %d/%d, accuracy %.4f", final.State, final.Error, final.ShardsDone, final.ShardsTotal, final.Accuracy)
	}
	t.Logf("completed: accuracy %.4f, shards %d/%d", final.Accuracy, final.ShardsDone, final.ShardsTotal)
}
