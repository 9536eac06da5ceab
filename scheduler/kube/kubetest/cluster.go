// Package kubetest starts a real Kubernetes control plane for tests —
// etcd, kube-apiserver, kube-controller-manager (garbage collection,
// ServiceAccounts), kube-scheduler and kwok's fake nodes, through kwokctl's
// binary runtime on loopback — and plays the kubelet: for each Pod of a
// kelpie job that kwok reports Running on a fake node it starts the Pod's
// command as a local process with the Pod's arguments and environment, and
// kills its process group when the Pod goes.
//
// The binaries come from `make k8s-bin` (.ci/k8s-bin.sh), cached under the
// user cache dir (make test and make test-k8s build them first). A test
// without them fails, naming the make target; KELPIE_K8S=off skips them.
package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Version is the control plane's version; keep in step with the Makefile.
const Version = "1.36.3"

// binaries kwokctl runs.
var binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd", "kwok", "kwokctl"}

// BinDir is where make k8s-bin puts the control plane.
func BinDir() string {
	if d := os.Getenv("KELPIE_K8S_BIN"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "kelpie", "k8s-v"+Version)
}

// Cluster is a running control plane.
type Cluster struct {
	Name       string
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
	dir        string
	bin        string
}

// Start starts a cluster for the test and deletes it at the test's end.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin := BinDir()
	if os.Getenv("KELPIE_K8S") == "off" {
		t.Skipf("KELPIE_K8S=off: the Kubernetes tests are skipped")
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("no %s in %s: run `make k8s-bin` (or set KELPIE_K8S=off to skip the Kubernetes tests)", b, bin)
		}
	}
	dir := t.TempDir()
	c := &Cluster{Name: fmt.Sprintf("kelpie-%d", time.Now().UnixNano()%1e9), dir: dir, bin: bin,
		Kubeconfig: filepath.Join(dir, "kubeconfig")}
	args := []string{"create", "cluster", "--name", c.Name, "--runtime", "binary",
		"--kubeconfig", c.Kubeconfig, "--wait", "3m",
		"--kube-apiserver-binary", filepath.Join(bin, "kube-apiserver"),
		"--etcd-binary", filepath.Join(bin, "etcd"),
		"--kube-controller-manager-binary", filepath.Join(bin, "kube-controller-manager"),
		"--kube-scheduler-binary", filepath.Join(bin, "kube-scheduler"),
		"--kwok-controller-binary", filepath.Join(bin, "kwok"),
	}
	t.Cleanup(func() {
		out, err := c.kwokctl(context.Background(), "delete", "cluster", "--name", c.Name, "--kubeconfig", c.Kubeconfig)
		if err != nil {
			t.Logf("kwokctl delete cluster: %v\n%s", err, out)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := c.kwokctl(ctx, args...); err != nil {
		t.Fatalf("kwokctl create cluster: %v\n%s", err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.Config = cfg
	if c.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatalf("client: %v", err)
	}
	// Pods need the namespace's default ServiceAccount, which the
	// controller-manager creates.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no default ServiceAccount: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return c
}

func (c *Cluster) kwokctl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "kwokctl"), args...)
	// kwokctl shapes the components' flags by version, and never
	// downloads what it is given.
	cmd.Env = append(os.Environ(), "KWOK_WORKDIR="+filepath.Join(c.dir, "kwok"), "KWOK_KUBE_VERSION=v"+Version,
		"KWOK_KUBECTL_BINARY="+filepath.Join(c.bin, "kubectl"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// AddNode adds a fake node (kwok runs its Pods) with the given CPU and
// memory and room for pods Pods.
func (c *Cluster) AddNode(t testing.TB, name, cpu, memory string, pods int) {
	t.Helper()
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods:   *resource.NewQuantity(int64(pods), resource.DecimalSI),
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{"type": "kwok", "kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Allocatable: alloc, Capacity: alloc},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("add node %s: %v", name, err)
	}
}

// Kubectl runs kubectl (make k8s-bin's, of the control plane's version)
// against the cluster.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
