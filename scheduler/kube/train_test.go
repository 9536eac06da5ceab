package kube_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/scheduler/daemon"
	"github.com/kelpie/kelpie/scheduler/kube"
	"github.com/kelpie/kelpie/scheduler/kube/kubetest"
	"github.com/kelpie/kelpie/scheduler/manager"
)

const trainYAML = `name: ktrain
model: {kind: softmax}
data: {kind: mnist, epochs: 1, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster:
  servers: 2
  workers: 4
  resources:
    worker: {cpu: 100m}
`

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// testTrain runs a 2-server 4-worker job through the API server, the
// harness playing the kubelet: it trains to completion with exact shards;
// a KILL_RESTART replaces exactly one Pod; a Pod deleted by hand is
// relaunched; when the job is done every object goes.
func testTrain(t *testing.T, c *kubetest.Cluster) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "kelpie")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/kelpie/kelpie/cmd/kelpie").CombinedOutput(); err != nil {
		t.Fatalf("go build kelpie: %v\n%s", err, out)
	}
	kl := &kubetest.Kubelet{Exe: exe, Out: logWriter{t}, Env: []string{fmt.Sprintf("KELPIE_TEST_TAG=kube-%d", os.Getpid())}}
	if err := kl.Run(c, "default"); err != nil {
		t.Fatal(err)
	}
	defer kl.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var mgr atomic.Pointer[manager.Manager]
	var busyEvents atomic.Int32
	l, err := kube.New(kube.Config{Client: c.Client, Namespace: "default", Image: "kelpie:test", Exe: exe,
		Events: func(e kube.Event) {
			if e.Kind == kube.EventBusy {
				busyEvents.Add(1)
			}
			if m := mgr.Load(); m != nil {
				m.ClusterEvent(e.Job, e.Node, kube.Describe(e))
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, Exe: exe,
		Tick: 200 * time.Millisecond, Pods: l})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	mgr.Store(d.Manager)

	submitted := time.Now()
	if _, err := d.Manager.Submit(trainYAML, "test"); err != nil {
		t.Fatal(err)
	}
	view := func() *kelpiepb.JobView {
		vs := d.Manager.View([]string{"ktrain"}, 0)
		if len(vs) == 0 {
			return &kelpiepb.JobView{}
		}
		return vs[0]
	}
	eventually(t, "first report", func() (bool, string) { v := view(); return v.State == "running", v.State })
	firstReport := time.Now()
	var firstPod time.Time
	for _, at := range kl.Started() {
		if firstPod.IsZero() || at.Before(firstPod) {
			firstPod = at
		}
	}
	t.Logf("2 servers, 4 workers: submit to first report %s, first agent process to first report %s (loaded machine)",
		firstReport.Sub(submitted).Round(time.Millisecond), firstReport.Sub(firstPod).Round(time.Millisecond))

	before := podNames(pods(t, c, "ktrain"))
	if len(before) != 6 {
		t.Fatalf("pods %v; want 6", before)
	}
	if _, err := d.Manager.Trigger("ktrain", &kelpiepb.Action{Kind: "KILL_RESTART", Target: "worker-1", Reason: "test"}, "test"); err != nil {
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
	if n := busyEvents.Load(); n != 0 {
		t.Logf("%d busy events on an idle cluster", n)
	}
}
