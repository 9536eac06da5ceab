package kubetest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Kubelet plays the kubelet for kelpie's Pods on kwok's fake nodes: a
// Running Pod bound to a node gets its container's command run as a local
// process (Exe in place of the image's binary), with the Pod's arguments
// and environment; POD_IP is 127.0.0.1 (every "Pod" shares loopback) and
// POD_NAME the Pod's name. When the Pod is deleted its process group is
// killed.
type Kubelet struct {
	Exe string    // the kelpie binary
	Env []string  // extra environment (a test tag)
	Out io.Writer // the processes' output (default os.Stderr)

	mu      sync.Mutex
	procs   map[string]*exec.Cmd // Pod UID -> its process
	started map[string]time.Time // Pod name -> when its process started
	stop    chan struct{}
	done    sync.WaitGroup
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Run starts watching the cluster's Pods; Stop ends it and every process.
func (k *Kubelet) Run(c *Cluster, namespace string) error {
	k.procs, k.started, k.stop = map[string]*exec.Cmd{}, map[string]time.Time{}, make(chan struct{})
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app.kubernetes.io/managed-by=kelpie" }))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { k.sync(o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { k.sync(o.(*corev1.Pod)) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				k.kill(string(p.UID))
			}
		},
	})
	if err != nil {
		return err
	}
	go inf.Run(k.stop)
	if !cache.WaitForCacheSync(k.stop, inf.HasSynced) {
		return fmt.Errorf("kubelet: informer did not sync")
	}
	return nil
}

// Started is when the process of each Pod started, by Pod name.
func (k *Kubelet) Started() map[string]time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]time.Time, len(k.started))
	for n, t := range k.started {
		out[n] = t
	}
	return out
}

// Running lists the Pods whose processes run, by UID.
func (k *Kubelet) Running() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.procs)
}

func (k *Kubelet) sync(p *corev1.Pod) {
	uid := string(p.UID)
	if p.DeletionTimestamp != nil {
		k.kill(uid)
		return
	}
	if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning || len(p.Spec.Containers) == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.procs[uid]; ok || k.stop == nil {
		return
	}
	select {
	case <-k.stop:
		return
	default:
	}
	ctr := p.Spec.Containers[0]
	env := map[string]string{"POD_IP": "127.0.0.1", "POD_NAME": p.Name}
	for _, e := range ctr.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	args := make([]string, len(ctr.Args))
	for i, a := range ctr.Args {
		args[i] = varRef.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[varRef.FindStringSubmatch(m)[1]]; ok {
				return v
			}
			return m
		})
	}
	cmd := exec.Command(k.Exe, args...)
	cmd.Env = append(os.Environ(), k.Env...)
	for n, v := range env {
		cmd.Env = append(cmd.Env, n+"="+v)
	}
	out := k.Out
	if out == nil {
		out = os.Stderr
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(out, "kubelet: start pod %s: %v\n", p.Name, err)
		return
	}
	k.procs[uid] = cmd
	k.started[p.Name] = time.Now()
	k.done.Add(1)
	go func() {
		defer k.done.Done()
		_ = cmd.Wait()
	}()
}

// kill ends a Pod's process group.
func (k *Kubelet) kill(uid string) {
	k.mu.Lock()
	cmd, ok := k.procs[uid]
	delete(k.procs, uid)
	k.mu.Unlock()
	if ok {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Stop stops watching and kills every process it started, waiting for them.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	if k.stop != nil {
		close(k.stop)
	}
	var uids []string
	for uid := range k.procs {
		uids = append(uids, uid)
	}
	k.mu.Unlock()
	for _, uid := range uids {
		k.kill(uid)
	}
	k.done.Wait()
}
