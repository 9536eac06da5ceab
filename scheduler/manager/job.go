package manager

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"time"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/coordinator"
	"github.com/kelpie/kelpie/scheduler/launch"
	"github.com/kelpie/kelpie/scheduler/monitor"
)

// jobState is one job as the manager runs it. Every field is guarded by the
// manager's mutex unless said otherwise.
type jobState struct {
	m     *Manager
	spec  *spec.Spec
	coord *coordinator.Job // has its own lock
	mon   *monitor.Monitor

	submitted, ended time.Time
	submittedBy      string
	state            string
	err              string
	res              *Result
	endedCh          chan struct{}
	launcher         *launch.Local // nil for a job adopted after a scheduler restart

	nodes    map[string]*nodeState
	actions  []*kelpiepb.Action
	byID     map[string]*kelpiepb.Action
	policies map[string]*policySetting
	bucket0  time.Time        // start of heatmap column 0
	dprs     map[string]int64 // servers' delayed pulls, polled
	polled   time.Time
	views    map[viewKey]cachedView
	snap     monitor.Snapshot            // the Monitor as of the last tick: views and gates read it
	acks     map[string]map[string]int64 // global action -> node -> applied iteration, until all acked
	want     map[string]int              // global action -> how many acks it needs
	// Table changes under way: their wire table (for replays) and the
	// signal that every worker has switched.
	tables    map[string]*kelpiepb.Assignment
	tableDone map[string]chan struct{}
	paused    float64            // seconds the job waited for blocks in transit, over all changes
	preBackup *spec.Sync         // the sync model before BACKUP_WORKERS turned drop on
	drop      int                // backup workers in effect: gradients dropped per iteration
	accum     map[string]int     // gradient-accumulation counts in effect (AntDT-DD)
	lrScale   map[string]float64 // learning-rate scales in effect (ADJUST_LR)
	rng       *rand.Rand
	// relaunching: the checkpoint-and-restart baseline is stopping the
	// job's agents on purpose.
	relaunching bool
}

// nodeState is what the manager knows of one node.
type nodeState struct {
	name, role string
	host       string
	status     kelpiepb.NodeStatus
	lastSeen   time.Time
	conn       *agentConn // nil while the agent is disconnected
	iteration  int64
	batch      int
	reported   bool      // a progress report has arrived (an added worker has joined)
	rate       float64   // iterations per second, from its reports (smoothed)
	reportedAt time.Time // when its last report arrived
	removed    bool      // taken out of the job (REMOVE_WORKER, or an added worker that never came up)
	loss       float64
	// buckets of BPT (workers) or comm time (servers) per heatmap column.
	sum   []float64
	count []int
	bytes []float64 // servers: bytes moved per column
	spark []float64 // recent samples, oldest first
}

func newJobState(m *Manager, s *spec.Spec, cj *coordinator.Job, now time.Time) *jobState {
	cfg := monitor.DefaultConfig()
	nd := s.Policies.AntDTND
	if nd.WindowTransient > 0 {
		cfg.LTrans = nd.WindowTransient
	}
	if nd.WindowPersistent > 0 {
		cfg.LPer = nd.WindowPersistent
	}
	if nd.Lambda > 0 {
		cfg.Lambda = nd.Lambda
	}
	cfg.ScaleThreshold = s.Policies.PSLD.ScaleThreshold
	cfg.MaxSamples = max(cfg.MaxSamples, 4*s.Cluster.Workers)
	j := &jobState{m: m, spec: s, coord: cj, mon: monitor.New(cfg), submitted: now, state: StateStarting,
		endedCh: make(chan struct{}), nodes: map[string]*nodeState{}, byID: map[string]*kelpiepb.Action{},
		policies: defaultPolicies(s), bucket0: now}
	for _, n := range s.ServerNames() {
		j.nodes[n] = &nodeState{name: n, role: "server"}
	}
	for i, n := range s.WorkerNames() {
		j.nodes[n] = &nodeState{name: n, role: "worker", batch: s.LocalBatch(i)}
	}
	for _, n := range j.nodes {
		n.status.State = kelpiepb.NodeState_NODE_STATE_STARTING
		n.sum = make([]float64, m.cfg.Columns)
		n.count = make([]int, m.cfg.Columns)
		n.bytes = make([]float64, m.cfg.Columns)
	}
	return j
}

func (j *jobState) over() bool {
	return j.state == StateCompleted || j.state == StateFailed || j.state == StateKilled
}

func (j *jobState) describe() string {
	return fmt.Sprintf("%s on %s, %d servers, %d workers, %s", j.spec.Model.Kind, j.spec.Data.Kind,
		j.servers(), len(j.liveWorkers()), syncName(j.spec))
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
	l := &launch.Local{Exe: j.m.cfg.Exe, Log: j.m.cfg.NodeLog, Detach: j.m.cfg.NodeLog == nil,
		LogDir: filepath.Join(j.m.cfg.LogDir, j.spec.Name)}
	j.launcher = l
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

// watchAgent fails the job when an agent gives up on its node: a worker
// crashing more often than its agent restarts it, or any server dying (a
// server's blocks are in its memory).
func (j *jobState) watchAgent(p *launch.Proc) {
	<-p.Exited()
	j.m.mu.Lock()
	over := j.over() || j.relaunching
	j.m.mu.Unlock()
	if over || p.Err() == nil {
		return
	}
	j.coord.Fail(fmt.Errorf("%s: agent (pid %d) gave up: %v", p.Name, p.Pid(), p.Err()))
}

// stopAgents tells every connected agent of the job to stop its role.
func (j *jobState) stopAgents(reason string) {
	j.m.mu.Lock()
	var conns []*agentConn
	for _, n := range j.nodes {
		if n.conn != nil {
			conns = append(conns, n.conn)
		}
	}
	j.m.mu.Unlock()
	for _, c := range conns {
		c.send(&kelpiepb.SchedulerMessage{Body: &kelpiepb.SchedulerMessage_Stop{Stop: reason}})
	}
}

// column is the heatmap column of time t, or -1 before column 0.
func (j *jobState) column(t time.Time) int {
	d := t.Sub(j.bucket0)
	if d < 0 {
		return -1
	}
	return int(d / j.m.cfg.Bucket)
}

// roll shifts the node buckets so that column c fits.
func (j *jobState) roll(c int) int {
	cols := j.m.cfg.Columns
	if c < cols {
		return c
	}
	shift := c - cols + 1
	for _, n := range j.nodes {
		copy(n.sum, n.sum[min(shift, cols):])
		copy(n.count, n.count[min(shift, cols):])
		copy(n.bytes, n.bytes[min(shift, cols):])
		for i := max(cols-shift, 0); i < cols; i++ {
			n.sum[i], n.count[i], n.bytes[i] = 0, 0, 0
		}
	}
	j.bucket0 = j.bucket0.Add(time.Duration(shift) * j.m.cfg.Bucket)
	return cols - 1
}

// observe ingests a worker's report: the coordinator's counters, the
// Monitor's windows and the console's buckets.
func (j *jobState) observe(node string, r *kelpiepb.ProgressReport, now time.Time) {
	_ = j.coord.Observe(r)
	n, ok := j.nodes[node]
	if !ok || n.removed {
		return
	}
	if n.reported && r.Iteration > n.iteration && now.After(n.reportedAt) {
		pace := float64(r.Iteration-n.iteration) / now.Sub(n.reportedAt).Seconds()
		if n.rate == 0 {
			n.rate = pace
		} else {
			n.rate = 0.5*n.rate + 0.5*pace
		}
	}
	n.iteration, n.batch, n.loss, n.lastSeen, n.reported, n.reportedAt = r.Iteration, int(r.BatchSize), r.Loss, now, true, now
	if j.state == StateStarting {
		j.state = StateRunning
	}
	at := now.Sub(j.submitted)
	// The report carries the BPTs of the last iterations, newest last:
	// place them back in time.
	var back time.Duration
	for i := len(r.BptSeconds) - 1; i >= 0; i-- {
		b := time.Duration(r.BptSeconds[i] * float64(time.Second))
		j.mon.ObserveWorker(node, monitor.WorkerSample{At: at - back, BPT: b, BatchSize: int(r.BatchSize),
			Iteration: r.Iteration - int64(len(r.BptSeconds)-1-i)})
		back += b
	}
	c := j.column(now)
	if c >= 0 {
		c = j.roll(c)
		for _, b := range r.BptSeconds {
			n.sum[c] += b
			n.count[c]++
		}
	}
	n.spark = appendBounded(n.spark, r.BptSeconds, 60)
	servers := j.coord.ServerNames()
	for _, cs := range r.Comm {
		if int(cs.Server) >= len(servers) {
			continue
		}
		sname := servers[cs.Server]
		j.mon.ObserveComm(node, monitor.CommSample{At: at, Server: sname, Bytes: cs.Bytes, Seconds: cs.Seconds})
		if sn := j.nodes[sname]; sn != nil && c >= 0 {
			sn.sum[c] += cs.Seconds
			sn.count[c]++
			sn.bytes[c] += float64(cs.Bytes)
			sn.lastSeen = now
			sn.spark = appendBounded(sn.spark, []float64{cs.Seconds}, 60)
		}
	}
}

func appendBounded(s, add []float64, n int) []float64 {
	s = append(s, add...)
	if len(s) > n {
		s = append(s[:0], s[len(s)-n:]...)
	}
	return s
}

// tick runs the job's periodic work: lost nodes, policies, action expiry.
func (j *jobState) tick(now time.Time) {
	m := j.m
	m.mu.Lock()
	for _, n := range j.nodes {
		st := n.status.State
		if st == kelpiepb.NodeState_NODE_STATE_DONE || st == kelpiepb.NodeState_NODE_STATE_STOPPED ||
			st == kelpiepb.NodeState_NODE_STATE_LOST || n.lastSeen.IsZero() {
			continue
		}
		if now.Sub(n.lastSeen) > m.cfg.LostAfter {
			n.status.State = kelpiepb.NodeState_NODE_STATE_LOST
			m.eventLocked(j.spec.Name, "node", n.name, fmt.Sprintf("%s lost: nothing heard for %s", n.name, now.Sub(n.lastSeen).Round(time.Second)), "")
			j.mon.Forget(n.name)
		}
	}
	snap := j.mon.Snapshot(now.Sub(j.submitted))
	j.snap = snap
	poll := j.state == StateRunning && now.Sub(j.polled) >= 5*time.Second
	if poll {
		j.polled = now
	}
	m.mu.Unlock()
	if poll {
		if servers, err := collectServers(j.coord.ServerAddrs(), j.coord.ServerNames()); err == nil {
			m.mu.Lock()
			j.dprs = map[string]int64{}
			for _, sv := range servers {
				j.dprs[sv.Name] = sv.DPRs
			}
			m.mu.Unlock()
		}
	}
	j.runPolicies(snap, now)
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
	sort.Slice(out, func(a, b int) bool {
		if out[a].role != out[b].role {
			return out[a].role == "server"
		}
		return nodeLess(out[a].name, out[b].name)
	})
	return out
}

// nodeLess orders worker-2 before worker-10.
func nodeLess(a, b string) bool {
	pa, ia := splitIndex(a)
	pb, ib := splitIndex(b)
	if ia >= 0 && ib >= 0 && pa == pb {
		return ia < ib
	}
	return a < b
}

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
