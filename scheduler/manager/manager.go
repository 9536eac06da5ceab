// Package manager is the heart of kelpie's scheduler: the job manager. It
// admits jobs (from the console API, the CLI or `kelpie run`), launches each
// job's nodes as agents through a launcher, takes the agents' streams
// (telemetry, heartbeats, action acks), feeds the Monitor, runs the straggler
// policies through the approval gate, dispatches actions, persists jobs,
// nodes, actions, policy settings and the audit log in the store, and serves
// the console's views.
//
// Each job's mutable state is guarded by the job's own lock (jobState.mu),
// the manager's own (the job table, EPS's queue) by the manager's lock,
// taken before a job's when both are held; the event log has a lock of its
// own, taken last. No I/O (stream sends, store writes of large values,
// process launches) happens while a lock is held except small bbolt
// writes, which are bounded. Readers that must not wait for them read
// published values instead: the job list and each job's views (atomic
// pointers, rebuilt at most every ViewTTL), the servers' delayed pulls, and
// the heatmap buckets (atomic cells). Telemetry comes in on the agents'
// streams only (worker reports, server counters, heartbeats, acks; the
// coordinator's old Progress call answers Unimplemented). Actions go down
// through the agents only: a global one through a primary agent that
// forwards it to the others (broadcast.go), a node action and a server's
// command to its own agent. Every goroutine the manager starts runs through spawn and has ended
// when Close returns; waits are woken by the events they wait for; time
// comes from Config.Clock.
package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/coordinator"
	"github.com/kelpie/kelpie/scheduler/launch"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/shard"
	"github.com/kelpie/kelpie/scheduler/store"
)

// Job states.
const (
	StateStarting  = "starting"
	StateRunning   = "running"
	StateCompleted = "completed"
	StateFailed    = "failed"
	StateKilled    = "killed"
)

// Config wires a manager.
type Config struct {
	Addr      string       // the scheduler's gRPC address that agents and roles dial
	Exe       string       // the kelpie binary for agents (default: this executable)
	Store     *store.Store // durable state (required)
	Log       *slog.Logger
	NodeLog   io.Writer     // agents' and roles' output when attached (default: per-node files in LogDir)
	LogDir    string        // per-node log files of detached agents (default: the temp dir)
	LostAfter time.Duration // no heartbeat for this long marks a node lost (default 5s)
	Tick      time.Duration // policy and view cadence (default 1s)
	Bucket    time.Duration // heatmap and chart bucket (default 1s)
	Columns   int           // heatmap and chart buckets kept (default 120)
	// NoLaunch admits jobs without starting their nodes: their agents are
	// expected to connect from elsewhere (simulations, benchmarks).
	NoLaunch bool
	// MaxRestarts is how many consecutive crashes an agent restarts its
	// role before it gives up and the job fails (default 10).
	MaxRestarts int
	// OrphanTimeout is handed to launched agents (--orphan-timeout): how
	// long they keep their roles running without a scheduler (default: the
	// agent's, 10 min).
	OrphanTimeout time.Duration
	// Clock is the manager's source of time (default: the wall clock);
	// tests inject a fake one. Now, if set, overrides its Now.
	Clock clock.Clock
	Now   func() time.Time

	// Capacity is the worker and server slots all jobs share. Zero in both
	// (the default): unlimited, every job launches at once. With a
	// capacity, a job that does not fit is queued (StateQueued) and
	// launched first in first out; a zero in one kind leaves it unlimited.
	Capacity policy.Capacity
	// EPS is the mode of EPS multi-job scheduling under a capacity (eps.go):
	// auto (the default), approve (its actions wait for an operator) or off
	// (a plain first-in-first-out queue at the sizes jobs ask for).
	EPS string
	// EPSInterval is how often running-job scheduling grows jobs into idle
	// slots (default 5s).
	EPSInterval time.Duration
	// A job is in its early-feedback phase, protected from shrinking and not
	// grown, until it has run EarlyFeedbackIterations iterations (default
	// 100, EPS §2.1; negative: none) and for EarlyFeedback (default 0).
	EarlyFeedbackIterations int
	EarlyFeedback           time.Duration
	// HangMin and HangFactor: a job is hung once it made no progress for
	// max(HangMin, HangFactor × its median iteration time) (scheduler/hang;
	// defaults 30 s and 20); a spec's train.hang_min and hang_factor
	// override them.
	HangMin    time.Duration
	HangFactor float64

	// NodeRefusal, if set, receives the calls a node's own gRPC server
	// refused (a parameter server's guard), forwarded by its agent: the
	// daemon audits and counts them.
	NodeRefusal func(job, node string, r *agentpb.NodeRefusal)

	// CheckData, if set, checks that the data a job's roles will read is
	// there and whole before its nodes are launched here (not with
	// NoLaunch). It is injected (the CLI passes runtime/role.CheckData) so
	// the scheduler imports no data loader: docs/design.md's import rules.
	CheckData func(*spec.Spec) error
	// SpecLimits bound the sizes a submitted spec may ask for (nil:
	// spec.DefaultLimits). Restored jobs were admitted under them already.
	SpecLimits *spec.Limits
	// NodeCert writes the credentials file of a node about to be launched
	// (a certificate naming job and node, readable by its user only) and
	// returns its path, handed to the agent with --cert. Nil: nodes run
	// without certificates (a plaintext node plane).
	NodeCert func(job, instance, node string) (string, error)
	// SignAction, if set, signs a global action for the agent primary to
	// forward (core/identity.Credentials.SignAction): the other agents
	// apply a forwarded action only with the scheduler's signature.
	SignAction func(cmd *agentpb.ActionCommand, primary string) error
	// Pods, when set, runs the nodes on a cluster (kelpie scheduler
	// --launcher kubernetes) instead of as local processes.
	Pods Pods

	// Each job's timeline (history.go) keeps at most HistoryBudget node
	// samples (frames × nodes; 0: timeline.DefaultBudget) and HistoryFrames
	// frames (0: timeline.DefaultMaxFrames), older frames merged as it
	// grows; a finished job's timeline is deleted HistoryRetention after
	// it ended (0: DefaultHistoryRetention; negative: never).
	HistoryBudget    int
	HistoryFrames    int
	HistoryRetention time.Duration
}

// Manager is the job manager.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	clk   clock.Clock
	coord *coordinator.Coordinator
	// stackWaits routes the agents' stacks to their collections (stacks.go).
	stackWaits stackWaits
	// probeWaits routes the agents' probe answers to their probes (probe.go).
	probeWaits probeWaits

	// mu guards the manager's own state: the job table and EPS's queue
	// and plan. A job's state is its actor's (actor.go), which never
	// takes this lock: EPS's pass may wait for a job's actor while it
	// holds it, never the other way.
	mu     sync.RWMutex
	jobs   map[string]*jobState
	eps    *epsState
	pruned time.Time // when timelines past their retention were last deleted (loop only)
	// previewed is when the previews of the actions waiting for approval
	// were last computed again (loop only; preview.go).
	previewed time.Time
	// evMu guards the event log; it is taken last, under any other lock.
	evMu   sync.Mutex
	events []*consolepb.Event
	evSeq  uint64
	// nextID numbers actions across jobs.
	nextID atomic.Uint64
	// published is m.jobs as of its last change, read without the lock.
	published atomic.Pointer[map[string]*jobState]

	// Every goroutine the manager starts runs through spawn and is waited
	// for by Close; ctx ends (and done closes) when Close begins.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	gmu    sync.Mutex // guards closed and the WaitGroup's use against Close
	closed bool
	wg     sync.WaitGroup
}

// New makes a manager and restores the jobs in its store.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("manager: a store is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.LostAfter <= 0 {
		cfg.LostAfter = 5 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.Bucket <= 0 {
		cfg.Bucket = time.Second
	}
	if cfg.Columns <= 0 {
		cfg.Columns = 120
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	clk = clock.WithNow(clk, cfg.Now)
	cfg.Now = clk.Now
	switch cfg.EPS {
	case "":
		cfg.EPS = ModeAuto
	case ModeAuto, ModeApprove, ModeOff:
	default:
		return nil, fmt.Errorf("manager: eps mode must be auto, approve or off, not %q", cfg.EPS)
	}
	if cfg.Capacity.Workers < 0 || cfg.Capacity.Servers < 0 {
		return nil, fmt.Errorf("manager: capacity must not be negative (%+v)", cfg.Capacity)
	}
	if cfg.HistoryRetention == 0 {
		cfg.HistoryRetention = DefaultHistoryRetention
	}
	if cfg.EPSInterval <= 0 {
		cfg.EPSInterval = DefaultEPSInterval
	}
	switch {
	case cfg.EarlyFeedbackIterations == 0:
		cfg.EarlyFeedbackIterations = DefaultEarlyFeedbackIterations
	case cfg.EarlyFeedbackIterations < 0:
		cfg.EarlyFeedbackIterations = 0
	}
	m := &Manager{cfg: cfg, log: cfg.Log, clk: clk, coord: coordinator.New(clk), jobs: map[string]*jobState{}, done: make(chan struct{}),
		eps: newEPSState()}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if err := m.restore(); err != nil {
		m.cancel()
		return nil, err
	}
	m.epsKick() // jobs queued again may fit
	m.spawn(m.loop)
	return m, nil
}

// spawn runs f in a goroutine that Close waits for. f must return soon
// after m.done closes (m.ctx ends). After Close has begun, f does not run.
func (m *Manager) spawn(f func()) bool {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// Coordinator is the Coordinator gRPC service of the manager's jobs.
func (m *Manager) Coordinator() *coordinator.Coordinator { return m.coord }

// Close stops the manager's loop. Jobs' processes are left running: a
// scheduler restarted on the same store and address adopts them.
func (m *Manager) Close() {
	m.gmu.Lock()
	first := !m.closed
	m.closed = true
	m.gmu.Unlock()
	if first {
		m.cancel()
		close(m.done)
	}
	m.wg.Wait()
}

// Shutdown stops every job this manager launched and then the manager.
func (m *Manager) Shutdown() {
	for _, j := range m.jobList() {
		// Adopted jobs stop their recorded process groups too.
		j.stopAgents("scheduler shutting down")
		j.stopProcesses(j.getLauncher(), 3*time.Second)
	}
	m.Close()
}

func (m *Manager) now() time.Time { return m.cfg.Now() }

// event records an event for the console (and the log). It may be called
// under any lock.
func (m *Manager) event(job, kind, node, msg, who string) {
	m.addEvent(&consolepb.Event{Time: ts(m.now()), Job: job, Kind: kind, Message: msg, Who: who, Node: node})
}

// addEvent appends e to the event log.
func (m *Manager) addEvent(e *consolepb.Event) {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	m.evSeq++
	m.events = append(m.events, e)
	if len(m.events) > 2000 {
		m.events = append([]*consolepb.Event(nil), m.events[len(m.events)-1000:]...)
	}
	m.log.Info(e.Message, "job", e.Job, "kind", e.Kind, "node", e.Node, "who", e.Who)
}

// Submit admits a job from its spec text and launches it.
func (m *Manager) Submit(specYAML, who string) (string, error) {
	lim := spec.DefaultLimits()
	if m.cfg.SpecLimits != nil {
		lim = *m.cfg.SpecLimits
	}
	s, err := spec.ParseLimits("spec.yaml", []byte(specYAML), lim)
	if err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	return m.SubmitSpec(s, who)
}

// SubmitSpec admits a parsed job and launches it, or with a capacity queues
// it until it fits (a job that could never fit is refused).
func (m *Manager) SubmitSpec(s *spec.Spec, who string) (string, error) {
	if !m.cfg.NoLaunch && m.cfg.CheckData != nil {
		// The local launcher's roles read the data here: a missing or
		// damaged data set fails the job now, not after its roles crash.
		if err := m.cfg.CheckData(s); err != nil {
			return "", status.Errorf(codes.FailedPrecondition, "job %s: %v", s.Name, err)
		}
	}
	if old, ok := m.lookup(s.Name); ok {
		if f := old.facts(); !f.over {
			return "", status.Errorf(codes.AlreadyExists, "job %s is already %s", s.Name, f.state)
		}
	}
	queued := m.capacityOn()
	var sizes []slots
	var specs map[slots]*spec.Spec
	if queued {
		var err error
		if sizes, specs, err = m.epsAdmissible(s); err != nil {
			return "", err
		}
	}
	cj, err := m.coord.AddJob(s)
	if err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	j := newJobState(m, s, cj, m.now())
	j.submittedBy = who
	if queued {
		j.state = StateQueued
		j.publishFacts() // not published yet: the actor's from then on
	}
	if err := m.durableShards(s.Name, cj); err != nil {
		cj.Fail(err)
		return "", status.Errorf(codes.Internal, "store shards of %s: %v", s.Name, err)
	}
	if err := m.cfg.Store.PutJob(store.JobRecord{Name: s.Name, SpecYAML: string(s.YAML()), State: j.state,
		SubmittedBy: who, Submitted: j.submitted}); err != nil {
		cj.Fail(err)
		return "", status.Errorf(codes.Internal, "store job %s: %v", s.Name, err)
	}
	_ = m.cfg.Store.PutPolicies(s.Name, j.policiesJSON())
	desc := j.describe() // before the job is published: no lock yet
	m.mu.Lock()
	m.putJobLocked(s.Name, j)
	m.mu.Unlock()
	j.startTicker()
	m.event(s.Name, "job", "", fmt.Sprintf("job %s submitted: %s", s.Name, desc), who)
	// Snapshots of an earlier job of the same name must not be restored.
	_ = os.RemoveAll(j.snapshotDir())
	if queued {
		if err := m.enqueue(j, sizes, specs); err != nil {
			return "", err
		}
		return s.Name, nil
	}
	if err := m.startJob(j); err != nil {
		return "", err
	}
	return s.Name, nil
}

// startJob launches a job's nodes and follows it.
func (m *Manager) startJob(j *jobState) error {
	if m.cfg.NoLaunch {
		// Nodes come from elsewhere.
	} else if err := j.launch(); err != nil {
		m.finish(j, StateFailed, err)
		return status.Errorf(codes.Internal, "launch job %s: %v", j.spec.Name, err)
	}
	m.spawn(func() { m.watch(j) })
	m.spawn(func() { m.persistStart(j) })
	m.spawn(func() { m.runScript(j) })
	return nil
}

// durableShards snapshots a new job's shard queue and persists every
// change from then on, before the fetch or report that made it is
// acknowledged: a scheduler restart loses no shard state.
func (m *Manager) durableShards(name string, cj *coordinator.Job) error {
	var err error
	cj.Queue(func(q *shard.Queue) { err = m.cfg.Store.SaveShards(name, q) })
	if err != nil {
		return err
	}
	cj.Persist = func(ch []shard.Shard) error { return m.cfg.Store.PutShardChanges(name, ch) }
	cj.PersistAddr = func(node, addr string) error { return m.cfg.Store.SetNodeAddr(name, node, "server", addr) }
	return nil
}

// Kill stops a live job.
func (m *Manager) Kill(name, who string) error {
	j, ok := m.lookup(name)
	if !ok {
		return status.Errorf(codes.NotFound, "no job %q", name)
	}
	if f := j.facts(); f.over {
		return status.Errorf(codes.FailedPrecondition, "job %s is already %s", name, f.state)
	}
	// Killed before the coordinator fails it: the goroutine that watches
	// the coordinator would otherwise record the job as failed first.
	m.finish(j, StateKilled, fmt.Errorf("killed by %s", who))
	j.coord.Fail(fmt.Errorf("killed by %s", who))
	return nil
}

// watch waits for a job to end and records how.
func (m *Manager) watch(j *jobState) {
	select {
	case <-j.coord.Finished():
		m.complete(j)
	case <-j.coord.Failed():
		if d := j.coord.Divergence(); d != nil {
			m.diverged(j, d)
			return
		}
		// finish ignores a job that is already over.
		m.finish(j, StateFailed, j.coord.Err())
	case <-m.done:
	}
}

// complete assembles the result of a finished job, stops its nodes and
// records it.
func (m *Manager) complete(j *jobState) {
	m.settleOpen(j)
	res := j.result(StateCompleted)
	// Servers send their final counters through their agents as they shut
	// down.
	addrs, names := j.coord.ServerAddrs(), j.coord.ServerNames()
	asked := m.now()
	var live []string
	for i, addr := range addrs {
		if addr != "" && i < len(names) {
			live = append(live, names[i])
		}
	}
	m.shutdownServers(j, live, "shutdown/"+j.spec.Name, "job finished")
	servers, err := m.finalServers(j, addrs, names, asked)
	if err != nil {
		m.log.Warn("server stats", "job", j.spec.Name, "err", err)
	}
	res.Servers = servers
	for _, sv := range servers {
		res.DPRs += sv.DPRs
	}
	res.JCTSeconds = m.now().Sub(j.submitted).Seconds()
	j.onActor(func() { j.res = res })
	m.finish(j, StateCompleted, nil)
}

// finish moves a job to a final state, stops its nodes and persists it.
func (m *Manager) finish(j *jobState, state string, cause error) {
	var (
		over bool
		res  *Result
		msg  string
		rec  store.JobRecord
		l    *launch.Local
	)
	j.onActor(func() {
		if over = j.over(); over {
			return
		}
		j.state = state
		j.ended = m.now()
		// A view of the job as running must not outlive it: views of several
		// jobs read together (EPS's capacity) would show it beside its successor.
		j.invalidateViews()
		if cause != nil {
			j.err = cause.Error()
		}
		res = j.res
		msg = fmt.Sprintf("job %s %s", j.spec.Name, state)
		if cause != nil {
			msg += ": " + cause.Error()
		}
		if res != nil && state == StateCompleted {
			msg += fmt.Sprintf(" (%.1fs, accuracy %.4f)", res.JCTSeconds, res.Accuracy)
		}
		m.event(j.spec.Name, "job", "", msg, "")
		rec = store.JobRecord{Name: j.spec.Name, SpecYAML: string(j.spec.YAML()), State: state, Error: j.err,
			SubmittedBy: j.submittedBy, Submitted: j.submitted, Finished: j.ended}
		l = j.launcher
	})
	if over {
		return
	}
	m.settleOpen(j)
	j.closeHistory(m.now(), state)
	j.releaseHistory()
	j.stopAgents(msg)
	j.signalProcesses(l) // before the end is answered: TestKillBeforeReconnect
	m.spawn(func() { j.stopProcesses(l, 5*time.Second) })
	if m.cfg.Pods != nil {
		// When the workers are done, the servers' Pods go too.
		name := j.spec.Name
		m.spawn(func() { m.endPods(name) })
	}
	if res != nil {
		rec.Result, _ = json.Marshal(res)
	}
	if err := m.cfg.Store.PutJob(rec); err != nil {
		m.log.Error("store job", "job", j.spec.Name, "err", err)
	}
	close(j.endedCh)
	m.epsKick() // its slots are free
}

// Wait blocks until a job has ended and returns its result (nil unless it
// completed or diverged) and its error (nil only when it completed).
func (m *Manager) Wait(ctx context.Context, name string) (*Result, error) {
	j, ok := m.lookup(name)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no job %q", name)
	}
	select {
	case <-j.endedCh:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f := j.facts()
	if f.state == StateDiverged {
		// Its result is real (what was trained, where it diverged).
		return f.res, fmt.Errorf("job %s %s: %s", name, f.state, f.err)
	}
	if f.state != StateCompleted {
		return nil, fmt.Errorf("job %s %s: %s", name, f.state, f.err)
	}
	return f.res, nil
}

// Procs lists the processes launched for a job (tests stop and check them).
func (m *Manager) Procs(name string) []*launch.Proc {
	j, ok := m.lookup(name)
	if !ok {
		return nil
	}
	l := j.getLauncher()
	if l == nil {
		return nil
	}
	return l.Procs()
}

// JobNames lists the jobs the manager knows, sorted.
func (m *Manager) JobNames() []string {
	var out []string
	for n := range m.jobList() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// loop runs the manager's periodic work: EPS's scheduling passes and the
// pruning of old timelines. Each job's own (lost nodes, policies, action
// expiry) runs on its own ticker goroutine (actor.go).
func (m *Manager) loop() {
	t := m.clk.NewTicker(m.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			m.tick()
		case <-m.eps.kick:
			m.schedule()
		case <-m.done:
			return
		}
	}
}

func (m *Manager) tick() {
	m.schedule()
	if now := m.now(); now.Sub(m.pruned) >= time.Minute {
		m.pruned = now
		m.pruneHistories(now)
	}
	if now := m.now(); now.Sub(m.previewed) >= PreviewRefresh {
		m.previewed = now
		m.refreshWaiting()
	}
}

// restore reloads the store's jobs: finished ones as records, live ones as
// jobs whose agents will reconnect.
func (m *Manager) restore() error {
	recs, err := m.cfg.Store.ListJobs()
	if err != nil {
		return fmt.Errorf("manager: list jobs: %w", err)
	}
	var queued []store.JobRecord
	for _, r := range recs {
		s, err := spec.ParseLimits(r.Name+".yaml", []byte(r.SpecYAML), spec.Unlimited())
		if err != nil {
			m.log.Warn("stored spec no longer parses", "job", r.Name, "err", err)
			continue
		}
		if r.State == StateQueued {
			queued = append(queued, r)
			continue
		}
		j, err := m.restoreJob(s, r) // not published yet: no lock
		if err == nil {
			m.mu.Lock()
			m.putJobLocked(r.Name, j)
			m.mu.Unlock()
			if !j.facts().over {
				j.startTicker()
			}
		}
		if err != nil {
			m.log.Warn("restore job", "job", r.Name, "err", err)
			continue
		}
	}
	// Queued jobs go back in the queue in the order they came.
	sort.SliceStable(queued, func(a, b int) bool { return queued[a].Submitted.Before(queued[b].Submitted) })
	for _, r := range queued {
		s, _ := spec.ParseLimits(r.Name+".yaml", []byte(r.SpecYAML), spec.Unlimited())
		if err := m.requeue(s, r); err != nil {
			m.log.Warn("queue job again", "job", r.Name, "err", err)
			r.State, r.Error = StateFailed, "not queued again after a scheduler restart: "+err.Error()
			_ = m.cfg.Store.PutJob(r)
		}
	}
	return nil
}

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
