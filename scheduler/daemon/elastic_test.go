package daemon

import (
	"context"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/manager"
)

const elasticBase = `
name: NAME
model: {kind: mlp, hidden: [128]}
data: {kind: mnist, epochs: 6, seed: 1}
train: {global_batch: 128, lr: 0.05, optimizer: momentum, momentum: 0.9, lr_decay: cosine}
cluster: {servers: 2, workers: 4, block_bytes: 32768, assignment: size-balanced}
`

const elasticScript = `script:
  - {at: 500ms, action: add-server}
  - {at: 1s, action: restart, node: worker-1}
  - {at: 1500ms, action: remove-server, node: server-0}
  - {at: 2s, action: restart, node: worker-1}
  - {at: 2500ms, action: reassign}
  - {at: 3s, action: restart, node: worker-1}
  - {at: 3500ms, action: adjust-batch, sizes: {worker-0: 48, worker-1: 16, worker-2: 32, worker-3: 32}}
  - {at: 4s, action: add-worker}
  - {at: 5s, action: remove-worker, node: worker-2}
`

func runJob(t *testing.T, d *Daemon, src string, during func(name string)) *manager.Result {
	t.Helper()
	s, err := spec.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	name, err := d.Manager.SubmitSpec(s, "test")
	if err != nil {
		t.Fatal(err)
	}
	if during != nil {
		go during(name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := d.Manager.Wait(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestElasticJob: servers added and removed, blocks rebalanced, a worker
// restarted three times, the batch split changed, a worker added and
// another removed while an MNIST job trains — and a worker killed with
// SIGKILL. The job completes with every
// shard DONE exactly once in the count, its accuracy within half a point of
// the same job undisturbed, and no process left behind.
func TestElasticJob(t *testing.T) {
	if testing.Short() {
		t.Skip("two MNIST jobs")
	}
	// The scheduler's events go to the test log too: a failure shows what
	// the actions did.
	d := startLogged(t)
	defer d.Close(true)
	calm := runJob(t, d, strings.Replace(elasticBase, "NAME", "calm", 1), nil)
	killed := make(chan int, 1) // the PID killed, 0 if none
	stormy := runJob(t, d, strings.Replace(elasticBase, "NAME", "stormy", 1)+elasticScript, func(name string) {
		// kill -9 of a worker's process on top of the script, once it
		// trains (it has reported an iteration).
		pid := 0
		for deadline := time.Now().Add(2 * time.Minute); pid == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			for _, v := range d.Manager.View([]string{name}, 1) {
				for _, n := range v.Nodes {
					if n.Name == "worker-3" && n.Pid > 0 && n.Iteration > 0 {
						if err := syscall.Kill(int(n.Pid), syscall.SIGKILL); err != nil {
							t.Errorf("kill -9 worker-3 (pid %d): %v", n.Pid, err)
						}
						pid = int(n.Pid)
					}
				}
			}
		}
		killed <- pid
	})
	// The SIGKILL happened, to a running worker-3, which came back: its
	// role registered again (the script restarts only worker-1).
	if pid := <-killed; pid == 0 {
		t.Error("worker-3 was never killed: the job ended first, or its view had no PID")
	}
	for _, n := range stormy.Nodes {
		if n.Name == "worker-3" && n.Restarts < 1 {
			t.Errorf("worker-3 has %d restarts after its SIGKILL; want at least 1", n.Restarts)
		}
	}
	t.Logf("calm: accuracy %.4f in %.1fs; stormy: accuracy %.4f in %.1fs, %d actions, paused %.3fs, samples %d",
		calm.Accuracy, calm.JCTSeconds, stormy.Accuracy, stormy.JCTSeconds, len(stormy.Actions), stormy.PausedSeconds, stormy.Samples)
	if stormy.ShardsDone != stormy.ShardsTotal || stormy.ShardsTotal != calm.ShardsTotal {
		t.Errorf("shards done/total %d/%d (calm %d)", stormy.ShardsDone, stormy.ShardsTotal, calm.ShardsTotal)
	}
	if stormy.Samples < calm.Samples {
		t.Errorf("stormy trained on %d samples, fewer than the %d of the data (at-least-once)", stormy.Samples, calm.Samples)
	}
	// Within half a point of the undisturbed job. The disruptions change
	// the order in which shards are trained; the cosine decay of the
	// learning rate keeps the final iterate's order noise well inside
	// that (gaps of 0.05–0.13 point measured; 0.04–0.28 without decay).
	if math.Abs(stormy.Accuracy-calm.Accuracy) > 0.005 {
		t.Errorf("accuracy %.4f vs %.4f undisturbed: more than half a point apart", stormy.Accuracy, calm.Accuracy)
	}
	kinds := map[string]int{}
	for _, a := range stormy.Actions {
		if a.State != "applied" {
			t.Errorf("action %s %s %s ended %s: %s", a.ID, a.Kind, a.Node, a.State, a.Error)
		}
		kinds[a.Kind]++
	}
	for k, n := range map[string]int{"ADD_SERVER": 1, "REMOVE_SERVER": 1, "REASSIGN": 1, "KILL_RESTART": 3, "ADJUST_BS": 1,
		"ADD_WORKER": 1, "REMOVE_WORKER": 1} {
		if kinds[k] != n {
			t.Errorf("%d %s actions applied; want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
	if stormy.PausedSeconds <= 0 {
		t.Error("no paused time recorded for three table changes")
	}
	noProcessLeft(t, d, "stormy")
}

// noProcessLeft fails t if a process launched for job still runs 10 s
// after it ended.
func noProcessLeft(t *testing.T, d *Daemon, job string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range d.Manager.Procs(job) {
		for syscall.Kill(p.Pid(), 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if syscall.Kill(p.Pid(), 0) == nil {
			t.Errorf("%s (pid %d) still runs after the job", p.Name, p.Pid())
		}
	}
}

// TestLiveSyncSwitch: a spec script switches BSP to SSP(s=3) while the job
// runs; every server follows and the job completes.
func TestLiveSyncSwitch(t *testing.T) {
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Exe: kelpieBin,
		NodeLog: logWriter{t}, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	res := runJob(t, d, `
name: switch
model: {kind: softmax}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 128, lr: 0.1}
cluster: {servers: 2, workers: 4}
sync: {model: bsp}
stragglers:
  - {node: worker-3, kind: compute, sleep: 5ms, intensity: 1, probability: 0.5, start: 0s}
script:
  - {at: 500ms, action: set-sync, model: ssp, staleness: 3}
`, nil)
	if len(res.Actions) != 1 || res.Actions[0].Kind != "SET_SYNC" || res.Actions[0].State != "applied" {
		t.Fatalf("actions %+v; want one applied SET_SYNC", res.Actions)
	}
	if res.ShardsDone != res.ShardsTotal || res.Accuracy < 0.85 {
		t.Errorf("shards %d/%d, accuracy %.3f", res.ShardsDone, res.ShardsTotal, res.Accuracy)
	}
	if v := d.Manager.View([]string{"switch"}, 1); len(v) != 1 || v[0].Sync != "ssp s=3 lazy" {
		t.Errorf("job view sync = %q; want ssp s=3 lazy", v[0].Sync)
	}
}

// TestServerKill9: a server killed with SIGKILL is restarted by its agent
// from its last snapshot; the workers reconnect and the job completes with
// every shard done. What is lost is bounded by the snapshot interval.
func TestServerKill9(t *testing.T) {
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Exe: kelpieBin,
		NodeLog: logWriter{t}, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	killed := make(chan int32, 1)
	res := runJob(t, d, `
name: phoenix
model: {kind: mlp, hidden: [64]}
data: {kind: mnist, epochs: 3, seed: 1}
train: {global_batch: 128, lr: 0.05, optimizer: momentum, momentum: 0.9}
cluster: {servers: 2, workers: 3, block_bytes: 32768, snapshot_interval: 500ms}
`, func(name string) {
		// Halfway through (1,407 iterations), whatever the machine's
		// speed: a fixed 3 s outlasted the whole job on a fast one.
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if v := d.Manager.View([]string{name}, 1); len(v) == 1 && v[0].Iteration >= 700 {
				break
			}
		}
		for _, v := range d.Manager.View([]string{name}, 1) {
			for _, n := range v.Nodes {
				if n.Name == "server-1" && n.Pid > 0 {
					_ = syscall.Kill(int(n.Pid), syscall.SIGKILL)
					killed <- n.Pid
				}
			}
		}
	})
	select {
	case <-killed:
	default:
		t.Fatal("server-1 was not running when the test meant to kill it")
	}
	t.Logf("after a server kill -9: accuracy %.4f, shards %d/%d, samples %d, %.1fs", res.Accuracy, res.ShardsDone, res.ShardsTotal, res.Samples, res.JCTSeconds)
	if res.ShardsDone != res.ShardsTotal {
		t.Errorf("shards %d/%d", res.ShardsDone, res.ShardsTotal)
	}
	if res.Accuracy < 0.9 {
		t.Errorf("accuracy %.4f after restoring server-1 from its snapshot; want ≥ 0.9", res.Accuracy)
	}
}

// TestCheckpointRestartBackToBack: the papers' baseline
// (cluster.elasticity: checkpoint-restart) carries out three table changes
// that follow each other at once — each stops every agent, checkpoints and
// relaunches — and the job completes with every action applied, every
// shard done and no process left behind.
//
// It is the baseline's end-to-end test, not a reliable catch of the race
// that made elastic-40mb-checkpoint-restart fail ("worker-3: agent gave
// up: exit status 1", one run in nine, 2026-12-07): the next change began
// while the last was still being recorded, and its agents, stopped on
// purpose, read as agents that gave up. That needs a slow disk at one
// moment; three runs of this test before the fix passed.
func TestCheckpointRestartBackToBack(t *testing.T) {
	if testing.Short() {
		t.Skip("an MNIST job relaunched three times")
	}
	d := startLogged(t)
	defer d.Close(true)
	src := `
name: baseline
model: {kind: mlp, hidden: [64]}
data: {kind: mnist, epochs: 3, seed: 1}
train: {global_batch: 128, lr: 0.05}
cluster: {servers: 2, workers: 3, elasticity: checkpoint-restart}
script:
  - {at: 500ms, action: add-server}
  - {at: 600ms, action: remove-server, node: server-0}
  - {at: 700ms, action: reassign}
`
	res := runJob(t, d, src, nil) // a failed job is runJob's t.Fatal
	applied := 0
	for _, a := range res.Actions {
		if a.State != "applied" {
			t.Errorf("action %s %s %s ended %s: %s", a.ID, a.Kind, a.Node, a.State, a.Error)
			continue
		}
		applied++
		if a.PausedSeconds <= 0 {
			t.Errorf("action %s %s: no paused time (a checkpoint and restart pauses the job)", a.ID, a.Kind)
		}
	}
	if applied != 3 {
		t.Errorf("%d of 3 table changes applied", applied)
	}
	if res.ShardsDone != res.ShardsTotal {
		t.Errorf("shards done/total %d/%d", res.ShardsDone, res.ShardsTotal)
	}
	noProcessLeft(t, d, "baseline")
}
