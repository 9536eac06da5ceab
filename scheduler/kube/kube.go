// Package kube runs a job's nodes as Kubernetes Pods (kelpie scheduler
// --launcher kubernetes). Each job gets one root object, a ConfigMap holding
// its spec, that owns everything else of the job: a headless Service (each
// Pod's hostname is its node name and its subdomain the Service, so
// server-0.JOB.NAMESPACE.svc names the node across relaunches), a Secret for
// the nodes' certificates, and one Pod per node (restartPolicy Never; the
// agent inside restarts the role, the launcher replaces the Pod). Deleting
// the root garbage-collects the job.
//
// A shared informer, filtered on kelpie's labels, feeds Pod events back:
// a Pod Pending longer than a threshold makes the job "cluster busy";
// OOMKilled, Error and Evicted exits become node events with their reason;
// a Pod deleted by someone else is relaunched (kelpie.io/relaunch + 1) up to
// a limit. The design follows DLRover's master (bare Pods, owner reference
// to the job's root, relaunch count label, POD_IP from the downward API) and
// Kubeflow's training operator (informers, a headless Service).
//
// All mutable state is the Launcher's, under its one mutex; API calls are
// made without it held.
package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/launch"
)

// Labels every object of a job carries.
const (
	LabelJob       = "kelpie.io/job"
	LabelRole      = "kelpie.io/role"
	LabelNode      = "kelpie.io/node"
	LabelRelaunch  = "kelpie.io/relaunch"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "kelpie"
	// CertDir is where a Pod finds its job's certificate Secret.
	CertDir = "/etc/kelpie/certs"
)

// Event kinds the launcher reports.
const (
	EventBusy       = "busy"       // a Pod has been Pending longer than the threshold
	EventUnbusy     = "unbusy"     // no Pod of the job is Pending beyond it any more
	EventExited     = "exited"     // a Pod's agent ended abnormally (Reason: OOMKilled, Error, Evicted, ...)
	EventRelaunched = "relaunched" // a Pod deleted by someone else was replaced
	EventGaveUp     = "relaunch-limit"
)

// Event is something the cluster did to a job's node.
type Event struct {
	Job, Node, Pod string
	Kind           string
	Reason         string // Kubernetes' reason (OOMKilled, Error, Evicted, Unschedulable, ...)
	Message        string
}

// Config wires a launcher.
type Config struct {
	Client    kubernetes.Interface
	Namespace string // default "default"
	Image     string // the kelpie image (required)
	Exe       string // the kelpie binary inside the image (default /kelpie)
	// PendingThreshold is how long a Pod may stay Pending before the job is
	// "cluster busy" (default 30s).
	PendingThreshold time.Duration
	// RelaunchLimit is how many times the launcher replaces Pods deleted by
	// someone else, per node (default 3).
	RelaunchLimit int
	// Events, if set, receives what happens to the job's Pods (called
	// without the launcher's lock; must not block for long): an observer.
	Events func(Event)
	// Deliver, if set, is where the scheduler hears what happens to the
	// job's Pods: every event, described (Describe), is sent to it, waiting
	// while it is full until Run's context ends, so an event that comes
	// before the scheduler drains the channel is kept, not dropped.
	Deliver chan<- launch.ClusterEvent
	// NodeSecret, when set, gives the contents of a job's certificate
	// Secret (node certificates and keys, file name -> bytes) at StartJob.
	// Without it the Secret is created empty: the place the trust issue's
	// node certificates go.
	NodeSecret func(job string, nodes []string) (map[string][]byte, error)
	Now        func() time.Time
}

// Launcher launches and watches jobs' Pods.
type Launcher struct {
	cfg      Config
	informer cache.SharedIndexInformer

	// stop is Run's context's Done: a delivery waiting for room gives up
	// when it closes.
	stop <-chan struct{}

	mu   sync.Mutex
	jobs map[string]*job
}

type job struct {
	name   string
	rootUI metav1.OwnerReference
	res    spec.Resources
	nodes  map[string]*node
	ending bool
	busy   bool
}

type node struct {
	role     string
	args     []string
	relaunch int    // the current Pod's relaunch count
	pod      string // the current Pod's name
	removing bool   // deleted on purpose: do not relaunch
	lost     int    // Pods deleted by someone else and relaunched
	busy     bool   // the current Pod has been Pending beyond the threshold
	why      string // then: what the cluster said of it
	reason   string // then: the reason it was reported under
	exited   map[string]bool
}

// New makes a launcher. Run starts its informer.
func New(cfg Config) (*Launcher, error) {
	if cfg.Client == nil {
		return nil, errors.New("kube: a client is required")
	}
	if cfg.Image == "" {
		return nil, errors.New("kube: an image is required")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.Exe == "" {
		cfg.Exe = "/kelpie"
	}
	if cfg.PendingThreshold <= 0 {
		cfg.PendingThreshold = 30 * time.Second
	}
	if cfg.RelaunchLimit == 0 {
		cfg.RelaunchLimit = 3
	}
	if cfg.Events == nil {
		cfg.Events = func(Event) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := &Launcher{cfg: cfg, jobs: map[string]*job{}}
	f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(labels.Set{LabelManagedBy: managedBy}).String() + "," + LabelJob
		}))
	l.informer = f.Core().V1().Pods().Informer()
	_, err := l.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { l.observe(o) },
		UpdateFunc: func(_, o any) { l.observe(o) },
		DeleteFunc: l.deleted,
	})
	if err != nil {
		return nil, fmt.Errorf("kube: pod informer: %w", err)
	}
	return l, nil
}

// Run runs the informer and the Pending check until ctx ends. It returns
// once the informer has synced (the launcher is usable) and keeps going in
// the background.
func (l *Launcher) Run(ctx context.Context) error {
	l.stop = ctx.Done()
	go l.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), l.informer.HasSynced) {
		return fmt.Errorf("kube: pod informer did not sync: %v", ctx.Err())
	}
	go func() {
		t := time.NewTicker(max(l.cfg.PendingThreshold/4, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				l.checkPending()
			}
		}
	}()
	return nil
}

func (l *Launcher) ns() string { return l.cfg.Namespace }

// rootName is the name of a job's root ConfigMap, Service and Secret.
func rootName(job string) string { return "kelpie-" + job }

// SecretName is the name of a job's certificate Secret.
func SecretName(job string) string { return rootName(job) + "-certs" }

// PodName is the name of a node's Pod at a relaunch count.
func PodName(job, node string, relaunch int) string {
	return fmt.Sprintf("%s-%s-%d", job, node, relaunch)
}

// StartJob creates the job's root ConfigMap (its spec), its headless
// Service and its certificate Secret. Nodes come with StartNode.
func (l *Launcher) StartJob(ctx context.Context, s *spec.Spec) error {
	name := s.Name
	if len(rootName(name)) > 63-len("-certs") {
		return fmt.Errorf("kube: job name %q is too long for Kubernetes object names", name)
	}
	lbl := map[string]string{LabelJob: name, LabelManagedBy: managedBy}
	root := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: rootName(name), Labels: lbl},
		Data:       map[string]string{"spec.yaml": string(s.YAML())},
	}
	got, err := l.cfg.Client.CoreV1().ConfigMaps(l.ns()).Create(ctx, root, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("kube: create root of job %s: %w", name, err)
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: got.Name, UID: got.UID,
		Controller: ptr(true), BlockOwnerDeletion: ptr(true)}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: rootName(name), Labels: lbl, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 lbl,
			PublishNotReadyAddresses: true,
		},
	}
	if _, err := l.cfg.Client.CoreV1().Services(l.ns()).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube: create service of job %s: %w", name, err)
	}
	var data map[string][]byte
	if l.cfg.NodeSecret != nil {
		nodes := append(s.ServerNames(), s.WorkerNames()...)
		if data, err = l.cfg.NodeSecret(name, nodes); err != nil {
			return fmt.Errorf("kube: certificates of job %s: %w", name, err)
		}
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(name), Labels: lbl, OwnerReferences: []metav1.OwnerReference{owner}},
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
	if _, err := l.cfg.Client.CoreV1().Secrets(l.ns()).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube: create secret of job %s: %w", name, err)
	}
	l.mu.Lock()
	l.jobs[name] = &job{name: name, rootUI: owner, res: s.Cluster.Resources, nodes: map[string]*node{}}
	l.mu.Unlock()
	return nil
}

// StartNode creates the Pod of one node running `kelpie args...` (the
// manager's agent arguments).
func (l *Launcher) StartNode(ctx context.Context, jobName, role, nodeName string, args []string) error {
	l.mu.Lock()
	j, ok := l.jobs[jobName]
	if !ok || j.ending {
		l.mu.Unlock()
		return fmt.Errorf("kube: no running job %q", jobName)
	}
	n := j.nodes[nodeName]
	if n == nil {
		n = &node{role: role, exited: map[string]bool{}}
		j.nodes[nodeName] = n
	} else {
		n.relaunch++
	}
	n.role, n.args, n.removing, n.busy = role, append([]string(nil), args...), false, false
	pod, err := l.podLocked(j, nodeName, n)
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if _, err := l.cfg.Client.CoreV1().Pods(l.ns()).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube: create pod %s: %w", pod.Name, err)
	}
	return nil
}

// Restart replaces a node's Pod by a fresh one (KILL_RESTART): the old Pod
// is deleted and a new one, its relaunch label one higher, is created; the
// Kubernetes scheduler may place it on another machine.
func (l *Launcher) Restart(ctx context.Context, jobName, nodeName string) (string, error) {
	l.mu.Lock()
	j, ok := l.jobs[jobName]
	var n *node
	if ok {
		n = j.nodes[nodeName]
	}
	if n == nil || j.ending {
		l.mu.Unlock()
		return "", fmt.Errorf("kube: job %q has no node %q", jobName, nodeName)
	}
	old := n.pod
	n.relaunch++
	n.busy = false
	pod, err := l.podLocked(j, nodeName, n)
	l.mu.Unlock()
	if err != nil {
		return "", err
	}
	if err := l.deletePod(ctx, old); err != nil {
		return "", err
	}
	if _, err := l.cfg.Client.CoreV1().Pods(l.ns()).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("kube: create pod %s: %w", pod.Name, err)
	}
	return pod.Name, nil
}

// StopNode deletes a node's Pod for good (REMOVE_WORKER, REMOVE_SERVER).
func (l *Launcher) StopNode(ctx context.Context, jobName, nodeName string) error {
	l.mu.Lock()
	j, ok := l.jobs[jobName]
	var pod string
	if ok && j.nodes[nodeName] != nil {
		n := j.nodes[nodeName]
		n.removing = true
		pod = n.pod
	}
	l.mu.Unlock()
	if pod == "" {
		return fmt.Errorf("kube: job %q has no node %q", jobName, nodeName)
	}
	return l.deletePod(ctx, pod)
}

// EndJob deletes the job's root; the garbage collector deletes the rest.
func (l *Launcher) EndJob(ctx context.Context, jobName string) error {
	l.mu.Lock()
	if j, ok := l.jobs[jobName]; ok {
		j.ending = true
	}
	l.mu.Unlock()
	bg := metav1.DeletePropagationBackground
	err := l.cfg.Client.CoreV1().ConfigMaps(l.ns()).Delete(ctx, rootName(jobName), metav1.DeleteOptions{PropagationPolicy: &bg})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kube: delete job %s: %w", jobName, err)
	}
	l.mu.Lock()
	delete(l.jobs, jobName)
	l.mu.Unlock()
	return nil
}

// Busy says why the cluster is busy for a job, or "" when it is not: a Pod
// of the job, or of any other job of this launcher (the cluster's queue,
// AntDT §VI-A: a relaunched node would wait in it too), has been Pending
// beyond the threshold.
func (l *Launcher) Busy(jobName string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.jobs[jobName]; !ok {
		return ""
	}
	names := make([]string, 0, len(l.jobs))
	for name := range l.jobs {
		names = append(names, name)
	}
	slices.Sort(names)
	// The job's own Pods first, then the others'.
	slices.SortStableFunc(names, func(a, b string) int { return boolRank(b == jobName) - boolRank(a == jobName) })
	for _, name := range names {
		j := l.jobs[name]
		if j.ending || !j.busy {
			continue
		}
		nodes := make([]string, 0, len(j.nodes))
		for n := range j.nodes {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
		for _, n := range nodes {
			if nd := j.nodes[n]; nd.busy {
				if name == jobName {
					return nd.why
				}
				return fmt.Sprintf("job %s's %s", name, nd.why)
			}
		}
	}
	return ""
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Pods lists the current Pod of every node of a job, by node.
func (l *Launcher) Pods(jobName string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	if j, ok := l.jobs[jobName]; ok {
		for name, n := range j.nodes {
			if !n.removing {
				out[name] = n.pod
			}
		}
	}
	return out
}

func (l *Launcher) deletePod(ctx context.Context, name string) error {
	zero := int64(0)
	err := l.cfg.Client.CoreV1().Pods(l.ns()).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kube: delete pod %s: %w", name, err)
	}
	return nil
}

// podLocked builds the current Pod of node n and records its name.
func (l *Launcher) podLocked(j *job, nodeName string, n *node) (*corev1.Pod, error) {
	rr := j.res.Worker
	if n.role == "server" {
		rr = j.res.Server
	}
	req, lim := corev1.ResourceList{}, corev1.ResourceList{}
	if rr.CPU != "" {
		q, err := resource.ParseQuantity(rr.CPU)
		if err != nil {
			return nil, fmt.Errorf("kube: cluster.resources.%s.cpu: %w", n.role, err)
		}
		req[corev1.ResourceCPU] = q
	}
	if rr.Memory != "" {
		q, err := resource.ParseQuantity(rr.Memory)
		if err != nil {
			return nil, fmt.Errorf("kube: cluster.resources.%s.memory: %w", n.role, err)
		}
		req[corev1.ResourceMemory], lim[corev1.ResourceMemory] = q, q
	}
	n.pod = PodName(j.name, nodeName, n.relaunch)
	lbl := map[string]string{LabelJob: j.name, LabelRole: n.role, LabelNode: nodeName,
		LabelRelaunch: strconv.Itoa(n.relaunch), LabelManagedBy: managedBy}
	args := append(append([]string(nil), n.args...), "--listen", "$(POD_IP):0", "--host", "$(POD_NAME)")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: n.pod, Labels: lbl, OwnerReferences: []metav1.OwnerReference{j.rootUI}},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Hostname:      nodeName,
			Subdomain:     rootName(j.name),
			Containers: []corev1.Container{{
				Name:    n.role,
				Image:   l.cfg.Image,
				Command: []string{l.cfg.Exe},
				Args:    args,
				Env: []corev1.EnvVar{
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "KELPIE_JOB", Value: j.name},
					{Name: "KELPIE_NODE", Value: nodeName},
				},
				Resources:    corev1.ResourceRequirements{Requests: req, Limits: lim},
				VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: CertDir, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "certs", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: SecretName(j.name), Optional: ptr(true)}}}},
		},
	}, nil
}

// nodeOf finds the launcher's record of a Pod: its job and node, and
// whether it is the node's current Pod.
func (l *Launcher) nodeOfLocked(p *corev1.Pod) (*job, string, *node, bool) {
	j, ok := l.jobs[p.Labels[LabelJob]]
	if !ok {
		return nil, "", nil, false
	}
	name := p.Labels[LabelNode]
	n := j.nodes[name]
	if n == nil {
		return j, name, nil, false
	}
	return j, name, n, n.pod == p.Name
}

// observe classifies a Pod's new state.
func (l *Launcher) observe(o any) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	var evs []Event
	l.mu.Lock()
	j, name, n, current := l.nodeOfLocked(p)
	if current {
		if p.Status.Phase != corev1.PodPending && n.busy {
			n.busy = false
			evs = append(evs, l.rebusyLocked(j)...)
		}
		if reason, msg, bad := exitOf(p); bad && !n.exited[p.Name] {
			n.exited[p.Name] = true
			evs = append(evs, Event{Job: j.name, Node: name, Pod: p.Name, Kind: EventExited, Reason: reason, Message: msg})
		}
	}
	l.mu.Unlock()
	l.emit(evs)
}

// exitOf says whether a Pod ended abnormally, and why.
func exitOf(p *corev1.Pod) (reason, msg string, bad bool) {
	if p.Status.Reason == "Evicted" {
		return "Evicted", p.Status.Message, true
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			r := t.Reason
			if r == "" {
				r = "Error"
			}
			m := t.Message
			if m == "" {
				m = fmt.Sprintf("exit code %d", t.ExitCode)
			}
			return r, m, true
		}
	}
	if p.Status.Phase == corev1.PodFailed {
		r := p.Status.Reason
		if r == "" {
			r = "Error"
		}
		return r, p.Status.Message, true
	}
	return "", "", false
}

// deleted relaunches a node whose current Pod someone else deleted.
func (l *Launcher) deleted(o any) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	p, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	l.mu.Lock()
	j, name, n, current := l.nodeOfLocked(p)
	if !current || n.removing || j.ending {
		l.mu.Unlock()
		return
	}
	if n.lost >= l.cfg.RelaunchLimit {
		ev := Event{Job: j.name, Node: name, Pod: p.Name, Kind: EventGaveUp, Reason: "Deleted",
			Message: fmt.Sprintf("pod %s was deleted; relaunched %d times already, the limit", p.Name, n.lost)}
		n.removing = true
		l.mu.Unlock()
		l.emit([]Event{ev})
		return
	}
	n.lost++
	n.relaunch++
	n.busy = false
	pod, err := l.podLocked(j, name, n)
	l.mu.Unlock()
	ev := Event{Job: j.name, Node: name, Pod: p.Name, Kind: EventRelaunched, Reason: "Deleted"}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = l.cfg.Client.CoreV1().Pods(l.ns()).Create(ctx, pod, metav1.CreateOptions{})
		cancel()
	}
	if err != nil {
		ev.Kind, ev.Message = EventGaveUp, fmt.Sprintf("pod %s was deleted and could not be relaunched: %v", p.Name, err)
	} else {
		ev.Message = fmt.Sprintf("pod %s was deleted by someone else; relaunched as %s", p.Name, pod.Name)
	}
	l.emit([]Event{ev})
}

// checkPending marks nodes whose Pod has been Pending beyond the threshold.
func (l *Launcher) checkPending() {
	now := l.cfg.Now()
	var evs []Event
	l.mu.Lock()
	for _, o := range l.informer.GetStore().List() {
		p := o.(*corev1.Pod)
		if p.Status.Phase != corev1.PodPending || now.Sub(p.CreationTimestamp.Time) < l.cfg.PendingThreshold {
			continue
		}
		j, name, n, current := l.nodeOfLocked(p)
		if !current || j.ending {
			continue
		}
		// Until kube-scheduler has judged the Pod it is merely "Pending"; once
		// it says why (Unschedulable, ...), a busy node is reported again
		// under that reason, so the event log ends with what the cluster said.
		reason, msg := "Pending", "not yet judged by the Kubernetes scheduler"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
				reason, msg = c.Reason, c.Message
			}
		}
		if n.busy && n.reason == reason {
			continue
		}
		n.busy, n.reason = true, reason
		ev := Event{Job: j.name, Node: name, Pod: p.Name, Kind: EventBusy, Reason: reason,
			Message: fmt.Sprintf("pod %s pending for %s: %s", p.Name, now.Sub(p.CreationTimestamp.Time).Round(time.Second), msg)}
		n.why = fmt.Sprintf("pod %s pending since %s (%s)", p.Name, p.CreationTimestamp.Time.UTC().Format(time.TimeOnly), reason)
		evs = append(evs, ev)
		evs = append(evs, l.rebusyLocked(j)...)
	}
	l.mu.Unlock()
	l.emit(evs)
}

// rebusyLocked recomputes a job's busy flag; it reports when it clears.
func (l *Launcher) rebusyLocked(j *job) []Event {
	busy := false
	for _, n := range j.nodes {
		busy = busy || n.busy
	}
	was := j.busy
	j.busy = busy
	if was && !busy {
		return []Event{{Job: j.name, Kind: EventUnbusy, Message: "no pod of the job is pending any more"}}
	}
	return nil
}

func (l *Launcher) emit(evs []Event) {
	for _, e := range evs {
		l.cfg.Events(e)
		if l.cfg.Deliver != nil {
			select {
			case l.cfg.Deliver <- launch.ClusterEvent{Job: e.Job, Node: e.Node, Message: Describe(e)}:
			case <-l.stop:
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Describe is an event as one line for the job's event log.
func Describe(e Event) string {
	switch e.Kind {
	case EventBusy:
		return fmt.Sprintf("cluster busy: %s (%s)", e.Message, e.Reason)
	case EventUnbusy:
		return "cluster no longer busy: " + e.Message
	case EventExited:
		return fmt.Sprintf("%s: pod %s exited: %s (%s)", e.Node, e.Pod, e.Reason, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Node, e.Message)
}
