package daemon

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
	"github.com/kelpie/kelpie/scheduler/election"
	"github.com/kelpie/kelpie/scheduler/launch"
	"github.com/kelpie/kelpie/scheduler/store"
)

// replicaSet is two scheduler replicas on the test's etcd, restarted as a
// supervisor would when one exits: a fault holds the replica it fails
// (and starts it again itself); any other exit — a replica whose lease
// expired unrenewed on a loaded machine exits, as designed — is restarted
// by the supervising goroutine at once, and counted.
type replicaSet struct {
	t                      *testing.T
	env                    *haEnv
	prefix, advertise, tag string
	reps                   []*haReplica
	failovers              []time.Duration // fault to the other replica leading
	refused                int             // writes refused to ex-leaders

	mu        sync.Mutex
	held      []bool // a fault is acting on the replica
	unfaulted int    // exits no fault caused (lost leases), restarted
	quit      chan struct{}
	done      chan struct{}
}

func newReplicaSet(t *testing.T, env *haEnv, prefix, tag string) *replicaSet {
	t.Helper()
	rs := &replicaSet{t: t, env: env, prefix: prefix, tag: tag, held: make([]bool, 2), quit: make(chan struct{}), done: make(chan struct{}),
		reps: []*haReplica{{name: "a", grpcAddr: freeAddr(t), httpAddr: freeAddr(t)}, {name: "b", grpcAddr: freeAddr(t), httpAddr: freeAddr(t)}}}
	rs.advertise = rs.reps[0].grpcAddr + "," + rs.reps[1].grpcAddr
	rs.start(0)
	if _, err := rs.waitLeader(-1, time.Minute); err != nil {
		t.Fatal(err)
	}
	rs.start(1)
	go rs.supervise()
	return rs
}

// supervise restarts a replica that exited while no fault holds it.
func (rs *replicaSet) supervise() {
	defer close(rs.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-rs.quit:
			return
		case <-tick.C:
		}
		rs.mu.Lock()
		for i, r := range rs.reps {
			if rs.held[i] {
				continue
			}
			select {
			case <-r.exited:
				rs.unfaulted++
				rs.t.Logf("replica %s exited with no fault (its lease expired unrenewed): started again as a standby", r.name)
				rs.start(i)
			default:
			}
		}
		rs.mu.Unlock()
	}
}

// hold keeps the supervisor off replica i while a fault acts on it;
// release gives it back, running (the fault has started it again).
func (rs *replicaSet) hold(i int) *haReplica {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.held[i] = true
	return rs.reps[i]
}

func (rs *replicaSet) release(i int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.held[i] = false
}

func (rs *replicaSet) start(i int) {
	rs.reps[i].start(rs.t, rs.env, rs.prefix, rs.advertise, rs.tag, nil)
}

func (rs *replicaSet) stop() {
	close(rs.quit)
	<-rs.done
	for _, r := range rs.reps {
		r.stop()
	}
}

// httpAddrs are the replicas' console addresses, as clients take them.
func (rs *replicaSet) httpAddrs() string { return rs.reps[0].httpAddr + "," + rs.reps[1].httpAddr }

// leader is the index of the replica whose election key leads, or -1.
func (rs *replicaSet) leader() int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _, err := election.Current(ctx, rs.env.cli, rs.prefix+"leader/")
	if err != nil {
		rs.t.Fatal(err)
	}
	for i, r := range rs.reps {
		if strings.Contains(v, "grpc="+r.grpcAddr+" ") {
			return i
		}
	}
	return -1
}

// waitLeader waits for a replica other than not to lead.
func (rs *replicaSet) waitLeader(not int, timeout time.Duration) (int, error) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if i := rs.leader(); i >= 0 && i != not {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no replica but %d leads after %v", not, timeout)
}

// replicaFaultKinds fail the leading replica: kill -9, or SIGSTOP for
// longer than its lease. The other replica must lead within the lease;
// the failed one is started again after 1 to 5 s, as a standby (a paused
// one first resumes, has its writes refused and exits by itself).
var replicaFaultKinds = []fault{
	{"kill -9 the leading replica", func(t *testing.T, rf *roundFaults, rng *rand.Rand) string {
		rs := rf.replicas
		i := rs.leader()
		if i < 0 {
			return "kill -9 the leading replica: none leads"
		}
		r := rs.hold(i)
		defer rs.release(i)
		at := time.Now()
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.exited
		j, err := rs.waitLeader(i, 2*time.Minute)
		if err != nil {
			t.Errorf("after kill -9 of replica %s: %v", r.name, err)
			rs.start(i)
			return "kill -9 the leading replica: no takeover"
		}
		took := time.Since(at)
		rs.failovers = append(rs.failovers, took)
		away := time.Duration(1+rng.IntN(5)) * time.Second
		time.Sleep(away)
		rs.start(i)
		return fmt.Sprintf("kill -9 the leading replica %s: %s leads after %v; %s back as a standby after %v",
			r.name, rs.reps[j].name, took.Round(time.Millisecond), r.name, away)
	}},
	{"SIGSTOP the leading replica past its lease", func(t *testing.T, rf *roundFaults, rng *rand.Rand) string {
		rs := rf.replicas
		i := rs.leader()
		if i < 0 {
			return "SIGSTOP the leading replica: none leads"
		}
		r := rs.hold(i)
		defer rs.release(i)
		at := time.Now()
		_ = r.cmd.Process.Signal(syscall.SIGSTOP)
		j, err := rs.waitLeader(i, 2*time.Minute)
		if err != nil {
			_ = r.cmd.Process.Signal(syscall.SIGCONT)
			t.Errorf("after SIGSTOP of replica %s: %v", r.name, err)
			return "SIGSTOP the leading replica: no takeover"
		}
		took := time.Since(at)
		rs.failovers = append(rs.failovers, took)
		more := time.Duration(rng.IntN(3)) * time.Second
		time.Sleep(more)
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-r.exited:
		case <-time.After(time.Minute):
			t.Errorf("replica %s, resumed after losing its lease, did not exit within a minute", r.name)
			r.stop()
		}
		out := r.out.String()
		n := strings.Count(out, "store write refused")
		rs.refused += n
		if code := r.cmd.ProcessState.ExitCode(); code == 0 {
			t.Errorf("replica %s exited with status 0 after losing its lease; want a failure", r.name)
		}
		if !strings.Contains(out, "lost the leadership") {
			t.Errorf("replica %s's log does not say it lost the leadership", r.name)
		}
		rs.start(i)
		return fmt.Sprintf("SIGSTOP the leading replica %s for %v: %s leads after %v; %s resumed, %d writes refused, back as a standby",
			r.name, (took + more).Round(time.Millisecond), rs.reps[j].name, took.Round(time.Millisecond), r.name, n)
	}},
}

// TestReplicaFaultRounds: the fault rounds of TestFaultRounds on a
// scheduler of two replicas on a 3-member etcd cluster: each round one
// fault of the leading replica (kill -9, or SIGSTOP past its lease) and
// one of today's process faults (kill -9 of a worker, the server or an
// agent, SIGSTOP of a worker), in a seeded order at seeded moments, while
// an operator's restart of worker-0 is under way. After each round: the
// job completed, every shard DONE exactly once, accuracy within a point
// of an undisturbed run, the operator's restart applied once (the agents'
// logs), no process of the job left, the other replica led within the
// lease, and no step-down was written by a replica that had lost its
// lease.
//
// KELPIE_FAULTS_REPLICA_ROUNDS (1) and KELPIE_FAULTS_SEED (random,
// printed; shared with TestFaultRounds) set it: `make faults SEED=n`
// replays both schedules.
func TestReplicaFaultRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process fault rounds")
	}
	rounds := envInt(t, "KELPIE_FAULTS_REPLICA_ROUNDS", 1)
	seed := envInt(t, "KELPIE_FAULTS_SEED", time.Now().UnixNano()%1e9)
	first := envInt(t, "KELPIE_FAULTS_FIRST", 0)
	t.Logf("replica fault rounds: %d from %d, seed %d (replay: make faults SEED=%d)", rounds, first, seed, seed)
	env := newHAEnv(t, false)
	tag := fmt.Sprintf("KELPIE_TEST_TAG=replica-rounds-%d", time.Now().UnixNano())
	defer killTagged(tag)
	prefix := "/kelpie-replica-rounds/"
	rs := newReplicaSet(t, env, prefix, tag)
	defer rs.stop()
	var processKinds []fault
	for _, k := range faultKinds {
		if !strings.Contains(k.name, "scheduler") { // the single scheduler's faults: the replicas' replace them
			processKinds = append(processKinds, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rounds+1)*6*time.Minute)
	defer cancel()

	run := func(name string, disturb func(rf *roundFaults)) *consolepb.JobView {
		w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
		c, err := client.Dial(ctx, rs.httpAddrs(), "op-token", client.WithSubscription([]string{name}, 10, 10),
			client.WithHandler(w.handle), client.WithBackoff(100*time.Millisecond, 500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
		if r, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{
			SpecYaml: strings.Replace(roundSpec, "NAME", name, 1)}}}); err != nil || !r.Ok {
			t.Fatalf("submit %s: %v %v", name, r, err)
		}
		_ = c.Subscribe(ctx, []string{name})
		if disturb != nil {
			w.until(t, name+" training", 3*time.Minute, func(j *consolepb.JobView) bool {
				return j.Iteration > 20 && node2(j, "worker-0").GetPid() > 0 && node2(j, "worker-1").GetPid() > 0
			})
			r, err := c.Send(ctx, &consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: name,
				Action: &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-0"}}}})
			if err != nil || !r.Ok {
				t.Fatalf("%s: restart worker-0: %v %v", name, r, err)
			}
			disturb(&roundFaults{job: name, w: w, replicas: rs})
		}
		return w.until(t, name+" end", 5*time.Minute, func(j *consolepb.JobView) bool {
			return j.State != "running" && j.State != "starting" && j.State != ""
		})
	}
	jobGone := func(name string) []int {
		var recs []launch.Record
		for _, r := range rs.reps {
			more, _ := launch.ReadRecords(filepath.Join(r.dataDir, "logs", name, "procs.jsonl"))
			recs = append(recs, more...)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			var left []int
			for _, r := range recs {
				if syscall.Kill(-r.Pid, 0) == nil {
					left = append(left, r.Pid)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				return left
			}
		}
	}

	base := run("undisturbed", nil)
	if base.State != "completed" {
		t.Fatalf("the undisturbed job ended %s: %s", base.State, base.Error)
	}
	for r := first; r < first+rounds; r++ {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(r)))
		name := fmt.Sprintf("replica-round-%d", r)
		var did []string
		final := run(name, func(rf *roundFaults) {
			kinds := []fault{replicaFaultKinds[rng.IntN(len(replicaFaultKinds))], processKinds[rng.IntN(len(processKinds))]}
			if rng.IntN(2) == 1 {
				kinds[0], kinds[1] = kinds[1], kinds[0]
			}
			for _, k := range kinds {
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
				did = append(did, k.apply(t, rf, rng))
			}
		})
		fail := func(format string, args ...any) {
			t.Errorf("round %d (seed %d; %s): %s", r, seed, strings.Join(did, "; "), fmt.Sprintf(format, args...))
		}
		switch {
		case final.State != "completed":
			fail("job ended %s: %s", final.State, final.Error)
		case final.ShardsDone != final.ShardsTotal || final.ShardsTodo != 0 || final.ShardsDoing != 0:
			fail("shards todo %d doing %d done %d of %d", final.ShardsTodo, final.ShardsDoing, final.ShardsDone, final.ShardsTotal)
		case math.Abs(final.Accuracy-base.Accuracy) > 0.01:
			fail("accuracy %.4f, undisturbed %.4f: more than a point apart", final.Accuracy, base.Accuracy)
		}
		restarts := 0
		for _, a := range final.Actions {
			if a.Kind == "KILL_RESTART" {
				restarts++
				if a.State != "applied" && a.Error == "" {
					fail("the operator's restart ended %s with no reason", a.State)
				}
			}
		}
		if restarts == 0 {
			fail("the operator's restart is missing")
		}
		for _, rep := range rs.reps {
			if twice := appliedTwice(rep.dataDir, name); len(twice) > 0 {
				fail("actions applied more than once (replica %s's node logs): %v", rep.name, twice)
			}
		}
		if left := jobGone(name); len(left) > 0 {
			fail("process groups of the job still running: %v", left)
		}
		t.Logf("round %d: %s → %s, accuracy %.4f (undisturbed %.4f), shards %d/%d", r, strings.Join(did, "; "),
			final.State, final.Accuracy, base.Accuracy, final.ShardsDone, final.ShardsTotal)
		if t.Failed() {
			break
		}
	}
	// No replica that had lost its lease wrote its step-down.
	st, err := store.OpenEtcd(env.cli, store.EtcdOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	audit, err := st.ListAudit(time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	leads := 0
	for _, e := range audit {
		if strings.HasPrefix(e.What, "step-down") {
			t.Errorf("a step-down was written after the lease was lost: %+v", e)
		}
		if strings.HasPrefix(e.What, "lead") {
			leads++
		}
	}
	// A takeover for the first leader and one per fault; a lease lost
	// with no fault adds at most one (the replica that took over may lose
	// its own lease before it records it).
	if want := 1 + len(rs.failovers); leads > want+rs.unfaulted || rs.unfaulted == 0 && leads != want {
		t.Errorf("%d takeovers in the audit log; want %d (the first leader and one per failover) and up to %d more (leases lost with no fault)", leads, want, rs.unfaulted)
	}
	if len(rs.failovers) > 0 {
		s := slices.Clone(rs.failovers)
		slices.Sort(s)
		t.Logf("replica failovers: %d, median %v, max %v (lease %v); writes refused to paused ex-leaders: %d; leases lost with no fault: %d",
			len(s), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), haLease, rs.refused, rs.unfaulted)
	}
}
