package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
	"github.com/kelpie/kelpie/scheduler/election"
	"github.com/kelpie/kelpie/scheduler/store"
	"github.com/kelpie/kelpie/scheduler/store/etcdtest"
)

// haLease is the replicas' lease in the failover tests.
const haLease = 3 * time.Second

// lockedBuffer is a replica's stderr, kept to look for a refused write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	t  *testing.T
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// haReplica is one scheduler process of a replicated pair.
type haReplica struct {
	name, grpcAddr, httpAddr string
	dataDir                  string
	cmd                      *exec.Cmd
	out                      *lockedBuffer
	exited                   chan struct{}
}

// start starts the replica's scheduler process (again, after it exited:
// its data dir stays), prefixed by wrap (e.g. ip netns exec NS), with
// extra flags.
func (r *haReplica) start(t *testing.T, env *haEnv, prefix, advertise, tag string, wrap []string, extra ...string) {
	t.Helper()
	r.out = &lockedBuffer{t: t}
	if r.dataDir == "" {
		r.dataDir = filepath.Join(t.TempDir(), r.name)
	}
	args := append(append([]string{}, wrap...), kelpieBin, "scheduler", "--grpc", r.grpcAddr, "--http", r.httpAddr, "--advertise", advertise,
		"--data-dir", r.dataDir, "--tokens", env.tokens, "--store", env.storeURL, "--store-key-file", env.keyFile,
		"--etcd-prefix", prefix, "--lease-ttl", haLease.String(), "--stop-jobs-on-exit=false")
	r.cmd = exec.Command(args[0], append(args[1:], extra...)...)
	r.cmd.Env = append(os.Environ(), tag)
	r.cmd.Stderr = r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.exited = make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(r.exited) }()
}

// stop ends the replica's process, if it runs: SIGCONT (it may be
// paused), SIGTERM, and after 20 s SIGKILL.
func (r *haReplica) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(20 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
	}
}

// haRounds is how many failover rounds TestSchedulerFailover runs:
// $KELPIE_HA_ROUNDS (make test-ha runs 10), else 3 (one of each fault).
func haRounds(t *testing.T) int {
	if v := os.Getenv("KELPIE_HA_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KELPIE_HA_ROUNDS=%q: want a positive count", v)
		}
		return n
	}
	return 3
}

// haFaults are the faults of the leader, one a round in turn: kill -9,
// SIGSTOP past the lease, and a network partition from etcd.
var haFaults = []string{"kill", "stop", "partition"}

// haEnv is what the rounds share: the etcd cluster and, as root, a network
// lab where the partition rounds' leader runs in a namespace of its own.
type haEnv struct {
	cli      *clientv3.Client
	storeURL string
	keyFile  string
	tokens   string
	lab      *netLab // nil: no partition rounds (not root)
	labWhy   string  // why there is no lab
	etcdHost string  // the address etcd listens on (a second address of the lab's bridge)
}

// newHAEnv starts a 3-member etcd cluster and, as root, the lab for the
// partition rounds: one namespace ("leader") on a bridge, with etcd
// listening on a second address of the bridge so that the namespace can
// be cut from etcd alone (iptables) while its agents, the standby and the
// test still reach it.
func newHAEnv(t *testing.T, withLab bool) *haEnv {
	t.Helper()
	e := &haEnv{tokens: writeTokens(t)}
	e.keyFile = filepath.Join(t.TempDir(), "store.key")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := os.WriteFile(e.keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	host := ""
	if !withLab {
		e.labWhy = "not asked for"
	} else if e.labWhy = labUnavailable(); e.labWhy == "" {
		if _, err := exec.LookPath("nsenter"); err != nil {
			e.labWhy = "nsenter not found"
		}
	}
	if e.labWhy == "" {
		e.lab = newNetLab(t, []string{"leader"}, "", 0)
		e.etcdHost = strings.TrimSuffix(e.lab.gateway, "254") + "253"
		e.lab.must("ip", "addr", "add", e.etcdHost+"/24", "dev", e.lab.bridge)
		host = e.etcdHost
	}
	c := etcdtest.StartWith(t, etcdtest.Options{Members: 3, Host: host})
	e.cli, e.storeURL = c.Client(t), c.URL()
	return e
}

// TestSchedulerFailover: two scheduler replicas on a 3-member etcd
// cluster; mid-job the leading one is killed -9, or SIGSTOPped for longer
// than its lease and then continued, or (as root) cut off from etcd by a
// partition of its network namespace and then healed, one fault a round in
// turn. The standby leads within the lease (the failover times are
// logged), adopts the job, and the job completes with every shard DONE
// exactly once. A paused or partitioned leader, once it reaches etcd again,
// has its writes refused (its log says so) and exits. Nothing is left
// running.
func TestSchedulerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process failover test")
	}
	env := newHAEnv(t, true)
	rounds := haRounds(t)
	times := map[string][]time.Duration{}
	var all []time.Duration
	for round := range rounds {
		mode := haFaults[round%len(haFaults)]
		t.Run(fmt.Sprintf("round%d-%s", round, mode), func(t *testing.T) {
			if mode == "partition" && env.lab == nil {
				t.Skipf("partition round: %s (the leader runs in a network namespace of its own)", env.labWhy)
			}
			took := failoverRound(t, env, round, mode)
			times[mode] = append(times[mode], took)
			all = append(all, took)
		})
		if t.Failed() {
			break
		}
	}
	summary := func(what string, d []time.Duration) {
		if len(d) == 0 {
			return
		}
		s := slices.Clone(d)
		slices.Sort(s)
		t.Logf("failover (fault to the standby leading) %s over %d rounds: median %v, min %v, max %v (lease %v); all %v",
			what, len(s), s[len(s)/2].Round(time.Millisecond), s[0].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), haLease, d)
	}
	summary("all faults", all)
	for _, m := range haFaults {
		summary(m, times[m])
	}
}

const approvalSpec = `
name: NAME
model: {kind: softmax}
data: {kind: mnist, epochs: 4, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 1, workers: 3}
policies:
  antdt-nd: {mode: approve, lambda: 1.5, window_transient: 1s, window_persistent: 3s}
stragglers:
  - {node: worker-2, kind: compute, sleep: 8ms, intensity: 1, start: 0s}
`

// TestApprovalSurvivesFailover: a policy's proposal waiting for an
// operator when the leader is killed -9 is still waiting on the new
// leader and is approved there (pending); a proposal approved on the
// leader just before it is killed -9 is applied exactly once — the
// scheduler's record says applied, and every node's agent logged one ack
// of it by its role (approved). The job completes with exact shards.
func TestApprovalSurvivesFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process failover test")
	}
	env := newHAEnv(t, false)
	t.Run("pending", func(t *testing.T) { failoverRound(t, env, 0, "approve") })
	t.Run("approved", func(t *testing.T) { failoverRound(t, env, 1, "approved") })
}

// failoverRound runs one job on two replicas and fails the leader by mode
// (kill, stop, partition; approve: kill -9 while a proposal waits for an
// operator). It returns the time from the fault to the standby leading.
func failoverRound(t *testing.T, env *haEnv, round int, mode string) time.Duration {
	cli := env.cli
	tag := fmt.Sprintf("KELPIE_TEST_TAG=ha-%d-%d", round, time.Now().UnixNano())
	defer func() {
		// The agents of the completed job exit on their own; whatever
		// is left is killed, and must then be gone.
		left := tagged(tag)
		for deadline := time.Now().Add(20 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = tagged(tag) {
			time.Sleep(100 * time.Millisecond)
		}
		killTagged(tag)
		for deadline := time.Now().Add(10 * time.Second); len(tagged(tag)) > 0 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		if left := tagged(tag); len(left) > 0 {
			t.Errorf("processes left after the round: %v", left)
		}
	}()
	prefix := fmt.Sprintf("/kelpie-ha-%d/", round)
	reps := []*haReplica{{name: "a", grpcAddr: freeAddr(t), httpAddr: freeAddr(t)}, {name: "b", grpcAddr: freeAddr(t), httpAddr: freeAddr(t)}}
	var wrapper string // partition: replica a's agent program
	if mode == "partition" {
		// Replica a runs in the lab's namespace, on its address there
		// (ports of the round: the namespace is the rounds'); the agents
		// it launches go back to the test's namespace, as in the other
		// rounds, so that the partition cuts the leader from etcd only.
		addr := env.lab.nodes["leader"].addr
		reps[0].grpcAddr = fmt.Sprintf("%s:%d", addr, 20000+2*round)
		reps[0].httpAddr = fmt.Sprintf("%s:%d", addr, 20001+2*round)
		wrapper = filepath.Join(t.TempDir(), "agent-home-ns")
		script := fmt.Sprintf("#!/bin/sh\n# kelpie agent in the test's network namespace\nexec nsenter --net=/proc/%d/ns/net %s \"$@\"\n", os.Getpid(), kelpieBin)
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	advertise := reps[0].grpcAddr + "," + reps[1].grpcAddr
	start := func(r *haReplica) {
		var wrap, extra []string
		if wrapper != "" && r == reps[0] {
			wrap, extra = []string{"ip", "netns", "exec", env.lab.nodes["leader"].ns}, []string{"--agent-exe", wrapper}
		}
		r.start(t, env, prefix, advertise, tag, wrap, extra...)
	}
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	leader := func() string {
		v, _, err := election.Current(ctx, cli, prefix+"leader/")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	start(reps[0])
	for leader() == "" {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(leader(), "grpc="+reps[0].grpcAddr+" ") {
		t.Fatalf("leader %q; want replica a", leader())
	}
	start(reps[1])

	job := fmt.Sprintf("ha%d", round)
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	cc, err := client.Dial(ctx, reps[0].httpAddr+","+reps[1].httpAddr, "op-token", client.WithSubscription([]string{job}, 10, 10),
		client.WithHandler(w.handle), client.WithBackoff(100*time.Millisecond, 500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := cc.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	spec := strings.Replace(restartSpec, "name: survivor", "name: "+job, 1)
	if mode == "approve" || mode == "approved" {
		spec = strings.Replace(approvalSpec, "NAME", job, 1)
	}
	if r, err := cc.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: spec}}}); err != nil || !r.Ok {
		t.Fatalf("submit: %v %v", r, err)
	}
	_ = cc.Subscribe(ctx, []string{job})
	before := w.until(t, "training", 2*time.Minute, func(j *consolepb.JobView) bool { return j.Iteration > 50 })
	var pending string // the proposal waiting for an operator (modes approve, approved)
	if mode == "approve" || mode == "approved" {
		before = w.until(t, "a proposal", 2*time.Minute, func(j *consolepb.JobView) bool {
			for _, a := range j.Actions {
				if a.State == "proposed" {
					pending = a.Id
					return true
				}
			}
			return false
		})
	}

	approved := "" // mode approved: the action approved on the leader just before it is killed
	if mode == "approved" {
		r, err := cc.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{Job: job, ActionId: pending}}})
		if err != nil || !r.Ok {
			t.Fatalf("approve %s on the leader: %v %v", pending, r, err)
		}
		approved, pending = pending, ""
	}
	fault := time.Now()
	switch mode {
	case "partition":
		// Every packet between the leader's namespace and etcd is
		// dropped; its agents, the standby and the console still reach
		// it, so it goes on taking reports it cannot write.
		env.lab.cut("leader", 1, env.etcdHost)
		t.Logf("partition: the iptables rules in place %v after the fault began (counted in the failover)", time.Since(fault).Round(time.Millisecond))
	case "stop":
		if err := reps[0].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	default:
		if err := reps[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for !strings.Contains(leader(), "grpc="+reps[1].grpcAddr+" ") {
		if time.Since(fault) > 2*time.Minute {
			t.Fatalf("no takeover within 2 minutes; leader %q", leader())
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(fault)
	t.Logf("%s: replica b leads %v after the fault (lease %v)", mode, took.Round(time.Millisecond), haLease)
	if mode == "partition" {
		// The partition heals as soon as b leads: the writes replica a
		// made meanwhile (each waits up to the store's timeout) reach
		// etcd now, and every one is refused; a finds its lease gone
		// and exits without writing.
		healed := len(reps[0].out.String())
		env.lab.heal("leader")
		select {
		case <-reps[0].exited:
		case <-time.After(time.Minute):
			t.Fatal("the partitioned ex-leader did not exit within a minute of the partition healing")
		}
		if code := reps[0].cmd.ProcessState.ExitCode(); code == 0 {
			t.Errorf("the ex-leader exited with status 0; want a failure (lost leadership)")
		}
		out := reps[0].out.String()
		if !strings.Contains(out, "lost the leadership") {
			t.Errorf("the ex-leader's log does not say it lost the leadership")
		}
		after := out[healed:]
		i := strings.Index(after, "store write refused")
		if i < 0 {
			t.Errorf("the ex-leader's log shows no write refused after the partition healed")
		} else {
			line := after[i:]
			if j := strings.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			t.Logf("a write of the ex-leader refused once the partition healed: %s", line)
		}
		t.Logf("the ex-leader's refused writes after the partition healed: %d", strings.Count(after, "store write refused"))
	}
	if mode == "stop" {
		// Paused past its lease, replica a resumes thinking it leads:
		// its agents' reports are still on its connections. Every
		// write it attempts is refused, and it exits.
		if err := reps[0].cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-reps[0].exited:
		case <-time.After(time.Minute):
			t.Fatal("the paused ex-leader did not exit within a minute of resuming")
		}
		if code := reps[0].cmd.ProcessState.ExitCode(); code == 0 {
			t.Errorf("the ex-leader exited with status 0; want a failure (lost leadership)")
		}
		out := reps[0].out.String()
		if !strings.Contains(out, "lost the leadership") {
			t.Errorf("the ex-leader's log does not say it lost the leadership")
		}
		if !strings.Contains(out, "store write refused") {
			t.Errorf("the ex-leader's log shows no refused write")
		}
		t.Logf("the ex-leader's refused writes after resuming: %d", strings.Count(out, "store write refused"))
	}
	if pending != "" {
		// The view comes from the new leader once the job moves on;
		// the proposal is still waiting there.
		w.until(t, "the proposal on the new leader", 2*time.Minute, func(j *consolepb.JobView) bool {
			return j.Iteration > before.Iteration+20 && actionState(j, pending) == "proposed"
		})
		r, err := cc.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{Job: job, ActionId: pending}}})
		if err != nil || !r.Ok {
			t.Fatalf("approve %s on the new leader: %v %v", pending, r, err)
		}
		// Approved on the new leader, it goes out to the agents and is
		// applied before the job ends (an ADJUST_BS approved right after an
		// adoption was once placed far beyond the job's end, from a pace
		// taken from the agents' bunched backlog of reports, and failed:
		// TestAheadOfBunchedReports).
		w.until(t, "the approved action dispatched", 2*time.Minute, func(j *consolepb.JobView) bool {
			st := actionState(j, pending)
			return st == "dispatched" || st == "applied" || st == "failed"
		})
		t.Logf("proposal %s kept through the failover and approved on the new leader: %s", pending, actionState(w.latest(), pending))
	}
	final := w.until(t, "completion on the new leader", 4*time.Minute, func(j *consolepb.JobView) bool {
		return j.Iteration > before.Iteration && j.State != "running" && j.State != "starting" && j.State != ""
	})
	if final.State != "completed" || final.ShardsDone != final.ShardsTotal || final.ShardsTodo != 0 || final.ShardsDoing != 0 {
		t.Fatalf("job ended %s (%s): shards todo %d doing %d done %d of %d", final.State, final.Error,
			final.ShardsTodo, final.ShardsDoing, final.ShardsDone, final.ShardsTotal)
	}
	t.Logf("completed on the new leader: accuracy %.4f, shards %d/%d", final.Accuracy, final.ShardsDone, final.ShardsTotal)
	if pending != "" {
		if st := actionState(final, pending); st != "applied" {
			t.Errorf("the action approved on the new leader ended %q; want applied", st)
		}
	}
	if approved != "" {
		if st := actionState(final, approved); st != "applied" {
			t.Errorf("the action approved just before the kill ended %q; want applied", st)
		}
		// The agents' own record: each node's role acked the action
		// once, whichever leader sent it (the node logs of both
		// replicas: the nodes a launched keep writing to a's).
		acks := roleAcks(t, job, approved, reps[0].dataDir, reps[1].dataDir)
		if len(acks) == 0 {
			t.Errorf("no agent acked %s", approved)
		}
		for node, n := range acks {
			if n != 1 {
				t.Errorf("%s applied %s %d times; want once", node, approved, n)
			}
		}
		t.Logf("action %s approved just before the kill: %s on the new leader; acks by the nodes' roles: %v", approved, actionState(final, approved), acks)
	}
	// The audit log, shared: both takeovers, no step-down (refused).
	st, err := store.OpenEtcd(cli, store.EtcdOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	audit, err := st.ListAudit(time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var leads []string
	for _, e := range audit {
		if strings.HasPrefix(e.What, "lead") {
			leads = append(leads, e.What)
		}
		if strings.HasPrefix(e.What, "step-down") {
			t.Errorf("a step-down was written after the lease was lost: %+v", e)
		}
	}
	if len(leads) != 2 || !strings.Contains(leads[0], reps[0].grpcAddr) || !strings.Contains(leads[1], reps[1].grpcAddr) {
		t.Errorf("takeovers in the audit log: %q; want a's then b's", leads)
	}
	if final.Accuracy < 0.85 {
		t.Errorf("accuracy %.4f after the failover; want a normal run's (≥ 0.85)", final.Accuracy)
	}
	return took
}

// roleAcks counts, per node, the acks of action id its role made that the
// agent logged ("action acked by the role", applied): what the node
// applied, from the node logs under the replicas' data dirs.
func roleAcks(t *testing.T, job, id string, dataDirs ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, d := range dataDirs {
		logs, _ := filepath.Glob(filepath.Join(d, "logs", job, "*.log"))
		for _, p := range logs {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "action acked by the role") && strings.Contains(l, " action="+id+" ") {
					if !strings.Contains(l, " applied=true ") {
						t.Errorf("%s: %s not applied: %s", filepath.Base(p), id, l)
					}
					out[strings.TrimSuffix(filepath.Base(p), ".log")]++
				}
			}
		}
	}
	return out
}

func actionState(j *consolepb.JobView, id string) string {
	for _, a := range j.Actions {
		if a.Id == id {
			return a.State
		}
	}
	return ""
}
