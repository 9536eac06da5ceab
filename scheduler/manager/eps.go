package manager

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
)

// EPS multi-job scheduling (EPS §4) in the job manager.
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
type slots struct{ workers, servers int }

func (s slots) String() string {
	return plural(s.workers, "worker") + " and " + plural(s.servers, "server")
}

// epsState is the multi-job scheduler's state. pass serializes scheduling
// passes (it is held while a pass launches jobs, never inside m.mu); the
// rest is guarded by the manager's mutex.
type epsState struct {
	pass sync.Mutex
	kick chan struct{}

	queue    []string // queued jobs, first in first out
	jobs     map[string]*epsJob
	admit    *admission // the head job's admission while donors shrink
	retryAt  time.Time  // no new admission before (after one was abandoned)
	lastGrow time.Time
}

func newEPSState() *epsState {
	return &epsState{kick: make(chan struct{}, 1), jobs: map[string]*epsJob{}}
}

// admission is an incoming job waiting for the slots its donors give up.
type admission struct {
	job   string
	size  slots
	since time.Time
}

// epsJob is what the multi-job scheduler keeps of one job.
type epsJob struct {
	sizes   []slots              // launch sizes, preferred first: the requested one, then smaller
	specs   map[slots]*spec.Spec // the spec of each launch size
	base    slots                // the size it was launched at
	steps   []epsStep            // size changes still to issue, one at a time
	growth  *epsGrowth           // the last growth, until it is judged
	capped  slots                // growth limit after a back-off (zero: none)
	waiting string               // why it waits in the queue (logged when it changes)
}

// epsStep is one size change to issue.
type epsStep struct {
	kind   policy.Kind
	reason string
	growth bool // part of the job's growth under judgement
}

// epsGrowth is a growth under judgement (EPS §4.2).
type epsGrowth struct {
	delta   policy.Delta
	before  float64 // the job's throughput when it was decided
	ids     []string
	applied time.Time // when its last action was applied
}

// epsPass collects a scheduling pass's work for after the lock.
type epsPass struct {
	now     time.Time
	launch  []*jobState
	actions []epsIssued
	sends   sendList
	audit   []store.AuditEntry
}

type epsIssued struct {
	j *jobState
	a *kelpiepb.Action
}

// capacityOn says whether the scheduler has a capacity.
func (m *Manager) capacityOn() bool { return m.cfg.Capacity.Workers > 0 || m.cfg.Capacity.Servers > 0 }

// epsOn says whether EPS multi-job scheduling is on.
func (m *Manager) epsOn() bool { return m.capacityOn() && m.cfg.EPS != ModeOff }

// epsModeLocked is EPS's mode for one job: the scheduler's, or the job's own
// eps policy setting when that is stricter.
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

// fits says whether size fits beside used (a zero capacity is unlimited).
func (m *Manager) fits(used, size slots) bool {
	c := m.cfg.Capacity
	return (c.Workers <= 0 || used.workers+size.workers <= c.Workers) &&
		(c.Servers <= 0 || used.servers+size.servers <= c.Servers)
}

// launchSizes lists the sizes a job may be launched at, preferred first:
// the requested size, then — when EPS may shrink it — smaller ones down to
// its minimums, largest first, each only if the spec at that size is valid
// (stragglers and script steps must still name nodes it has). Sizes larger
// than the capacity are left out.
func (m *Manager) launchSizes(s *spec.Spec) ([]slots, map[slots]*spec.Spec) {
	req := slots{s.Cluster.Workers, s.Cluster.Servers}
	var sizes []slots
	specs := map[slots]*spec.Spec{}
	c := m.cfg.Capacity
	within := func(z slots) bool {
		return (c.Workers <= 0 || z.workers <= c.Workers) && (c.Servers <= 0 || z.servers <= c.Servers)
	}
	if within(req) {
		sizes = append(sizes, req)
		specs[req] = s
	}
	if !m.epsOn() {
		return sizes, specs
	}
	var cands []slots
	for w := req.workers; w >= max(s.Cluster.MinWorkers, 1); w-- {
		for sv := req.servers; sv >= max(s.Cluster.MinServers, 1); sv-- {
			if z := (slots{w, sv}); z != req && within(z) {
				cands = append(cands, z)
			}
		}
	}
	sort.SliceStable(cands, func(a, b int) bool {
		x, y := cands[a], cands[b]
		if x.workers+x.servers != y.workers+y.servers {
			return x.workers+x.servers > y.workers+y.servers
		}
		return x.workers > y.workers
	})
	for _, z := range cands {
		r := *s
		r.Cluster.Workers, r.Cluster.Servers = z.workers, z.servers
		rs, err := spec.Parse(s.Name+".yaml", r.YAML())
		if err != nil {
			continue
		}
		sizes = append(sizes, z)
		specs[z] = rs
	}
	return sizes, specs
}

// epsAdmissible refuses a job that could never run under the capacity.
func (m *Manager) epsAdmissible(s *spec.Spec) ([]slots, map[slots]*spec.Spec, error) {
	sizes, specs := m.launchSizes(s)
	if len(sizes) == 0 {
		c := m.cfg.Capacity
		least := slots{s.Cluster.Workers, s.Cluster.Servers}
		if m.epsOn() {
			least = slots{max(s.Cluster.MinWorkers, 1), max(s.Cluster.MinServers, 1)}
		}
		return nil, nil, status.Errorf(codes.ResourceExhausted, "job %s needs at least %s; the cluster's capacity is %s",
			s.Name, least, capacityString(c))
	}
	return sizes, specs, nil
}

func capacityString(c policy.Capacity) string {
	f := func(n int, what string) string {
		if n <= 0 {
			return "unlimited " + what + "s"
		}
		return plural(n, what)
	}
	return f(c.Workers, "worker") + " and " + f(c.Servers, "server")
}

// enqueue queues a submitted job and runs a scheduling pass; it returns the
// job's launch error if the pass launched it and that failed.
func (m *Manager) enqueue(j *jobState, sizes []slots, specs map[slots]*spec.Spec) error {
	m.mu.Lock()
	m.eps.jobs[j.spec.Name] = &epsJob{sizes: sizes, specs: specs}
	m.eps.queue = append(m.eps.queue, j.spec.Name)
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
	m.mu.Lock()
	m.jobs[s.Name] = j
	m.eps.jobs[s.Name] = &epsJob{sizes: sizes, specs: specs}
	m.eps.queue = append(m.eps.queue, s.Name)
	m.eventLocked(s.Name, "job", "", fmt.Sprintf("job %s queued again after a scheduler restart", s.Name), "")
	m.mu.Unlock()
	return nil
}

// schedule runs one scheduling pass: it admits queued jobs, issues size
// changes and grows running jobs, then launches what it admitted. It
// returns the launch errors by job.
func (m *Manager) schedule() map[string]error {
	e := m.eps
	e.pass.Lock()
	defer e.pass.Unlock()
	p := &epsPass{now: m.now()}
	m.mu.Lock()
	if len(e.queue) == 0 && !m.capacityOn() {
		m.mu.Unlock()
		return nil
	}
	m.planLocked(p)
	m.mu.Unlock()
	for _, a := range p.actions {
		m.persistAction(a.j, a.a)
	}
	p.sends.run()
	for _, a := range p.audit {
		if _, err := m.cfg.Store.Audit(a); err != nil {
			m.log.Error("store audit", "job", a.Job, "err", err)
		}
	}
	errs := map[string]error{}
	for _, j := range p.launch {
		if err := m.launchQueued(j); err != nil {
			errs[j.spec.Name] = err
		}
	}
	return errs
}

// decideLocked records a scheduling decision as an event and an audit entry.
func (m *Manager) decideLocked(p *epsPass, job, what, reason string) {
	who := epsWho
	if !m.epsOn() {
		who = "scheduler"
	}
	m.eventLocked(job, "eps", "", what+": "+reason, who)
	p.audit = append(p.audit, store.AuditEntry{At: p.now, Who: who, Role: "policy", What: what, Job: job,
		Allowed: true, Reason: reason})
}

// planLocked is a scheduling pass under the lock.
func (m *Manager) planLocked(p *epsPass) {
	e := m.eps
	var live []*jobState
	for name, j := range m.jobs {
		if j.state != StateStarting && j.state != StateRunning {
			continue
		}
		live = append(live, j)
		if e.jobs[name] == nil {
			// Launched before there was a capacity, or adopted after a
			// restart: its spec gives its size at launch.
			e.jobs[name] = &epsJob{base: slots{j.spec.Cluster.Workers, j.spec.Cluster.Servers}}
		}
	}
	sort.Slice(live, func(a, b int) bool { return live[a].spec.Name < live[b].spec.Name })
	for name := range e.jobs {
		if j := m.jobs[name]; j == nil || j.over() {
			delete(e.jobs, name)
		}
	}
	q := e.queue[:0]
	for _, name := range e.queue {
		if j := m.jobs[name]; j != nil && j.state == StateQueued && e.jobs[name] != nil {
			q = append(q, name)
		}
	}
	e.queue = q
	if e.admit != nil && (len(e.queue) == 0 || e.queue[0] != e.admit.job) {
		e.admit = nil
	}
	m.followGrowthLocked(live, p.now)
	live = m.admitLocked(p, live)
	if len(e.queue) == 0 && m.epsOn() && p.now.Sub(e.lastGrow) >= m.cfg.EPSInterval {
		e.lastGrow = p.now
		m.growLocked(p, live)
	}
	m.issueLocked(p, live)
}

// usedLocked is the slots the live jobs hold.
func (m *Manager) usedLocked(live []*jobState) slots {
	var u slots
	for _, j := range live {
		s := m.slotsLocked(j)
		u.workers += s.workers
		u.servers += s.servers
	}
	return u
}

// slotsLocked is the slots a live job holds: its launch size, plus ADD_
// actions from the moment they are proposed and those EPS has yet to
// issue, minus applied REMOVE_ actions.
func (m *Manager) slotsLocked(j *jobState) slots {
	ej := m.eps.jobs[j.spec.Name]
	s := ej.base
	for _, a := range j.actions {
		held := a.State == ActProposed || a.State == ActApproved || a.State == ActDispatched || a.State == ActApplied
		switch policy.Kind(a.Kind) {
		case policy.KindAddWorker:
			if held {
				s.workers++
			}
		case policy.KindAddServer:
			if held {
				s.servers++
			}
		case policy.KindRemoveWorker:
			if a.State == ActApplied {
				s.workers--
			}
		case policy.KindRemoveServer:
			if a.State == ActApplied {
				s.servers--
			}
		}
	}
	for _, st := range ej.steps {
		switch st.kind {
		case policy.KindAddWorker:
			s.workers++
		case policy.KindAddServer:
			s.servers++
		}
	}
	return s
}

// inFlightLocked says whether one of EPS's actions on the job is pending
// (proposed, approved or dispatched).
func inFlightLocked(j *jobState) bool {
	for _, a := range j.actions {
		if a.Policy == policy.NameEPS && (a.State == ActProposed || a.State == ActApproved || a.State == ActDispatched) {
			return true
		}
	}
	return false
}

// earlyFeedbackLocked says whether a job is still in its early-feedback
// phase (EPS §2.1, §4.1 rule 1): not yet running, fewer iterations than
// Config.EarlyFeedbackIterations, or younger than Config.EarlyFeedback.
func (m *Manager) earlyFeedbackLocked(j *jobState, now time.Time) bool {
	if j.state != StateRunning {
		return true
	}
	var it int64
	for _, n := range j.nodes {
		if n.role == "worker" {
			it = max(it, n.iteration)
		}
	}
	if it < int64(m.cfg.EarlyFeedbackIterations) {
		return true
	}
	if d := m.cfg.EarlyFeedback; d > 0 {
		st := j.coord.Start()
		return st.IsZero() || now.Sub(st) < d
	}
	return false
}

// throughputLocked is a job's training speed now: its workers' summed
// samples per second over the Monitor's short window.
func throughputLocked(j *jobState) float64 {
	var t float64
	for _, w := range j.snap.Workers {
		t += w.Throughput
	}
	return t
}

// settle is how long a growth runs before it is judged: the Monitor's short
// window must hold only samples taken after it.
func (m *Manager) settle(j *jobState) time.Duration {
	return max(j.mon.Config().LTrans, m.cfg.EPSInterval)
}

// growthDue says whether a job's growth is applied and has settled.
func (m *Manager) growthDue(j *jobState, ej *epsJob, now time.Time) bool {
	g := ej.growth
	return g != nil && !g.applied.IsZero() && now.Sub(g.applied) >= m.settle(j)
}

// jobStateLocked is a live job as the EPS policy sees it.
func (m *Manager) jobStateLocked(j *jobState, now time.Time) policy.JobState {
	ej := m.eps.jobs[j.spec.Name]
	cur := m.slotsLocked(j)
	cl := j.spec.Cluster
	js := policy.JobState{Name: j.spec.Name, Workers: cur.workers, Servers: cur.servers,
		MinWorkers: max(cl.MinWorkers, 1), MinServers: max(cl.MinServers, 1),
		MaxWorkers: cl.MaxWorkers, MaxServers: cl.MaxServers,
		Submitted: time.Duration(j.submitted.UnixNano())}
	if js.MaxWorkers <= 0 {
		js.MaxWorkers = j.spec.Train.GlobalBatch
	}
	if js.MaxServers <= 0 {
		// More servers than parameter blocks would hold nothing.
		js.MaxServers = max(len(j.coord.Table.Blocks), cur.servers)
	}
	if ej.capped.workers > 0 {
		js.MaxWorkers = min(js.MaxWorkers, ej.capped.workers)
	}
	if ej.capped.servers > 0 {
		js.MaxServers = min(js.MaxServers, ej.capped.servers)
	}
	if supported(string(policy.KindAddWorker)) != nil || supported(string(policy.KindRemoveWorker)) != nil ||
		cl.Elasticity == spec.ElasticityCheckpointRestart {
		js.MinWorkers, js.MaxWorkers = cur.workers, cur.workers
	}
	if cl.Exchange != spec.ExchangePS || supported(string(policy.KindAddServer)) != nil ||
		supported(string(policy.KindRemoveServer)) != nil {
		js.MinServers, js.MaxServers = cur.servers, cur.servers
	}
	busy := len(ej.steps) > 0 || inFlightLocked(j)
	fixed := busy || m.epsModeLocked(j) == ModeOff || j.state != StateRunning
	js.Removable = !fixed
	js.EarlyFeedback = m.earlyFeedbackLocked(j, now)
	if fixed || (ej.growth != nil && !m.growthDue(j, ej, now)) {
		// Not grown while it changes or its last growth is being judged.
		js.MaxWorkers, js.MaxServers = cur.workers, cur.servers
	}
	// The policy reads a zero maximum as no limit.
	js.MaxWorkers, js.MaxServers = max(js.MaxWorkers, 1), max(js.MaxServers, 1)
	return js
}

// followGrowthLocked notes when each growth has been applied, and forgets
// a growth one of whose actions did not go through (with the rest of it).
func (m *Manager) followGrowthLocked(live []*jobState, now time.Time) {
	for _, j := range live {
		ej := m.eps.jobs[j.spec.Name]
		g := ej.growth
		if g == nil || !g.applied.IsZero() {
			continue
		}
		done, lost := len(ej.steps) == 0, false
		for _, id := range g.ids {
			switch a := j.byID[id]; {
			case a == nil || a.State == ActFailed || a.State == ActRejected || a.State == ActExpired:
				lost = true
			case a.State != ActApplied:
				done = false
			}
		}
		switch {
		case lost:
			ej.growth = nil
			steps := ej.steps[:0]
			for _, st := range ej.steps {
				if !st.growth {
					steps = append(steps, st)
				}
			}
			ej.steps = steps
		case done:
			g.applied = now
		}
	}
}

// admitLocked is incoming-job scheduling: it launches queued jobs, first in
// first out, while the head fits, and with EPS on makes room for the head by
// shrinking removable jobs. It returns live with the launched jobs added.
func (m *Manager) admitLocked(p *epsPass, live []*jobState) []*jobState {
	e := m.eps
	for len(e.queue) > 0 {
		j := m.jobs[e.queue[0]]
		ej := e.jobs[j.spec.Name]
		used := m.usedLocked(live)
		if a := e.admit; a != nil {
			if m.fits(used, a.size) {
				e.admit = nil
				live = append(live, m.launchLocked(p, j, ej, a.size,
					fmt.Sprintf("its donors gave up their slots; %s of %s in use", used, capacityString(m.cfg.Capacity))))
				continue
			}
			for _, o := range live {
				if len(e.jobs[o.spec.Name].steps) > 0 || inFlightLocked(o) {
					return live // donors still shrinking
				}
			}
			// A donor's change failed, expired or was rejected. An operator's
			// no stands for a while: the job waits for slots to free up.
			retry := m.cfg.EPSInterval
			for _, o := range live {
				for _, x := range o.actions {
					if x.Policy == policy.NameEPS && x.State == ActRejected && !x.Updated.AsTime().Before(a.since) {
						retry = ProposalTTL
					}
				}
			}
			m.decideLocked(p, j.spec.Name, "eps admission abandoned",
				fmt.Sprintf("%s does not fit after its donors' changes (one failed, was rejected or expired): %s of %s in use; no new admission for %s",
					a.size, used, capacityString(m.cfg.Capacity), retry))
			e.admit = nil
			e.retryAt = p.now.Add(retry)
			return live
		}
		req := ej.sizes[0]
		if !m.fits(used, req) && m.withdrawGrowthLocked(p, live) {
			used = m.usedLocked(live)
		}
		if m.fits(used, req) {
			live = append(live, m.launchLocked(p, j, ej, req, fmt.Sprintf("%s free for %s", m.free(used), req)))
			continue
		}
		if !m.epsOn() || m.epsModeLocked(j) == ModeOff {
			m.waitLocked(p, j, ej, fmt.Sprintf("needs %s; %s free (first in, first out)", req, m.free(used)))
			return live
		}
		if p.now.Before(e.retryAt) {
			return live
		}
		launched := m.makeRoomLocked(p, j, ej, used, live)
		if launched == nil {
			return live
		}
		live = append(live, launched)
	}
	return live
}

// makeRoomLocked is EPS's incoming-job scheduling for the head job: at the
// largest of its launch sizes that removable jobs can make room for, it
// launches the job at once (room is free) or plans the donors' shrinking
// (then it returns nil and the job waits for their actions).
func (m *Manager) makeRoomLocked(p *epsPass, j *jobState, ej *epsJob, used slots, live []*jobState) *jobState {
	e := m.eps
	var running []policy.JobState
	for _, o := range live {
		running = append(running, m.jobStateLocked(o, p.now))
	}
	req, first := ej.sizes[0], ""
	for _, size := range ej.sizes {
		c := m.cfg.Capacity
		if c.Workers <= 0 {
			c.Workers = used.workers + size.workers
		}
		if c.Servers <= 0 {
			c.Servers = used.servers + size.servers
		}
		shrink, ok, reason := policy.AdmitIncoming(c, running, policy.JobState{Name: j.spec.Name,
			Workers: size.workers, Servers: size.servers})
		if first == "" {
			first = reason
		}
		if !ok {
			continue
		}
		if size != req {
			reason = fmt.Sprintf("%s cannot be made (%s); smaller: %s", req, first, reason)
		}
		if len(shrink) == 0 {
			return m.launchLocked(p, j, ej, size, reason)
		}
		for _, name := range slices.Sorted(maps.Keys(shrink)) {
			d := shrink[name]
			dj := e.jobs[name]
			dj.growth = nil
			for range -d.Workers {
				dj.steps = append(dj.steps, epsStep{kind: policy.KindRemoveWorker, reason: d.Reason})
			}
			for range -d.Servers {
				dj.steps = append(dj.steps, epsStep{kind: policy.KindRemoveServer, reason: d.Reason})
			}
		}
		e.admit = &admission{job: j.spec.Name, size: size, since: p.now}
		m.decideLocked(p, j.spec.Name, "eps admit", reason)
		return nil
	}
	m.waitLocked(p, j, ej, first)
	return nil
}

// withdrawGrowthLocked withdraws EPS's growth proposals still waiting for
// an operator (they hold their slots): a queued job comes first. It says
// whether it withdrew any.
func (m *Manager) withdrawGrowthLocked(p *epsPass, live []*jobState) bool {
	withdrew := false
	for _, j := range live {
		for _, a := range j.actions {
			if a.Policy == policy.NameEPS && a.State == ActProposed &&
				(a.Kind == string(policy.KindAddWorker) || a.Kind == string(policy.KindAddServer)) {
				m.transition(j, a, ActExpired, epsWho, "withdrawn: a queued job needs the slot")
				p.actions = append(p.actions, epsIssued{j, a})
				withdrew = true
			}
		}
	}
	if withdrew {
		m.followGrowthLocked(live, p.now)
	}
	return withdrew
}

// free is what the capacity leaves beside used ("unlimited" kinds count
// as zero here: they are never short).
func (m *Manager) free(used slots) string {
	c := m.cfg.Capacity
	f := func(capN, usedN int, what string) string {
		if capN <= 0 {
			return "unlimited " + what + "s"
		}
		return plural(max(capN-usedN, 0), what)
	}
	return f(c.Workers, used.workers, "worker") + " and " + f(c.Servers, used.servers, "server")
}

// waitLocked records why the head job waits, when that changes.
func (m *Manager) waitLocked(p *epsPass, j *jobState, ej *epsJob, why string) {
	if ej.waiting == why {
		return
	}
	ej.waiting = why
	m.decideLocked(p, j.spec.Name, "queued", why)
}

// launchLocked takes the head of the queue to launch at size (the pass
// starts its processes after the lock).
func (m *Manager) launchLocked(p *epsPass, j *jobState, ej *epsJob, size slots, why string) *jobState {
	e := m.eps
	e.queue = e.queue[1:]
	j.state = StateStarting
	ej.base, ej.waiting = size, ""
	m.decideLocked(p, j.spec.Name, "launch", fmt.Sprintf("%s with %s after %.1fs in the queue: %s", j.spec.Name, size,
		p.now.Sub(j.submitted).Seconds(), why))
	p.launch = append(p.launch, j)
	return j
}

// growLocked is running-job scheduling: first the settled growths are
// judged (a job that got slower gives its growth back, EPS §4.2), then the
// idle slots go to the jobs past early feedback.
func (m *Manager) growLocked(p *epsPass, live []*jobState) {
	e := m.eps
	used := m.usedLocked(live)
	c := m.cfg.Capacity
	if c.Workers <= 0 {
		c.Workers = used.workers // unlimited: nothing to grow into
	}
	if c.Servers <= 0 {
		c.Servers = used.servers
	}
	var running []policy.JobState
	judged := map[string]bool{}
	for _, j := range live {
		ej := e.jobs[j.spec.Name]
		js := m.jobStateLocked(j, p.now)
		if m.growthDue(j, ej, p.now) && js.Removable {
			g := ej.growth
			js.LastGrowth, js.PrevThroughput, js.Throughput = g.delta, g.before, throughputLocked(j)
			judged[j.spec.Name] = true
		}
		running = append(running, js)
	}
	deltas := policy.GrowRunning(c, running)
	byName := map[string]*jobState{}
	for _, j := range live {
		byName[j.spec.Name] = j
	}
	for _, js := range running {
		if !judged[js.Name] {
			continue
		}
		ej := e.jobs[js.Name]
		if d := deltas[js.Name]; d.Workers >= 0 && d.Servers >= 0 {
			m.decideLocked(p, js.Name, "eps growth kept", fmt.Sprintf("throughput %.0f samples/s, %.0f before adding %s",
				js.Throughput, js.PrevThroughput, describeDelta(ej.growth.delta)))
		}
		ej.growth = nil
	}
	for _, name := range slices.Sorted(maps.Keys(deltas)) {
		d := deltas[name]
		if d.IsZero() {
			continue
		}
		j, ej := byName[name], e.jobs[name]
		cur := m.slotsLocked(j)
		if d.Workers < 0 || d.Servers < 0 {
			for range -d.Workers {
				ej.steps = append(ej.steps, epsStep{kind: policy.KindRemoveWorker, reason: d.Reason})
			}
			for range -d.Servers {
				ej.steps = append(ej.steps, epsStep{kind: policy.KindRemoveServer, reason: d.Reason})
			}
			ej.capped = slots{cur.workers + d.Workers, cur.servers + d.Servers}
			m.decideLocked(p, name, "eps back-off", d.Reason+"; not grown again")
			continue
		}
		for range d.Servers {
			ej.steps = append(ej.steps, epsStep{kind: policy.KindAddServer, reason: d.Reason, growth: true})
		}
		for range d.Workers {
			ej.steps = append(ej.steps, epsStep{kind: policy.KindAddWorker, reason: d.Reason, growth: true})
		}
		ej.growth = &epsGrowth{delta: d, before: throughputLocked(j)}
		m.decideLocked(p, name, "eps grow", fmt.Sprintf("%s (now %s, %.0f samples/s)", d.Reason, cur, ej.growth.before))
	}
}

func describeDelta(d policy.Delta) string {
	var parts []string
	if d.Workers != 0 {
		parts = append(parts, plural(d.Workers, "worker"))
	}
	if d.Servers != 0 {
		parts = append(parts, plural(d.Servers, "server"))
	}
	return strings.Join(parts, " and ")
}

// issueLocked issues the next size change of every job that has one and
// none under way, through the gate.
func (m *Manager) issueLocked(p *epsPass, live []*jobState) {
	for _, j := range live {
		ej := m.eps.jobs[j.spec.Name]
		if len(ej.steps) == 0 || inFlightLocked(j) {
			continue
		}
		st := ej.steps[0]
		a, sends, err := m.issueOneLocked(j, st)
		if err != nil {
			if busy(err) {
				continue // another change of the job is under way: next pass
			}
			m.decideLocked(p, j.spec.Name, "eps step dropped", fmt.Sprintf("%s not carried out: %v (%d more step(s) dropped)",
				st.kind, err, len(ej.steps)-1))
			ej.steps = nil
			ej.growth = nil
			continue
		}
		ej.steps = ej.steps[1:]
		if st.growth && ej.growth != nil {
			ej.growth.ids = append(ej.growth.ids, a.Id)
		}
		p.actions = append(p.actions, epsIssued{j, a})
		p.sends = append(p.sends, sends...)
	}
}

// issueOneLocked passes one size change through the gate: auto dispatches
// it, approve proposes it to an operator.
func (m *Manager) issueOneLocked(j *jobState, st epsStep) (*kelpiepb.Action, sendList, error) {
	mode := m.epsModeLocked(j)
	if mode == ModeOff {
		return nil, nil, errors.New("eps is off for the job")
	}
	if j.state != StateRunning {
		return nil, nil, fmt.Errorf("job is %s", j.state)
	}
	a := &kelpiepb.Action{Kind: string(st.kind), Policy: policy.NameEPS, Reason: st.reason}
	switch st.kind {
	case policy.KindRemoveWorker:
		a.Target = removableWorker(j)
	case policy.KindRemoveServer:
		a.Target = removableServer(j)
	}
	if (st.kind == policy.KindRemoveWorker || st.kind == policy.KindRemoveServer) && a.Target == "" {
		return nil, nil, fmt.Errorf("no %s left to remove", strings.ToLower(strings.TrimPrefix(string(st.kind), "REMOVE_")))
	}
	if err := j.validate(a); err != nil {
		return nil, nil, err
	}
	if mode == ModeAuto {
		m.addLocked(j, a, ActApproved, epsWho, "auto mode")
		return a, m.dispatchLocked(j, a, epsWho), nil
	}
	m.addLocked(j, a, ActProposed, epsWho, "waiting for an operator")
	return a, nil, nil
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
		if n.role != "worker" || gone[n.name] || n.status.State == kelpiepb.NodeState_NODE_STATE_STOPPED {
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
	ej := m.eps.jobs[j.spec.Name]
	var s *spec.Spec
	if ej != nil {
		s = ej.specs[ej.base]
	}
	over := j.over()
	m.mu.Unlock()
	if over {
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
		m.mu.Lock()
		j.spec, j.coord, j.mon, j.nodes, j.views = s, cj, fresh.mon, fresh.nodes, nil
		m.mu.Unlock()
	}
	if err := m.cfg.Store.PutJob(store.JobRecord{Name: j.spec.Name, SpecYAML: string(j.spec.YAML()), State: StateStarting,
		SubmittedBy: j.submittedBy, Submitted: j.submitted}); err != nil {
		m.log.Error("store job", "job", j.spec.Name, "err", err)
	}
	return m.startJob(j)
}

// plural returns "1 worker" or "2 workers".
func plural(n int, what string) string {
	if n == 1 || n == -1 {
		return fmt.Sprintf("%d %s", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}
