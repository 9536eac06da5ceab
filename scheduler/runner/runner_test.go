package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/launch"
)

// kelpieBin is the kelpie binary the role processes run, built once.
var kelpieBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kelpie-runner-test")
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

func parse(t *testing.T, src string) *spec.Spec {
	t.Helper()
	s, err := spec.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// alive reports whether a process with this PID still exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func checkNoStrays(t *testing.T, procs []*launch.Proc) {
	t.Helper()
	for _, p := range procs {
		if alive(p.Pid()) {
			t.Errorf("%s (pid %d) is still running after Run returned", p.Name, p.Pid())
		}
	}
}

func TestRunCTRToCompletion(t *testing.T) {
	s := parse(t, `
name: ctr-small
model: {kind: sparse-lr}
data: {kind: synthetic-ctr, epochs: 1, samples: 20000, test_samples: 4000, features: 5000, fields: 6, seed: 3, batches_per_shard: 5}
train: {global_batch: 200, lr: 0.3, optimizer: adam}
cluster: {servers: 2, workers: 2}
sync: {model: bsp}
`)
	var procs []*launch.Proc
	res, err := Run(context.Background(), s, Options{Exe: kelpieBin, RoleLog: testWriter{t},
		OnStart: func(p []*launch.Proc) { procs = p }})
	if err != nil {
		t.Fatal(err)
	}
	checkNoStrays(t, procs)
	if res.Iterations != 100 || res.Samples != 20000 {
		t.Errorf("iterations, samples = %d, %d; want 100, 20000", res.Iterations, res.Samples)
	}
	if res.ShardsTotal != 20 || res.ShardsDone != 20 {
		t.Errorf("shards done/total = %d/%d; want 20/20", res.ShardsDone, res.ShardsTotal)
	}
	if res.Accuracy < 0.6 {
		t.Errorf("accuracy = %.3f; want a model that learned (≥ 0.6)", res.Accuracy)
	}
	if len(res.Nodes) != 4 || len(res.Servers) != 2 {
		t.Errorf("nodes, servers = %d, %d; want 4, 2", len(res.Nodes), len(res.Servers))
	}
	for _, n := range res.Nodes {
		if n.Role == "worker" && (n.BPTMeanS <= 0 || n.BatchSize != 100) {
			t.Errorf("node %+v: want a positive BPT and batch 100", n)
		}
	}
}

// TestWorkerKilled: a worker killed with SIGKILL fails the run with a clear
// message naming it, and no role process is left behind.
func TestWorkerKilled(t *testing.T) {
	s := parse(t, `
name: doomed
model: {kind: sparse-lr}
data: {kind: synthetic-ctr, epochs: 50, samples: 20000, test_samples: 1000, features: 5000, fields: 6}
train: {global_batch: 100}
cluster: {servers: 1, workers: 2}
`)
	var procs []*launch.Proc
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := Run(ctx, s, Options{Exe: kelpieBin, RoleLog: testWriter{t}, OnStart: func(p []*launch.Proc) {
		procs = p
		go func() {
			time.Sleep(1500 * time.Millisecond)
			for _, q := range p {
				if q.Name == "worker-1" {
					_ = q.Kill()
				}
			}
		}()
	}})
	if err == nil {
		t.Fatal("Run succeeded after a worker was killed")
	}
	if !strings.Contains(err.Error(), "worker-1") || !strings.Contains(err.Error(), "killed") {
		t.Errorf("error %q does not name worker-1 and how it died", err)
	}
	checkNoStrays(t, procs)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
