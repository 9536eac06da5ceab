package manager

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/scheduler/coordinator"
	"github.com/kelpie/kelpie/scheduler/gate"
	"github.com/kelpie/kelpie/scheduler/launch"
	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/timeline"
)

// jobState is one job as the manager runs it. Its fields, and its nodes',
// are the job's actor's (actor.go) unless said otherwise: only code running
// on the actor touches them, without a lock; other goroutines read what
// the actor publishes (facts, views) or go through it (onActor). m, spec,
// coord, mon, submitted, bucket0, marksCap, endedCh and hist's recorder are
// set before the job is published and read anywhere (spec, coord and mon
// are replaced only by launchQueued, before the job's agents exist).
type jobState struct {
	m     *Manager
	spec  *spec.Spec
	coord *coordinator.Job // has its own lock
	mon   *telemetry       // the Monitor, fed through a queue

	submitted, ended time.Time
	submittedBy      string
	state            string
	err              string
	res              *Result
	// scriptNext counts the script steps (scriptSteps order) carried out
	// or refused so far; the rest never ran if the job ends.
	scriptNext int
	endedCh    chan struct{}
	launcher   *launch.Local // nil for a job adopted after a scheduler restart

	nodes map[string]*nodeState
	// gate holds every action's life (state, history, awaited acks);
	// actions and byID are their console records (kind and parameters),
	// whose state fields are written only from the gate's effects.
	gate     *gate.Gate
	actions  []*consolepb.Action
	byID     map[string]*consolepb.Action
	policies map[string]*policySetting
	bucket0  time.Time                        // start of heatmap column 0 (fixed)
	dprs     atomic.Pointer[map[string]int64] // servers' delayed pulls, as reported; read without the lock
	// pub is the job's facts, published by the actor (facts.go).
	pub atomic.Pointer[jobFacts]
	// views is the job's published views: read without a lock, rebuilt at
	// most every viewTTL from rows the actor froze for them.
	views atomic.Pointer[viewCache]
	// viewMu guards the view builder's turn and its caches (seriesNames,
	// exchange): one view build of the job at a time.
	viewMu sync.Mutex
	// seriesNames are the nodes' chart series names ("bpt/worker-2"), made
	// once (view, under viewMu).
	seriesNames map[string]string
	exchange    exchangeCache // an allreduce job's last exchange (view, under viewMu)
	// windowGrid is the cells' means a window's heatmap is read into
	// (cut, under viewMu): reused, some 10 MB a window at 20,000 nodes.
	windowGrid []float64
	// nodeCount is the job's node count as of the last view built; it
	// sets how long a view lives (viewTTL).
	nodeCount atomic.Int32
	snap      monitor.Snapshot // the Monitor as of the last tick: views and gates read it
	// tables are the table changes under way, by action id (the table
	// itself is the coordinator's: PendingTable): their sequences, driven
	// on the actor (elastic.go).
	tables map[string]*tableRun
	// calls are the commands sent to servers through their agents that
	// wait for an ack (servercmd.go).
	calls map[callKey]*serverCall
	// broadcasts are the global actions sent through a primary agent
	// (broadcast.go), by action id; pickPrimary picks the primary among
	// the candidates (nil: at random; tests set it).
	broadcasts  map[string]*broadcast
	pickPrimary func(candidates []string) string
	paused      float64            // seconds the job waited for blocks in transit, over all changes
	preBackup   *spec.Sync         // the sync model before BACKUP_WORKERS turned drop on
	drop        int                // backup workers in effect: gradients dropped per iteration
	accum       map[string]int     // gradient-accumulation counts in effect (AntDT-DD)
	lrScale     map[string]float64 // learning-rate scales in effect (ADJUST_LR)
	rng         *rand.Rand         // PSLD's random source, seeded by the spec; used by the job's tick only
	// relaunching counts the checkpoint-and-restart baselines under way
	// (one at a time, but one's end may be taken in after the next's
	// start): non-zero while the job's agents are stopped on purpose.
	relaunching int
	// adopted is when a restarted scheduler took the live job over from
	// the store (zero for a job it launched).
	adopted time.Time
	// wake, made by a waiter (await) off the actor, is closed by the actor
	// when a node reports or its agent connects (wait.go).
	wake atomic.Pointer[chan struct{}]
	// act takes in the job's agent messages (actor.go); started once, by
	// the first of them.
	act       *actor
	actorOnce sync.Once
	// late stands in for the actor once it has ended (the manager
	// closed): it guards the turn of the callers that come after, one at
	// a time (post, lateRun), and nothing else.
	late sync.Mutex
	// hist is the job's recorded timeline and its actions' judgement
	// (history.go).
	hist *jobHistory
	// thr counts the samples the job trained over the last
	// ThroughputWindow, once a tick (throughput.go); its own lock.
	thr throughputMeter
	// iterTotal is the largest iteration total a view has shown while the
	// job ran (progressTotal): it never goes down.
	iterTotal atomic.Int64
	// marksCap is how many iteration marks each worker's timeline keeps
	// (stall.go); set at creation.
	marksCap int
	// gp is the job's goodput ledger and hang detector (goodput.go); its
	// own lock.
	gp goodputState
	// hosts is where the nodes run on simulated hosts (cluster.spare_hosts,
	// hosts.go); nil without spare hosts. retired are the agents a move or
	// the checkpoint-and-restart baseline stopped on purpose (by PID),
	// moves where each KILL_RESTART that moved its node took it (by action
	// id).
	hosts   *hostPlan
	retired map[int]bool
	moves   map[string]hostMove
}

// nodeState is what the manager knows of one node.
type nodeState struct {
	name, role string
	key        *nodeKey // its place in the nodes' order, made on first use (sortKey)
	host       string
	status     agentpb.NodeStatus
	lastSeen   time.Time      // its agent's connection or last change of state (see seen)
	conn       *agentConn     // nil while the agent is disconnected
	peerAddr   string         // its agent's peer service (AgentHello.peer_addr), "" for none
	removed    bool           // taken out of the job (REMOVE_WORKER, or an added worker that never came up)
	relaunched bool           // launched again after it was lost (adopt.go)
	agentPid   int            // the relaunched agent's PID
	seenAgent  *launch.Record // its agent as last seen connecting, when it runs on this host (adopt.go)
	agentKills int            // times its agent was killed and launched again
	// A server's counters as its agent last sent them (never changed once
	// received) and when they arrived.
	stats   *pspb.ServerStats
	statsAt time.Time
	// BPT (workers) or comm time and bytes (servers) per heatmap column:
	// added to by the actor, read by view builders (lock-free cells).
	cells *buckets
	// prog is what reports said of the node (ingest.go).
	prog progress
	// marks is a worker's iteration timeline, from its reports (stall.go);
	// nil until its first report.
	marks *timeline.Marks
	// cause is where its time went lately (cause.go).
	cause nodeCause
}

// progress is what reports say of a node: a worker's own, and for a
// server its workers' pushes and pulls to it.
type progress struct {
	iteration  int64
	batch      int
	reported   bool      // a progress report has arrived (an added worker has joined)
	rate       float64   // iterations per second, from its reports (smoothed)
	reportedAt time.Time // when its last report arrived
	heard      time.Time // when a report (its own, or a worker's comm with it) or an unchanged heartbeat last spoke of it
	loss       float64
	bptSum     float64 // seconds, over the whole run: the result's mean BPT
	bptCount   int
	// spark is the recent samples, oldest first; replaced, never changed
	// in place, so a copy of progress may keep it.
	spark []float64
}

// progress is a copy of the node's progress.
func (n *nodeState) progress() progress { return n.prog }

// setBatch records the node's batch size (an action applied it).
func (n *nodeState) setBatch(b int) { n.prog.batch = b }

// heardAt marks the node as heard of at t.
func (n *nodeState) heardAt(t time.Time) {
	if t.After(n.prog.heard) {
		n.prog.heard = t
	}
}

// seen is when the node was last heard of: its agent's heartbeat or
// connection, or a report.
func (n *nodeState) seen() time.Time { return n.seenWith(n.progress()) }

// seenWith is seen, given a copy of the node's progress.
func (n *nodeState) seenWith(p progress) time.Time {
	if p.heard.After(n.lastSeen) {
		return p.heard
	}
	return n.lastSeen
}

func newJobState(m *Manager, s *spec.Spec, cj *coordinator.Job, now time.Time) *jobState {
	cfg := monitor.DefaultConfig()
	// The Monitor classifies with AntDT-ND's λ and windows and scales out
	// with PSLD's threshold (a spec built without Parse may have none).
	if nd := s.Policies[policy.NameAntDTND].Params; nd != nil {
		if w := nd.Duration(policy.NDWindowTransient); w > 0 {
			cfg.LTrans = w
		}
		if w := nd.Duration(policy.NDWindowPersistent); w > 0 {
			cfg.LPer = w
		}
		if l := nd.Float(policy.NDLambda); l > 0 {
			cfg.Lambda = l
		}
	}
	cfg.ScaleThreshold = s.Policies[policy.NamePSLD].Params.Float(policy.PSLDScaleThreshold)
	cfg.MaxSamples = max(cfg.MaxSamples, 4*s.Cluster.Workers)
	j := &jobState{m: m, spec: s, coord: cj, mon: newTelemetry(cfg), submitted: now, state: StateStarting,
		rng:     rand.New(rand.NewPCG(uint64(s.Data.Seed), 0x9510)),
		endedCh: make(chan struct{}), nodes: map[string]*nodeState{}, byID: map[string]*consolepb.Action{},
		gate: gate.New(gate.Config{ProposalTTL: ProposalTTL, AckTTL: AckTTL, WithdrawGrace: WithdrawGrace}), policies: defaultPolicies(s), bucket0: now}
	for _, n := range s.ServerNames() {
		j.nodes[n] = &nodeState{name: n, role: "server"}
	}
	for i, n := range s.WorkerNames() {
		j.nodes[n] = &nodeState{name: n, role: "worker", prog: progress{batch: s.LocalBatch(i)}}
	}
	for _, n := range j.nodes {
		n.status.State = agentpb.NodeState_NODE_STATE_STARTING
		n.cells = newBuckets(m.cfg.Columns)
	}
	j.hosts = newHostPlan(s, m.cfg.Pods != nil)
	j.hist = newJobHistory(m, len(j.nodes))
	j.marksCap = marksPerWorker(s)
	j.initGoodput()
	j.publishFacts()
	return j
}

func (j *jobState) over() bool {
	return j.state == StateCompleted || j.state == StateFailed || j.state == StateKilled || j.state == StateDiverged
}

func (j *jobState) describe() string {
	return fmt.Sprintf("%s on %s, %s, %s, %s", j.spec.Model.Kind, j.spec.Data.Kind,
		countOf(j.servers(), "server"), countOf(len(j.liveWorkers()), "worker"), syncName(j.spec))
}

// countOf is "1 server", "2 servers".
func countOf(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func syncName(s *spec.Spec) string {
	switch s.Sync.Model {
	case "ssp", "dsps":
		return fmt.Sprintf("%s s=%d %s", s.Sync.Model, s.Sync.Staleness, s.Sync.Pull)
	case "pssp":
		return fmt.Sprintf("pssp s=%d c=%g %s", s.Sync.Staleness, s.Sync.PSSP.C, s.Sync.Pull)
	case "drop":
		return fmt.Sprintf("drop N_t=%d", s.Sync.Drop.WaitFor)
	}
	return s.Sync.Model
}

// launch starts one agent process per node on this machine.
func (j *jobState) launch() error {
	// Agents are detached (they outlive a crashed scheduler, which adopts
	// them when it comes back) unless the caller wants their output.
	l := j.newLauncher()
	if j.m.cfg.Pods != nil {
		// No local processes: the launcher stays empty and the Pods are
		// the nodes.
		l = &launch.Local{}
		ctx, cancel := context.WithTimeout(j.m.ctx, podTimeout)
		err := j.m.cfg.Pods.StartJob(ctx, j.spec)
		cancel()
		if err != nil {
			return err
		}
	}
	j.onActor(func() { j.launcher = l })
	start := j.startAgent
	for _, n := range j.spec.ServerNames() {
		if err := start("server", n); err != nil {
			return err
		}
	}
	for _, n := range j.spec.WorkerNames() {
		if err := start("worker", n); err != nil {
			return err
		}
	}
	return nil
}

// newLauncher is the job's local launcher. Agents are detached (they
// outlive a crashed scheduler, which adopts them when it comes back) unless
// the caller wants their output.
func (j *jobState) newLauncher() *launch.Local {
	dir := filepath.Join(j.m.cfg.LogDir, j.spec.Name)
	return &launch.Local{Exe: j.m.cfg.Exe, Log: j.m.cfg.NodeLog, Detach: j.m.cfg.NodeLog == nil,
		LogDir: dir, RecordFile: filepath.Join(dir, "procs.jsonl"), Clock: j.m.clk}
}

// stopProcesses stops the job's processes: those this scheduler launched,
// then every recorded process group still running (launched before a
// scheduler restart, or whose agent did not stop when told): a job that is
// over leaves nothing running, whether or not its agents were connected.
func (j *jobState) stopProcesses(l *launch.Local, grace time.Duration) {
	if l == nil {
		return
	}
	l.StopAll(grace)
	if f := l.RecordFile; f != "" {
		if n, err := launch.StopRecorded(j.m.clk, f, grace); err != nil {
			j.m.log.Warn("stop recorded processes", "job", j.spec.Name, "err", err)
		} else if n > 0 {
			j.m.event(j.spec.Name, "job", "", fmt.Sprintf("stopped %d process groups of job %s left from before", n, j.spec.Name), "")
		}
	}
}

// signalProcesses sends SIGTERM to the job's processes, its launcher's
// and those recorded by a scheduler before this one, and waits for none:
// done before a job's end is answered, so that a scheduler killed right
// after has still told every process to stop (stopProcesses then waits
// for them).
func (j *jobState) signalProcesses(l *launch.Local) {
	if l == nil {
		return
	}
	l.SignalAll()
	if f := l.RecordFile; f != "" {
		if _, err := launch.SignalRecorded(f); err != nil {
			j.m.log.Warn("signal recorded processes", "job", j.spec.Name, "err", err)
		}
	}
}

// watchAgent fails the job when an agent gives up on its node: a worker
// crashing more often than its agent restarts it, or any server dying (a
// server's blocks are in its memory).
func (j *jobState) watchAgent(p *launch.Proc) {
	select {
	case <-p.Exited():
	case <-j.m.done:
		return
	}
	f := j.facts()
	if f.over || f.relaunching || p.Err() == nil || j.retiredAgent(p.Pid()) {
		return
	}
	if j.agentKilled(p) {
		return // launched again
	}
	j.coord.Fail(fmt.Errorf("%s: agent (pid %d) gave up: %v", p.Name, p.Pid(), p.Err()))
}

// getLauncher is the job's launcher (nil for an adopted job).
func (j *jobState) getLauncher() *launch.Local { return j.facts().launcher }

// stopAgents tells every connected agent of the job to stop its role.
func (j *jobState) stopAgents(reason string) {
	var conns []*agentConn
	j.onActor(func() {
		for _, n := range j.nodes {
			if n.conn != nil {
				conns = append(conns, n.conn)
			}
		}
	})
	for _, c := range conns {
		c.send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Stop{Stop: reason}})
	}
}

// column is the heatmap column of time t since bucket 0, or -1 before it.
func (j *jobState) column(t time.Time) int {
	d := t.Sub(j.bucket0)
	if d < 0 {
		return -1
	}
	return int(d / j.m.cfg.Bucket)
}

// observe ingests a worker's report into the node's progress, the
// Monitor's windows and the console's buckets, on the actor: O(1) in the
// job's size. The caller has entered the report in the coordinator's
// samples ledger; servers are
// the job's servers by index (the coordinator's ServerNames). It says
// whether the report was taken (the node is in the job).
func (j *jobState) observe(node string, r *coordinatorpb.ProgressReport, now time.Time, servers []string) bool {
	n, ok := j.nodes[node]
	if !ok || n.removed {
		return false
	}
	var sum float64
	for _, b := range r.BptSeconds {
		sum += b
	}
	c := j.column(now)
	p := &n.prog
	if p.reported && r.Iteration > p.iteration && now.After(p.reportedAt) {
		// The iterations since the last report took at least their own
		// measured time (BPT plus the pull condition's hold, per iteration):
		// reports that arrive bunched — an agent's backlog after a
		// scheduler's outage or failover, a loaded host — must not make the
		// pace look faster than they ran. (A pace of 40,000 iterations/s
		// from reports a millisecond apart once placed a global action at
		// iteration 41,823 of a 3,760-iteration job.)
		done := float64(r.Iteration - p.iteration)
		dt := now.Sub(p.reportedAt).Seconds()
		if k := len(r.BptSeconds); k > 0 {
			own := sum
			for _, w := range r.WaitSeconds {
				own += w
			}
			dt = max(dt, own*done/float64(k))
		}
		pace := done / dt
		if p.rate == 0 {
			p.rate = pace
		} else {
			p.rate = 0.5*p.rate + 0.5*pace
		}
	}
	p.iteration, p.batch, p.loss, p.heard, p.reported, p.reportedAt = r.Iteration, int(r.BatchSize), r.Loss, now, true, now
	p.bptSum += sum
	p.bptCount += len(r.BptSeconds)
	if c >= 0 && len(r.BptSeconds) > 0 {
		n.cells.add(c, sum, len(r.BptSeconds), 0)
	}
	p.spark = sparkWith(p.spark, r.BptSeconds...)
	if n.role == "worker" {
		if n.marks == nil {
			n.marks = timeline.NewMarks(j.marksCap)
		}
		n.marks.AddReport(now, r.Iteration, r.BptSeconds, r.WaitSeconds)
		n.cause.addSplit(r, servers)
	}
	at := now.Sub(j.submitted)
	var cbuf [8]monitor.CommSample
	comm := cbuf[:0]
	for _, cs := range r.Comm {
		if int(cs.Server) >= len(servers) {
			continue
		}
		sname := servers[cs.Server]
		comm = append(comm, monitor.CommSample{At: at, Server: sname, Bytes: cs.Bytes, Seconds: cs.Seconds})
		if sn := j.nodes[sname]; sn != nil && c >= 0 {
			sn.cells.add(c, cs.Seconds, 1, float64(cs.Bytes))
			sn.prog.heard = now
			sn.prog.spark = sparkWith(sn.prog.spark, cs.Seconds)
		}
	}
	// The report carries the BPTs of the last iterations, newest last:
	// the Monitor places them back in time from now.
	j.mon.ObserveReport(node, at, int(r.BatchSize), r.Iteration, r.BptSeconds, comm)
	return true
}

// sparkLen is how many recent samples a node's sparkline keeps.
const sparkLen = 60

// sparkWith is s with add appended, the last sparkLen samples. The
// samples a slice it returned shows are never written again (copies of a
// node's progress share them): new samples go past its end, into spare
// capacity, and the window slides by moving its start; when the capacity
// runs out the window moves to a new array (every few sparkLen samples).
func sparkWith(s []float64, add ...float64) []float64 {
	if len(add) >= sparkLen {
		return append(make([]float64, 0, sparkCap), add[len(add)-sparkLen:]...)
	}
	if len(s)+len(add) > cap(s) {
		s = append(make([]float64, 0, sparkCap), s[max(len(s)+len(add)-sparkLen, 0):]...)
	}
	s = append(s, add...)
	return s[max(len(s)-sparkLen, 0):]
}

// sparkCap is the capacity of a sparkline's array.
const sparkCap = 4 * sparkLen

// tick runs the job's periodic work: lost nodes, policies, action expiry.
func (j *jobState) tick(now time.Time) {
	m := j.m
	var lost []*consolepb.Action // actions failed by a lost node
	var relaunch []*nodeState    // adopted nodes whose agents never came back
	j.onActor(func() {
		relaunch = j.lostLocked(now)
		for _, n := range relaunch {
			why := "its agent did not come back after the scheduler restarted"
			lost = append(lost, j.changedSince(now, func() { j.gate.NodeLost(now, n.name, why) })...)
			j.tableLost(now, n.name)
		}
		for _, n := range j.nodes {
			st := n.status.State
			if st == agentpb.NodeState_NODE_STATE_DONE || st == agentpb.NodeState_NODE_STATE_STOPPED ||
				st == agentpb.NodeState_NODE_STATE_LOST {
				continue
			}
			seen := n.seen()
			if seen.IsZero() {
				continue
			}
			if now.Sub(seen) > m.cfg.LostAfter {
				n.status.State = agentpb.NodeState_NODE_STATE_LOST
				why := fmt.Sprintf("nothing heard for %s", now.Sub(seen).Round(time.Second))
				m.event(j.spec.Name, "node", n.name, fmt.Sprintf("%s lost: %s", n.name, why), "")
				j.mon.Forget(n.name)
				lost = append(lost, j.changedSince(now, func() { j.gate.NodeLost(now, n.name, why) })...)
				j.tableLost(now, n.name)
			}
		}
	})
	j.thr.observe(now, j.coord.WorkerSamples())
	j.goodputTick(now)
	at := now.Sub(j.submitted)
	// The snapshot takes milliseconds on a big job: reports go on meanwhile.
	snap := j.mon.Snapshot(at)
	dprs := map[string]int64{}
	j.onActor(func() {
		j.snap = snap
		for _, n := range j.nodes {
			if n.stats != nil {
				dprs[n.name] = n.stats.Dprs
			}
		}
	})
	j.dprs.Store(&dprs)
	for _, a := range lost {
		m.persistAction(j, a)
	}
	j.relaunch(relaunch, now)
	j.relaunchGone()
	j.record(now, false)
	j.judge(now, false)
	j.runPolicies(snap, now)
	j.flushHistory(now, false)
}

// policiesJSON is the durable form of the job's policy settings.
func (j *jobState) policiesJSON() []byte {
	b, _ := json.Marshal(j.policies)
	return b
}

func sortedNodes(ns map[string]*nodeState) []*nodeState {
	out := make([]*nodeState, 0, len(ns))
	for _, n := range ns {
		out = append(out, n)
	}
	sortByNode(out, func(n *nodeState) (string, string) { return n.role, n.name })
	return out
}

// sortByNode orders items servers first, then as nodeLess orders their
// names, splitting each name once (a 5,000-node job's views sort its nodes
// every second; splitting at every comparison was most of the sort).
func sortByNode[T any](items []T, roleName func(T) (role, name string)) {
	// The keys are sorted with the items' places, and the items moved
	// once: a view's rows are near a kilobyte each, and sorting 20,000 of
	// them in place moved a quarter of a gigabyte per view.
	type keyed struct {
		key  nodeKey
		item int
	}
	ks := make([]keyed, len(items))
	for i, it := range items {
		ks[i] = keyed{keyOf(roleName(it)), i}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return a.key.compare(b.key) })
	sorted := make([]T, len(items))
	for i, k := range ks {
		sorted[i] = items[k.item]
	}
	copy(items, sorted)
}

// sortKey is n's place in the nodes' order, made once (a view sorts
// 20,000 of them). The caller is the job's actor.
func (n *nodeState) sortKey() nodeKey {
	if n.key == nil {
		k := keyOf(n.role, n.name)
		n.key = &k
	}
	return *n.key
}

// nodeKey is a node's place in the nodes' order: servers first, then by
// name, a trailing number compared as a number (worker-2 before worker-10).
type nodeKey struct {
	server       bool
	prefix, name string
	index        int // -1: the name has no trailing number
}

func keyOf(role, name string) nodeKey {
	p, x := splitIndex(name)
	return nodeKey{server: role == "server", prefix: p, name: name, index: x}
}

func (a nodeKey) compare(b nodeKey) int {
	if a.server != b.server {
		if a.server {
			return -1
		}
		return 1
	}
	if a.index >= 0 && b.index >= 0 && a.prefix == b.prefix {
		return cmp.Compare(a.index, b.index)
	}
	return strings.Compare(a.name, b.name)
}

// nodeLess orders worker-2 before worker-10.
func nodeLess(a, b string) bool { return keyOf("", a).compare(keyOf("", b)) < 0 }

// splitIndex splits a node name into its prefix and its trailing number
// (-1 when it has none): worker-12 -> "worker-", 12.
func splitIndex(name string) (string, int) {
	i := len(name)
	for i > 0 && name[i-1] >= '0' && name[i-1] <= '9' {
		i--
	}
	if i == len(name) {
		return name, -1
	}
	n := 0
	for _, c := range name[i:] {
		n = n*10 + int(c-'0')
	}
	return name[:i], n
}

func nodeIndex(name string) int {
	_, n := splitIndex(name)
	return n
}
