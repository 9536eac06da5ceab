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
	cmd                      *exec.Cmd
	out                      *lockedBuffer
	exited                   chan struct{}
}

// haRounds is how many failover rounds TestSchedulerFailover runs:
// $KELPIE_HA_ROUNDS (make test-ha runs 10), else 2 (one kill, one pause).
func haRounds(t *testing.T) int {
	if v := os.Getenv("KELPIE_HA_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KELPIE_HA_ROUNDS=%q: want a positive count", v)
		}
		return n
	}
	return 2
}

// TestSchedulerFailover: two scheduler replicas on a 3-member etcd
// cluster; mid-job the leading one is killed -9 (odd rounds: SIGSTOPped
// for longer than its lease, then continued). The standby leads within the
// lease (the failover times are logged), adopts the job, and the job
// completes with every shard DONE exactly once. A paused leader, once
// continued, has a write refused (its log says so) and exits. Nothing is
// left running.
func TestSchedulerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process failover test")
	}
	c := etcdtest.Start(t, 3)
	cli := c.Client(t)
	keyFile := filepath.Join(t.TempDir(), "store.key")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := writeTokens(t)
	rounds := haRounds(t)
	var times []time.Duration
	for round := range rounds {
		mode := "kill"
		if round%2 == 1 {
			mode = "stop"
		}
		t.Run(fmt.Sprintf("round%d-%s", round, mode), func(t *testing.T) {
			times = append(times, failoverRound(t, cli, c.URL(), keyFile, tokens, round, mode))
		})
		if t.Failed() {
			break
		}
	}
	if len(times) > 0 {
		s := slices.Clone(times)
		slices.Sort(s)
		t.Logf("failover (fault to the standby leading) over %d rounds: median %v, min %v, max %v (lease %v); all %v",
			len(s), s[len(s)/2].Round(time.Millisecond), s[0].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), haLease, times)
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
// leader and is approved there; the job completes with exact shards.
func TestApprovalSurvivesFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process failover test")
	}
	c := etcdtest.Start(t, 3)
	keyFile := filepath.Join(t.TempDir(), "store.key")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	failoverRound(t, c.Client(t), c.URL(), keyFile, writeTokens(t), 0, "approve")
}

func failoverRound(t *testing.T, cli *clientv3.Client, storeURL, keyFile, tokens string, round int, mode string) time.Duration {
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
	advertise := reps[0].grpcAddr + "," + reps[1].grpcAddr
	start := func(r *haReplica) {
		r.out = &lockedBuffer{t: t}
		r.cmd = exec.Command(kelpieBin, "scheduler", "--grpc", r.grpcAddr, "--http", r.httpAddr, "--advertise", advertise,
			"--data-dir", filepath.Join(t.TempDir(), r.name), "--tokens", tokens, "--store", storeURL, "--store-key-file", keyFile,
			"--etcd-prefix", prefix, "--lease-ttl", haLease.String(), "--stop-jobs-on-exit=false")
		r.cmd.Env = append(os.Environ(), tag)
		r.cmd.Stderr = r.out
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r.exited = make(chan struct{})
		go func() { _ = r.cmd.Wait(); close(r.exited) }()
	}
	defer func() {
		for _, r := range reps {
			if r.cmd != nil {
				_ = r.cmd.Process.Signal(syscall.SIGCONT)
				_ = r.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-r.exited:
				case <-time.After(20 * time.Second):
					_ = r.cmd.Process.Kill()
					<-r.exited
				}
			}
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
	if mode == "approve" {
		spec = strings.Replace(approvalSpec, "NAME", job, 1)
	}
	if r, err := cc.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: spec}}}); err != nil || !r.Ok {
		t.Fatalf("submit: %v %v", r, err)
	}
	_ = cc.Subscribe(ctx, []string{job})
	before := w.until(t, "training", 2*time.Minute, func(j *consolepb.JobView) bool { return j.Iteration > 50 })
	var pending string // the proposal waiting for an operator (mode approve)
	if mode == "approve" {
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

	sig := syscall.SIGKILL
	if mode == "stop" {
		sig = syscall.SIGSTOP
	}
	fault := time.Now()
	if err := reps[0].cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(leader(), "grpc="+reps[1].grpcAddr+" ") {
		if time.Since(fault) > 2*time.Minute {
			t.Fatalf("no takeover within 2 minutes; leader %q", leader())
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(fault)
	t.Logf("%s: replica b leads %v after the fault (lease %v)", mode, took.Round(time.Millisecond), haLease)
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

func actionState(j *consolepb.JobView, id string) string {
	for _, a := range j.Actions {
		if a.Id == id {
			return a.State
		}
	}
	return ""
}
