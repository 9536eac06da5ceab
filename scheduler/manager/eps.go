package manager

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/eps"
	"github.com/kelpie/kelpie/scheduler/gate"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
)

// EPS multi-job scheduling (EPS §4) in the job manager: the planning is
// scheduler/eps's pure Planner; this file takes its snapshots and carries
// its plans out (launches, actions through the gate, events and audit).
//
// With a capacity (Config.Capacity: worker and server slots that all jobs
// share), a submitted job that does not fit is queued (StateQueued) and
// launched, first in first out, once it does. With EPS on (Config.EPS auto or
// approve) the scheduling pass — every tick, and at once when a job is
// submitted or ends — also does EPS's two modes:
//
//   - Incoming-job scheduling (§4.1, policy.AdmitIncoming): when the job at
//     the head of the queue does not fit, removable running jobs (past their
//     early-feedback phase, above their minimum size) give up workers and
//     servers round-robin, largest first, through REMOVE_WORKER and
//     REMOVE_SERVER actions, and the job starts once those are applied.
//     When even that cannot make room for its requested size, it is launched
//     smaller, down to its cluster.min_workers and min_servers.
//   - Running-job scheduling (§4.2, policy.GrowRunning): every
//     Config.EPSInterval, while nothing is queued, jobs past early feedback
//     grow into idle slots, one worker and one server per job at a time
//     (ADD_WORKER, ADD_SERVER). Once the growth has settled its throughput
//     is compared with the throughput before: a job that got slower gives
//     the growth back and is not grown again.
//
// Every decision is an event and an audit-log entry with the policy's
// reason. Every size change is an action of policy "eps" that goes through
// the same gate as the straggler policies: auto dispatches it, approve
// waits for an operator (and the queued job waits with it).
//
// A job's slots are the size it was launched at, plus its ADD_ actions
// (held from the moment they are proposed), minus its applied REMOVE_
// actions: an operator's or a script's size changes count as well.

// StateQueued is a job waiting for room in the cluster's capacity.
const StateQueued = "queued"

// Defaults of the EPS settings.
const (
	DefaultEPSInterval = 5 * time.Second
	// DefaultEarlyFeedbackIterations is EPS's early-feedback phase: "e.g.,
	// the first 100 iterations" (EPS §2.1).
	DefaultEarlyFeedbackIterations = 100
)

// epsWho is the actor of EPS's actions and decisions.
const epsWho = "policy:" + policy.NameEPS

// slots is a number of workers and servers.
type slots = eps.Size

// epsState is the multi-job scheduler's state. pass serializes scheduling
// passes (it is held while a pass launches jobs, never inside m.mu); the
// rest is guarded by the manager's mutex.
type epsState struct {
	pass  sync.Mutex
	kick  chan struct{}
	plan  *eps.Planner
	specs map[string]map[slots]*spec.Spec // each queued job's spec at each launch size
}

func newEPSState() *epsState {
	return &epsState{kick: make(chan struct{}, 1), plan: eps.New(ProposalTTL), specs: map[string]map[slots]*spec.Spec{}}
}

// capacityOn says whether the scheduler has a capacity.
func (m *Manager) capacityOn() bool { return m.cfg.Capacity.Workers > 0 || m.cfg.Capacity.Servers > 0 }

// epsOn says whether EPS multi-job scheduling is on.
func (m *Manager) epsOn() bool { return m.capacityOn() && m.cfg.EPS != ModeOff }

// epsModeLocked is EPS's mode for one job: the scheduler's, or the job's own
// eps policy setting when that is stricter. The caller is the job's
// actor.
func (m *Manager) epsModeLocked(j *jobState) string {
	mode := m.cfg.EPS
	if !m.capacityOn() {
		return ModeOff
	}
	if p := j.policies[policy.NameEPS]; p != nil {
		rank := map[string]int{ModeAuto: 0, ModeApprove: 1, ModeOff: 2}
		if rank[p.Mode] > rank[mode] {
			mode = p.Mode
		}
	}
	return mode
}

// epsKick asks the loop for a scheduling pass.
func (m *Manager) epsKick() {
	select {
	case m.eps.kick <- struct{}{}:
	default:
	}
}

// launchSizes lists the sizes a job may be launched at, preferred first
// (eps.Sizes), each only if the spec at that size (resized) is valid
// (stragglers and script steps must still name nodes it has). refused
// says why each other size cannot launch: no size is left out silently.
func (m *Manager) launchSizes(s *spec.Spec) (sizes []slots, specs map[slots]*spec.Spec, refused []string) {
	req := slots{Workers: s.Cluster.Workers, Servers: s.Cluster.Servers}
	least := slots{Workers: s.Cluster.MinWorkers, Servers: s.Cluster.MinServers}
	specs = map[slots]*spec.Spec{}
	for _, z := range eps.Sizes(req, least, m.cfg.Capacity, m.epsOn()) {
		if z == req {
			sizes = append(sizes, z)
			specs[z] = s
			continue
		}
		rs, err := resized(s, z)
		if err != nil {
			refused = append(refused, fmt.Sprintf("at %s: %s", z, specProblems(err)))
			continue
		}
		sizes = append(sizes, z)
		specs[z] = rs
	}
	return sizes, specs, refused
}

// resized is s for a job launched at size z: the cluster's workers and
// servers, and the keys whose defaults follow the number of workers taking
// the defaults of the new size. sync.drop.wait_for defaults to workers − 1
// (every worker but one); a spec whose wait_for is that ("all but one",
// given or not) keeps meaning it at the new size. Any other wait_for is
// kept as given (and may not fit the new size: the error says so).
func resized(s *spec.Spec, z slots) (*spec.Spec, error) {
	r := *s
	r.Cluster.Workers, r.Cluster.Servers = z.Workers, z.Servers
	if s.Sync.Drop.WaitFor == max(s.Cluster.Workers-1, 1) {
		r.Sync.Drop.WaitFor = max(z.Workers-1, 1)
	}
	return spec.ParseLimits(s.Name+".yaml", r.YAML(), spec.Unlimited())
}

// specProblems is a resized spec's errors without their places (lines of
// a file nobody wrote): "sync.drop.wait_for: must be at most ...".
func specProblems(err error) string {
	var errs spec.Errors
	if !errors.As(err, &errs) {
		return err.Error()
	}
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Msg
		if e.Path != "" {
			parts[i] = e.Path + ": " + e.Msg
		}
	}
	return strings.Join(parts, ", ")
}

// epsAdmissible refuses a job that could never run under the capacity,
// saying why each size it could have shrunk to cannot launch; sizes
// refused while others remain are logged.
func (m *Manager) epsAdmissible(s *spec.Spec) ([]slots, map[slots]*spec.Spec, error) {
	sizes, specs, refused := m.launchSizes(s)
	if len(sizes) == 0 {
		c := m.cfg.Capacity
		req := slots{Workers: s.Cluster.Workers, Servers: s.Cluster.Servers}
		msg := fmt.Sprintf("job %s needs at least %s; the cluster's capacity is %s", s.Name, req, eps.CapacityString(c))
		if m.epsOn() {
			least := slots{Workers: max(s.Cluster.MinWorkers, 1), Servers: max(s.Cluster.MinServers, 1)}
			msg = fmt.Sprintf("job %s needs at least %s (cluster.min_workers, min_servers; it asks for %s); the cluster's capacity is %s",
				s.Name, least, req, eps.CapacityString(c))
		}
		if len(refused) > 0 {
			msg += "; the smaller sizes that fit cannot launch: " + strings.Join(refused, "; ")
		}
		return nil, nil, status.Error(codes.ResourceExhausted, msg)
	}
	if len(refused) > 0 {
		m.log.Warn("EPS: sizes the job cannot launch at", "job", s.Name, "why", strings.Join(refused, "; "))
	}
	return sizes, specs, nil
}

// enqueue queues a submitted job and runs a scheduling pass; it returns the
// job's launch error if the pass launched it and that failed.
func (m *Manager) enqueue(j *jobState, sizes []slots, specs map[slots]*spec.Spec) error {
	m.mu.Lock()
	m.eps.plan.Enqueue(j.spec.Name, sizes)
	m.eps.specs[j.spec.Name] = specs
	m.mu.Unlock()
	return m.schedule()[j.spec.Name]
}

// requeue puts a job that was queued when the scheduler stopped back in the
// queue (restore calls it in submission order).
func (m *Manager) requeue(s *spec.Spec, r store.JobRecord) error {
	sizes, specs, err := m.epsAdmissible(s)
	if err != nil {
		return err
	}
	cj, err := m.coord.AddJob(s)
	if err != nil {
		return err
	}
	if err := m.durableShards(s.Name, cj); err != nil {
		cj.Fail(err)
		return err
	}
	j := newJobState(m, s, cj, r.Submitted)
	j.submittedBy, j.state = r.SubmittedBy, StateQueued
	j.publishFacts() // not published yet: the actor's from then on
	m.mu.Lock()
	m.putJobLocked(s.Name, j)
	m.eps.plan.Enqueue(s.Name, sizes)
	m.eps.specs[s.Name] = specs
	m.mu.Unlock()
	j.startTicker()
	m.event(s.Name, "job", "", fmt.Sprintf("job %s queued again after a scheduler restart", s.Name), "")
	return nil
}

// schedule runs one scheduling pass: the planner decides on a snapshot of
// the jobs; the pass withdraws, records, issues size changes through the
// gate and, after the locks, launches what it admitted. It returns the
// launch errors by job. It holds the manager's lock throughout (EPS's
// queue and plan are the manager's) and each job's while it reads or
// changes that job: a job may change between the snapshot and the step
// the plan takes on it, which the step's own checks (the gate's, the
// job's state) see.
func (m *Manager) schedule() map[string]error {
	e := m.eps
	e.pass.Lock()
	defer e.pass.Unlock()
	now := m.now()
	m.mu.Lock()
	plan := e.plan.Plan(m.epsSnapshotLocked(now))
	var (
		changed []epsIssued
		sends   sendList
		audit   []store.AuditEntry
		launch  []*jobState
	)
	for _, w := range plan.Withdraw {
		j := m.jobs[w.Job]
		j.onActor(func() {
			if a := j.byID[w.ID]; a != nil {
				m.transition(j, a, ActExpired, epsWho, "withdrawn: a queued job needs the slot")
				changed = append(changed, epsIssued{j, a})
			}
		})
	}
	for _, d := range plan.Decisions {
		audit = append(audit, m.decideLocked(now, d))
	}
	for _, l := range plan.Launch {
		j := m.jobs[l.Job]
		j.onActor(func() {
			j.state = StateStarting
			j.invalidateViews()
		})
		launch = append(launch, j)
	}
	for _, st := range plan.Issue {
		j := m.jobs[st.Job]
		var (
			a   *consolepb.Action
			s   sendList
			err error
		)
		j.onActor(func() { a, s, err = m.issueOneLocked(j, st) })
		id := ""
		if a != nil {
			id = a.Id
			changed = append(changed, epsIssued{j, a})
			sends = append(sends, s...)
		}
		for _, d := range e.plan.Issued(st, id, err, busy(err)) {
			audit = append(audit, m.decideLocked(now, d))
		}
	}
	for name := range e.specs {
		if _, ok := e.plan.Base(name); !ok {
			delete(e.specs, name)
		}
	}
	m.mu.Unlock()
	for _, a := range changed {
		m.persistAction(a.j, a.a)
	}
	sends.run()
	for _, a := range audit {
		if _, err := m.cfg.Store.Audit(a); err != nil {
			m.log.Error("store audit", "job", a.Job, "err", err)
		}
	}
	errs := map[string]error{}
	for _, j := range launch {
		if err := m.launchQueued(j); err != nil {
			errs[j.spec.Name] = err
		}
	}
	return errs
}

type epsIssued struct {
	j *jobState
	a *consolepb.Action
}

// decideLocked records a scheduling decision as an event and returns its
// audit entry.
func (m *Manager) decideLocked(now time.Time, d eps.Decision) store.AuditEntry {
	who := epsWho
	if !m.epsOn() {
		who = "scheduler"
	}
	m.event(d.Job, "eps", "", d.What+": "+d.Reason, who)
	return store.AuditEntry{At: now, Who: who, Role: "policy", What: d.What, Job: d.Job, Allowed: true, Reason: d.Reason}
}

// epsSnapshotLocked is the planner's view of every job. The caller holds
// the manager's lock; each job's part is taken on its actor in turn (an
// actor never takes the manager's lock).
func (m *Manager) epsSnapshotLocked(now time.Time) eps.Snapshot {
	s := eps.Snapshot{Now: now, Capacity: m.cfg.Capacity, On: m.epsOn(), Interval: m.cfg.EPSInterval,
		EarlyIterations: int64(m.cfg.EarlyFeedbackIterations), EarlyFeedback: m.cfg.EarlyFeedback}
	for _, j := range m.jobs {
		s.Jobs = append(s.Jobs, m.epsJob(j))
	}
	return s
}

// epsJob is one job as the planner sees it, taken on the job's actor.
func (m *Manager) epsJob(j *jobState) eps.Job {
	var ej eps.Job
	j.onActor(func() { ej = m.epsJobHere(j) })
	return ej
}

// epsJobHere is epsJob for code running on the job's actor.
func (m *Manager) epsJobHere(j *jobState) eps.Job {
	cl := j.spec.Cluster
	ej := eps.Job{Name: j.spec.Name, Submitted: j.submitted, Spec: slots{Workers: cl.Workers, Servers: cl.Servers},
		MinWorkers: cl.MinWorkers, MinServers: cl.MinServers, MaxWorkers: cl.MaxWorkers, MaxServers: cl.MaxServers,
		FixedWorkers: cl.Elasticity == spec.ElasticityCheckpointRestart, FixedServers: cl.Exchange != spec.ExchangePS,
		Mode: gate.Mode(m.epsModeLocked(j)), Started: j.coord.Start(), Settle: max(j.mon.Config().LTrans, m.cfg.EPSInterval, ThroughputWindow)}
	switch j.state {
	case StateQueued:
		ej.Phase = eps.Queued
	case StateStarting:
		ej.Phase = eps.Starting
	case StateRunning:
		ej.Phase = eps.Running
	default:
		ej.Phase = eps.Over
	}
	if ej.MaxWorkers <= 0 {
		ej.MaxWorkers = j.spec.Train.GlobalBatch
	}
	if ej.MaxServers <= 0 {
		// More servers than parameter blocks would hold nothing.
		ej.Blocks = len(j.coord.Table().Blocks)
	}
	for _, n := range j.nodes {
		if n.role == "worker" {
			ej.Iteration = max(ej.Iteration, n.progress().iteration)
		}
	}
	ej.Throughput = j.thr.rate() // Throughput over the last window
	for _, a := range j.actions {
		ej.Actions = append(ej.Actions, eps.ActionInfo{ID: a.Id, Kind: policy.Kind(a.Kind), Policy: a.Policy,
			State: gate.State(a.State), Updated: a.Updated.AsTime()})
	}
	return ej
}

// usedLocked is the slots the jobs hold. The caller holds the manager's
// lock; each job's part is taken on its actor in turn.
func (m *Manager) usedLocked(jobs []*jobState) slots {
	var u slots
	for _, j := range jobs {
		ej := m.epsJob(j)
		s := m.eps.plan.Slots(&ej)
		u.Workers += s.Workers
		u.Servers += s.Servers
	}
	return u
}

// issueOneLocked passes one size change through the gate: auto dispatches
// it, approve proposes it to an operator. The caller holds the manager's
// lock and runs it on the job's actor.
func (m *Manager) issueOneLocked(j *jobState, st eps.Step) (*consolepb.Action, sendList, error) {
	mode := m.epsModeLocked(j)
	if mode == ModeOff {
		return nil, nil, errors.New("eps is off for the job")
	}
	if j.state != StateRunning {
		return nil, nil, fmt.Errorf("job is %s", j.state)
	}
	a := &consolepb.Action{Kind: string(st.Kind), Policy: policy.NameEPS, Reason: st.Reason}
	if d := defOf(a); d != nil && d.removable != nil {
		if a.Target = d.removable(j); a.Target == "" {
			return nil, nil, fmt.Errorf("no %s left to remove", strings.ToLower(strings.TrimPrefix(string(st.Kind), "REMOVE_")))
		}
	}
	if err := j.validate(a); err != nil {
		return nil, nil, err
	}
	// Each step is its own change: no de-duplication key.
	sends, err := m.addLocked(j, a, "", gate.Mode(mode), epsWho)
	if err != nil {
		return nil, nil, err
	}
	return a, sends, nil
}

// removableWorker is the worker with the highest index that is still in
// the job and not being removed.
func removableWorker(j *jobState) string {
	gone := map[string]bool{}
	for _, a := range j.actions {
		if a.Kind == string(policy.KindRemoveWorker) && (a.State == ActApproved || a.State == ActDispatched || a.State == ActApplied) {
			gone[a.Target] = true
		}
	}
	best := ""
	for _, n := range j.nodes {
		if n.role != "worker" || gone[n.name] || n.status.State == agentpb.NodeState_NODE_STATE_STOPPED {
			continue
		}
		if best == "" || nodeLess(best, n.name) {
			best = n.name
		}
	}
	return best
}

// removableServer is the active server with the highest index that is not
// being removed or relaunched.
func removableServer(j *jobState) string {
	gone := map[string]bool{}
	for _, a := range j.actions {
		if (a.Kind == string(policy.KindRemoveServer) || a.Kind == string(policy.KindKillRestart)) &&
			(a.State == ActApproved || a.State == ActDispatched) {
			gone[a.Target] = true
		}
	}
	names := j.coord.ServerNames()
	best := -1
	for _, i := range j.activeServers() {
		if i < len(names) && !gone[names[i]] {
			best = max(best, i)
		}
	}
	if best < 0 {
		return ""
	}
	return names[best]
}

// launchQueued starts a job the scheduling pass took from the queue, at the
// size it chose: a job launched smaller than it asked gets a coordinator
// job and nodes of that size first.
func (m *Manager) launchQueued(j *jobState) error {
	m.mu.Lock()
	var s *spec.Spec
	if base, ok := m.eps.plan.Base(j.spec.Name); ok {
		s = m.eps.specs[j.spec.Name][base]
	}
	m.mu.Unlock()
	if j.facts().over {
		return nil
	}
	if s != nil && s != j.spec {
		j.coord.Fail(errors.New("launched by EPS at another size"))
		cj, err := m.coord.AddJob(s)
		if err == nil {
			if err = m.durableShards(s.Name, cj); err != nil {
				cj.Fail(err)
			}
		}
		if err != nil {
			m.finish(j, StateFailed, err)
			return status.Errorf(codes.Internal, "launch job %s: %v", s.Name, err)
		}
		fresh := newJobState(m, s, cj, j.submitted)
		j.onActor(func() {
			j.spec, j.coord, j.nodes, j.hosts = s, cj, fresh.nodes, fresh.hosts
			j.mon.reset(fresh.mon)
			j.invalidateViews()
		})
	}
	if err := m.cfg.Store.PutJob(store.JobRecord{Name: j.spec.Name, SpecYAML: string(j.spec.YAML()), State: StateStarting,
		SubmittedBy: j.submittedBy, Submitted: j.submitted}); err != nil {
		m.log.Error("store job", "job", j.spec.Name, "err", err)
	}
	return m.startJob(j)
}
