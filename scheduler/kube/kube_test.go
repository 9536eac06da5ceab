package kube_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/kube"
	"github.com/kelpie/kelpie/scheduler/kube/kubetest"
)

const jobYAML = `name: kt
model: {kind: softmax}
data: {kind: mnist}
cluster:
  servers: 1
  workers: 2
  resources:
    server: {cpu: 500m, memory: 256Mi}
    worker: {cpu: 250m}
`

// events collects a launcher's events.
type events struct {
	mu  sync.Mutex
	evs []kube.Event
}

func (e *events) add(ev kube.Event) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }

func (e *events) String() string { e.mu.Lock(); defer e.mu.Unlock(); return fmt.Sprint(e.evs) }

func (e *events) find(kind, node string) (kube.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Kind == kind && (node == "" || ev.Node == node) {
			return ev, true
		}
	}
	return kube.Event{}, false
}

// last is the latest event of a kind (for one node, unless node is "").
func (e *events) last(kind, node string) (kube.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.evs) - 1; i >= 0; i-- {
		if ev := e.evs[i]; ev.Kind == kind && (node == "" || ev.Node == node) {
			return ev, true
		}
	}
	return kube.Event{}, false
}

// eventually polls cond until it holds or a minute has passed.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not so after a minute: %s", what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func pods(t *testing.T, c *kubetest.Cluster, job string) []corev1.Pod {
	t.Helper()
	l, err := c.Client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelJob + "=" + job})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	return l.Items
}

func podNames(ps []corev1.Pod) []string {
	var out []string
	for _, p := range ps {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TestKubernetes runs the Kubernetes tests on one control plane (starting
// one takes seconds to minutes on a loaded machine).
func TestKubernetes(t *testing.T) {
	c := kubetest.Start(t)
	c.AddNode(t, "fake-0", "4", "8Gi", 20)
	t.Run("objects", func(t *testing.T) { testObjects(t, c) })
	t.Run("deploy", func(t *testing.T) { testDeploy(t, c) })
	t.Run("train", func(t *testing.T) { testTrain(t, c) })
	t.Run("busy", func(t *testing.T) { testBusy(t, c) })
}

// testObjects checks, against a real API server with its
// controller-manager and scheduler, the objects a job becomes and what the
// launcher does with them: KILL_RESTART, a Pod deleted by hand, a removed
// node, a Pod that cannot be scheduled, and garbage collection.
func testObjects(t *testing.T, c *kubetest.Cluster) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var evs events
	l, err := kube.New(kube.Config{Client: c.Client, Namespace: "default", Image: "kelpie:test",
		PendingThreshold: time.Second, RelaunchLimit: 1, Events: evs.add})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := spec.Parse("kt.yaml", []byte(jobYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.StartJob(ctx, s); err != nil {
		t.Fatal(err)
	}
	args := func(role, node string) []string {
		return []string{"agent", "--scheduler", "sched:7070", "--job", "kt", "--node", node, "--role", role}
	}
	for _, n := range []struct{ role, node string }{{"server", "server-0"}, {"worker", "worker-0"}, {"worker", "worker-1"}} {
		if err := l.StartNode(ctx, "kt", n.role, n.node, args(n.role, n.node)); err != nil {
			t.Fatal(err)
		}
	}

	root, err := c.Client.CoreV1().ConfigMaps("default").Get(ctx, "kelpie-kt", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("root: %v", err)
	}
	if !strings.Contains(root.Data["spec.yaml"], "name: kt") {
		t.Errorf("root holds %q; want the job's spec", root.Data["spec.yaml"])
	}
	owned := func(o metav1.ObjectMeta) bool {
		return len(o.OwnerReferences) == 1 && o.OwnerReferences[0].UID == root.UID && *o.OwnerReferences[0].Controller
	}
	svc, err := c.Client.CoreV1().Services("default").Get(ctx, "kelpie-kt", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !owned(svc.ObjectMeta) {
		t.Errorf("service: %v, %+v; want headless and owned by the root", err, svc)
	}
	sec, err := c.Client.CoreV1().Secrets("default").Get(ctx, kube.SecretName("kt"), metav1.GetOptions{})
	if err != nil || !owned(sec.ObjectMeta) {
		t.Errorf("secret: %v; want one owned by the root", err)
	}
	ps := pods(t, c, "kt")
	if got, want := podNames(ps), []string{"kt-server-0-0", "kt-worker-0-0", "kt-worker-1-0"}; !slices.Equal(got, want) {
		t.Fatalf("pods = %v; want %v", got, want)
	}
	for _, p := range ps {
		node := p.Labels[kube.LabelNode]
		role := p.Labels[kube.LabelRole]
		ctr := p.Spec.Containers[0]
		wantArgs := append(args(role, node), "--listen", "$(POD_IP):0", "--host", "$(POD_NAME)")
		switch {
		case !owned(p.ObjectMeta):
			t.Errorf("%s: owners %v; want the root", p.Name, p.OwnerReferences)
		case p.Labels[kube.LabelJob] != "kt" || p.Labels[kube.LabelRelaunch] != "0" || !strings.HasPrefix(node, role+"-"):
			t.Errorf("%s: labels %v", p.Name, p.Labels)
		case p.Spec.RestartPolicy != corev1.RestartPolicyNever || p.Spec.Hostname != node || p.Spec.Subdomain != "kelpie-kt":
			t.Errorf("%s: restart %s, hostname %s.%s", p.Name, p.Spec.RestartPolicy, p.Spec.Hostname, p.Spec.Subdomain)
		case ctr.Image != "kelpie:test" || !slices.Equal(ctr.Command, []string{"/kelpie"}) || !slices.Equal(ctr.Args, wantArgs):
			t.Errorf("%s: image %s command %v args %v; want args %v", p.Name, ctr.Image, ctr.Command, ctr.Args, wantArgs)
		case ctr.Env[0].Name != "POD_IP" || ctr.Env[0].ValueFrom.FieldRef.FieldPath != "status.podIP":
			t.Errorf("%s: env %v; want POD_IP from status.podIP", p.Name, ctr.Env)
		}
		cpu := ctr.Resources.Requests.Cpu().String()
		mem := ctr.Resources.Limits.Memory().String()
		if want := map[string]string{"server": "500m", "worker": "250m"}[role]; cpu != want {
			t.Errorf("%s: cpu request %s; want %s", p.Name, cpu, want)
		}
		if want := map[string]string{"server": "256Mi", "worker": "0"}[role]; mem != want {
			t.Errorf("%s: memory limit %s; want %s", p.Name, mem, want)
		}
	}

	// KILL_RESTART: exactly one Pod replaced, its relaunch label one higher.
	name, err := l.Restart(ctx, "kt", "worker-1")
	if err != nil || name != "kt-worker-1-1" {
		t.Fatalf("Restart = %q, %v; want kt-worker-1-1", name, err)
	}
	eventually(t, "worker-1 replaced", func() (bool, string) {
		got := podNames(pods(t, c, "kt"))
		return slices.Equal(got, []string{"kt-server-0-0", "kt-worker-0-0", "kt-worker-1-1"}), fmt.Sprint(got)
	})

	// A Pod deleted by hand is relaunched, once (the limit here).
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "kt-worker-0-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "worker-0 relaunched", func() (bool, string) {
		got := podNames(pods(t, c, "kt"))
		return slices.Contains(got, "kt-worker-0-1") && !slices.Contains(got, "kt-worker-0-0"), fmt.Sprint(got)
	})
	if _, ok := evs.find(kube.EventRelaunched, "worker-0"); !ok {
		t.Errorf("no relaunched event for worker-0: %s", evs.String())
	}
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "kt-worker-0-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "worker-0 given up", func() (bool, string) {
		_, ok := evs.find(kube.EventGaveUp, "worker-0")
		return ok, fmt.Sprint(podNames(pods(t, c, "kt")))
	})

	// REMOVE_WORKER deletes the Pod for good.
	if err := l.StopNode(ctx, "kt", "worker-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "worker-1 deleted", func() (bool, string) {
		got := podNames(pods(t, c, "kt"))
		return slices.Equal(got, []string{"kt-server-0-0"}), fmt.Sprint(got)
	})

	// No capacity left: a Pod that fits nowhere stays Pending and the job
	// is "cluster busy"; it clears once a node with room comes.
	big := "worker-2"
	s.Cluster.Resources.Worker.CPU = "64"
	if err := l.EndJob(ctx, "kt"); err != nil {
		t.Fatal(err)
	}
	// Every object goes: the controller-manager's garbage collector
	// deletes what the root owned.
	eventually(t, "job garbage-collected", func() (bool, string) {
		left := podNames(pods(t, c, "kt"))
		_, errS := c.Client.CoreV1().Services("default").Get(ctx, "kelpie-kt", metav1.GetOptions{})
		_, errX := c.Client.CoreV1().Secrets("default").Get(ctx, kube.SecretName("kt"), metav1.GetOptions{})
		all := len(pods(t, c, "kt")) == 0 && apierrors.IsNotFound(errS) && apierrors.IsNotFound(errX)
		return all, fmt.Sprintf("pods %v, service %v, secret %v", left, errS, errX)
	})

	s.Name = "busy"
	if err := l.StartJob(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := l.StartNode(ctx, "busy", "worker", big, args("worker", big)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "busy", func() (bool, string) { return l.Busy("busy") != "", evs.String() })
	// The first busy event may come before kube-scheduler has judged the
	// Pod ("Pending"); its verdict follows as a busy event of its own.
	eventually(t, "busy for being unschedulable", func() (bool, string) {
		ev, _ := evs.last(kube.EventBusy, big)
		return ev.Reason == "Unschedulable", evs.String()
	})
	if why := l.Busy("busy"); !strings.Contains(why, "Unschedulable") {
		t.Errorf("Busy says %q; want it to name Unschedulable", why)
	}
	c.AddNode(t, "fake-big", "128", "64Gi", 10)
	eventually(t, "no longer busy", func() (bool, string) { return l.Busy("busy") == "", evs.String() })
	if err := l.EndJob(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
}
