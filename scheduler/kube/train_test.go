package kube_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/daemon"
	"github.com/kelpie/kelpie/scheduler/kube"
	"github.com/kelpie/kelpie/scheduler/kube/kubetest"
	"github.com/kelpie/kelpie/scheduler/manager"
)

const trainYAML = `name: ktrain
model: {kind: softmax}
data: {kind: mnist, epochs: 10, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster:
  servers: 2
  workers: 4
  resources:
    worker: {cpu: 100m}
`

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// onCluster is kelpie's scheduler on the test cluster: the kubelet
// harness runs its Pods, its launcher talks to the API server with the
// token of deploy/'s ServiceAccount (the Role's rights and no more).
type onCluster struct {
	d    *daemon.Daemon
	kl   *kubetest.Kubelet
	busy atomic.Int32 // busy events seen
}

// startOnCluster builds kelpie, starts the kubelet harness, the launcher
// (Pods Pending beyond threshold make the cluster busy) and a scheduler
// whose nodes are Pods. Everything stops when the test ends.
func startOnCluster(t *testing.T, c *kubetest.Cluster, threshold time.Duration) *onCluster {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "kelpie")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/kelpie/kelpie/cmd/kelpie").CombinedOutput(); err != nil {
		t.Fatalf("go build kelpie: %v\n%s", err, out)
	}
	o := &onCluster{kl: &kubetest.Kubelet{Exe: exe, Out: logWriter{t}, Env: []string{fmt.Sprintf("KELPIE_TEST_TAG=kube-%d", os.Getpid())}}}
	if err := o.kl.Run(c, "default"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.kl.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var mgr atomic.Pointer[manager.Manager]
	l, err := kube.New(kube.Config{Client: saClient(t, c), Namespace: "default", Image: "kelpie:test", Exe: exe,
		PendingThreshold: threshold,
		Events: func(e kube.Event) {
			if e.Kind == kube.EventBusy {
				o.busy.Add(1)
			}
			if m := mgr.Load(); m != nil {
				m.ClusterEvent(e.Job, e.Node, kube.Describe(e))
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx); err != nil {
		t.Fatalf("launcher with the ServiceAccount's token: %v", err)
	}
	o.d, err = daemon.Start(daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, Exe: exe,
		Tick: 200 * time.Millisecond, Pods: l, Log: slog.New(slog.NewTextHandler(logWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.d.Close(true) })
	mgr.Store(o.d.Manager)
	return o
}

// view is the job's view ("" state when there is none).
func (o *onCluster) view(job string) *consolepb.JobView {
	vs := o.d.Manager.View([]string{job}, 0)
	if len(vs) == 0 {
		return &consolepb.JobView{}
	}
	return vs[0]
}

// testTrain runs a 2-server 4-worker job through the API server, the
// harness playing the kubelet and the launcher holding only the Role's
// rights: it trains to completion with exact shards; a KILL_RESTART
// replaces exactly one Pod; a Pod deleted by hand is relaunched;
// ADD_SERVER and REMOVE_WORKER create and delete one Pod each; when the job
// is done every object goes.
func testTrain(t *testing.T, c *kubetest.Cluster) {
	o := startOnCluster(t, c, 30*time.Second)
	d, kl := o.d, o.kl
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	submitted := time.Now()
	if _, err := d.Manager.Submit(trainYAML, "test"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "first report", func() (bool, string) { v := o.view("ktrain"); return v.State == "running", v.State })
	firstReport := time.Now()
	var firstPod time.Time
	for _, at := range kl.Started() {
		if firstPod.IsZero() || at.Before(firstPod) {
			firstPod = at
		}
	}
	t.Logf("2 servers, 4 workers: submit to first report %s, first agent process to first report %s",
		firstReport.Sub(submitted).Round(time.Millisecond), firstReport.Sub(firstPod).Round(time.Millisecond))

	before := podNames(pods(t, c, "ktrain"))
	if len(before) != 6 {
		t.Fatalf("pods %v; want 6", before)
	}
	if _, err := d.Manager.Trigger("ktrain", &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-1", Reason: "test"}, "test"); err != nil {
		t.Fatalf("KILL_RESTART: %v", err)
	}
	eventually(t, "worker-1's pod replaced", func() (bool, string) {
		got := podNames(pods(t, c, "ktrain"))
		want := slices.Clone(before)
		want[slices.Index(want, "ktrain-worker-1-0")] = "ktrain-worker-1-1"
		slices.Sort(want)
		return slices.Equal(got, want), fmt.Sprint(got)
	})
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "ktrain-worker-2-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "worker-2 relaunched", func() (bool, string) {
		got := podNames(pods(t, c, "ktrain"))
		return slices.Contains(got, "ktrain-worker-2-1"), fmt.Sprint(got)
	})

	// ADD_SERVER creates one Pod (server-2, its blocks migrated to it);
	// REMOVE_WORKER deletes one (worker-3's shards go back to the queue).
	applied := func(id string) func() (bool, string) {
		return func() (bool, string) {
			for _, a := range o.view("ktrain").Actions {
				if a.Id == id {
					return a.State == "applied", a.State + " " + a.Error
				}
			}
			return false, "no action " + id
		}
	}
	id, err := d.Manager.Trigger("ktrain", &consolepb.Action{Kind: "ADD_SERVER", Reason: "test"}, "test")
	if err != nil {
		t.Fatalf("ADD_SERVER: %v", err)
	}
	eventually(t, "server-2's pod created", func() (bool, string) {
		got := podNames(pods(t, c, "ktrain"))
		return slices.Contains(got, "ktrain-server-2-0") && len(got) == 7, fmt.Sprint(got)
	})
	eventually(t, "ADD_SERVER applied (blocks migrated)", applied(id))
	if id, err = d.Manager.Trigger("ktrain", &consolepb.Action{Kind: "REMOVE_WORKER", Target: "worker-3", Reason: "test"}, "test"); err != nil {
		t.Fatalf("REMOVE_WORKER: %v", err)
	}
	eventually(t, "worker-3's pod deleted", func() (bool, string) {
		got := podNames(pods(t, c, "ktrain"))
		return !slices.Contains(got, "ktrain-worker-3-0") && len(got) == 6, fmt.Sprint(got)
	})
	eventually(t, "REMOVE_WORKER applied", applied(id))
	for _, a := range o.view("ktrain").Actions {
		t.Logf("%s %s: %s %s", a.Kind, a.Target, a.State, a.Error)
	}

	res, err := d.Manager.Wait(ctx, "ktrain")
	if err != nil {
		t.Fatalf("job: %v", err)
	}
	if res.ShardsDone != res.ShardsTotal || res.ShardsTotal == 0 {
		t.Errorf("shards done %d of %d; want all", res.ShardsDone, res.ShardsTotal)
	}
	if res.Accuracy < 0.85 {
		t.Errorf("accuracy %.4f; want a trained softmax (>= 0.85)", res.Accuracy)
	}
	t.Logf("trained: %d iterations, accuracy %.4f, %.1fs", res.Iterations, res.Accuracy, res.JCTSeconds)
	eventually(t, "every object of the job gone", func() (bool, string) {
		left := podNames(pods(t, c, "ktrain"))
		_, err := c.Client.CoreV1().Services("default").Get(ctx, "kelpie-ktrain", metav1.GetOptions{})
		return len(pods(t, c, "ktrain")) == 0 && apierrors.IsNotFound(err), fmt.Sprintf("pods %v, service %v", left, err)
	})
	if n := o.busy.Load(); n != 0 {
		t.Logf("%d busy events on an idle cluster", n)
	}
}
