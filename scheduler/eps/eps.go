// Package eps is kelpie's multi-job scheduler (EPS §4) as a pure planner:
// given a snapshot of the jobs, the cluster's capacity and the time, a
// scheduling pass decides which queued jobs to launch and at what size,
// which running jobs give up slots for them, which grow into idle slots,
// and which give a growth back. The job manager takes the Plan, carries it
// out (launches, actions through the approval gate, events and audit
// entries) and reports back what it issued. Nothing here does I/O or reads
// a clock; the scenario tests in testdata/ replay passes exactly.
//
// The two modes of EPS (policy.AdmitIncoming and policy.GrowRunning hold
// the paper's heuristics; this package holds what happens between passes):
//
//   - Incoming-job scheduling (§4.1): queued jobs launch first in first
//     out while the head fits. When it does not, removable running jobs
//     (past their early-feedback phase, above their minimum, not changing)
//     give up workers and servers round-robin, largest first, one step at a
//     time, and the head launches once the steps are applied. When no
//     shrinking makes room for its requested size it launches smaller, at
//     the largest of its launch sizes that can be made. A donor step that
//     fails, expires or is rejected abandons the admission (a rejection
//     holds new admissions off for a proposal's lifetime).
//   - Running-job scheduling (§4.2): every Interval, while nothing is
//     queued, jobs past early feedback grow into idle slots, one worker and
//     one server per job at a time. Once a growth is applied and has run
//     for the job's settle time, its throughput is compared with the one
//     before: a job that got slower gives the growth back and is capped.
//
// A job's slots are its launch size, plus its ADD_ actions from the moment
// they are proposed and the ADD_ steps not yet issued, minus its applied
// REMOVE_ actions: an operator's or a script's changes count too.
package eps

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kelpie/kelpie/scheduler/gate"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// Size is a number of workers and servers.
type Size struct{ Workers, Servers int }

func (s Size) String() string {
	return plural(s.Workers, "worker") + " and " + plural(s.Servers, "server")
}

// Phase is where a job is in its life, as the planner needs it.
type Phase int

// Job phases.
const (
	Queued Phase = iota + 1
	Starting
	Running
	Over
)

// ActionInfo is one of a job's actions, as far as sizes go.
type ActionInfo struct {
	ID      string
	Kind    policy.Kind
	Policy  string
	State   gate.State
	Updated time.Time
}

// Job is one job in a snapshot.
type Job struct {
	Name      string
	Phase     Phase
	Submitted time.Time
	// Spec is the size its spec asks for: its launch size when the planner
	// did not launch it (launched before there was a capacity, adopted
	// after a restart).
	Spec Size
	// Bounds: the least it may shrink to and the most it may grow to
	// (Max* zero: no limit but the capacity).
	MinWorkers, MinServers, MaxWorkers, MaxServers int
	// Blocks is how many parameter blocks it has: with MaxServers zero,
	// more servers than blocks (or than it has) would hold nothing.
	Blocks int
	// FixedWorkers and FixedServers: the job cannot change that kind
	// (checkpoint-and-restart elasticity; allreduce has no servers to move).
	FixedWorkers, FixedServers bool
	// Mode is EPS's mode for the job: the scheduler's, or the job's own eps
	// policy setting when stricter.
	Mode       gate.Mode
	Iteration  int64     // its furthest worker's iteration
	Started    time.Time // when training began (zero: not yet)
	Throughput float64   // samples trained per wall-clock second over the last window (manager.Throughput)
	// Settle is how long a growth runs before it is judged.
	Settle  time.Duration
	Actions []ActionInfo
}

// Snapshot is what a scheduling pass reads.
type Snapshot struct {
	Now      time.Time
	Capacity policy.Capacity // zero in a kind: unlimited
	// On says EPS may shrink, grow and launch smaller; off, the planner is
	// a first-in-first-out queue at the sizes jobs ask for.
	On              bool
	Interval        time.Duration // how often running jobs grow
	EarlyIterations int64         // early-feedback phase: the first N iterations
	EarlyFeedback   time.Duration // and this long after training began
	Jobs            []Job
}

// Launch takes a queued job to launch at a size.
type Launch struct {
	Job  string
	Size Size
}

// Step is a size change to issue through the gate (its target, for a
// REMOVE_, is the caller's choice).
type Step struct {
	Job    string
	Kind   policy.Kind
	Reason string
	growth bool
}

// Withdraw expires a growth proposal waiting for an operator: a queued job
// needs its slot.
type Withdraw struct{ Job, ID string }

// Decision is a scheduling decision, for the event log and the audit log.
type Decision struct{ Job, What, Reason string }

// Plan is a pass's outcome, in the order to carry it out: withdrawals,
// decisions, launches, then issues (report each with Issued).
type Plan struct {
	Withdraw  []Withdraw
	Decisions []Decision
	Launch    []Launch
	Issue     []Step
}

// job is what the planner keeps of one job between passes.
type job struct {
	sizes   []Size  // launch sizes, preferred first
	base    Size    // the size it was launched at
	steps   []Step  // size changes still to issue, one at a time
	growth  *growth // the last growth, until it is judged
	capped  Size    // growth limit after a back-off (zero: none)
	waiting string  // why it waits in the queue (decided when it changes)
}

// growth is a growth under judgement (§4.2).
type growth struct {
	delta   policy.Delta
	before  float64
	ids     []string
	applied time.Time
}

// admission is an incoming job waiting for its donors' slots.
type admission struct {
	job   string
	size  Size
	since time.Time
}

// Planner is the scheduler's state between passes. It is not safe for
// concurrent use: the manager serialises passes.
type Planner struct {
	queue    []string
	jobs     map[string]*job
	admit    *admission
	retryAt  time.Time
	lastGrow time.Time
	// RejectHold is how long an operator's rejection of a donor step holds
	// new admissions off (a proposal's lifetime).
	RejectHold time.Duration
}

// New returns an empty planner.
func New(rejectHold time.Duration) *Planner {
	return &Planner{jobs: map[string]*job{}, RejectHold: rejectHold}
}

// Enqueue puts a job at the end of the queue with its launch sizes,
// preferred first (see Sizes).
func (p *Planner) Enqueue(name string, sizes []Size) {
	p.jobs[name] = &job{sizes: sizes}
	p.queue = append(p.queue, name)
}

// Queue lists the queued jobs, first first.
func (p *Planner) Queue() []string { return slices.Clone(p.queue) }

// Base is the size the planner launched a job at.
func (p *Planner) Base(name string) (Size, bool) {
	j := p.jobs[name]
	if j == nil {
		return Size{}, false
	}
	return j.base, true
}

// Steps lists the size changes still to issue for a job.
func (p *Planner) Steps(name string) []Step {
	if j := p.jobs[name]; j != nil {
		return slices.Clone(j.steps)
	}
	return nil
}

// Sizes lists the sizes a job asking for req may launch at, preferred
// first: req, then — when EPS is on — smaller ones down to least, largest
// total first, more workers first; none larger than the capacity. The
// caller drops those at which the job's spec is not valid.
func Sizes(req, least Size, c policy.Capacity, on bool) []Size {
	within := func(z Size) bool {
		return (c.Workers <= 0 || z.Workers <= c.Workers) && (c.Servers <= 0 || z.Servers <= c.Servers)
	}
	var sizes []Size
	if within(req) {
		sizes = append(sizes, req)
	}
	if !on {
		return sizes
	}
	var cands []Size
	for w := req.Workers; w >= max(least.Workers, 1); w-- {
		for sv := req.Servers; sv >= max(least.Servers, 1); sv-- {
			if z := (Size{w, sv}); z != req && within(z) {
				cands = append(cands, z)
			}
		}
	}
	sort.SliceStable(cands, func(a, b int) bool {
		x, y := cands[a], cands[b]
		if x.Workers+x.Servers != y.Workers+y.Servers {
			return x.Workers+x.Servers > y.Workers+y.Servers
		}
		return x.Workers > y.Workers
	})
	return append(sizes, cands...)
}

// Slots is what a job holds (see the package doc).
func (p *Planner) Slots(j *Job) Size {
	s := j.Spec
	pj := p.jobs[j.Name]
	if pj != nil {
		s = pj.base
	}
	for _, a := range j.Actions {
		held := a.State.Pending() || a.State == gate.Applied
		switch a.Kind {
		case policy.KindAddWorker:
			if held {
				s.Workers++
			}
		case policy.KindAddServer:
			if held {
				s.Servers++
			}
		case policy.KindRemoveWorker:
			if a.State == gate.Applied {
				s.Workers--
			}
		case policy.KindRemoveServer:
			if a.State == gate.Applied {
				s.Servers--
			}
		}
	}
	if pj != nil {
		for _, st := range pj.steps {
			switch st.Kind {
			case policy.KindAddWorker:
				s.Workers++
			case policy.KindAddServer:
				s.Servers++
			}
		}
	}
	return s
}

// pass is one scheduling pass's working state.
type pass struct {
	p     *Planner
	s     Snapshot
	jobs  map[string]*Job
	live  []*Job
	out   Plan
	capOn bool
}

// Plan runs one scheduling pass.
func (p *Planner) Plan(s Snapshot) Plan {
	x := &pass{p: p, s: s, jobs: map[string]*Job{}, capOn: s.Capacity.Workers > 0 || s.Capacity.Servers > 0}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		j.Actions = slices.Clone(j.Actions) // withdrawals change them
		x.jobs[j.Name] = j
	}
	names := slices.Sorted(maps.Keys(x.jobs))
	for _, name := range names {
		j := x.jobs[name]
		if j.Phase != Starting && j.Phase != Running {
			continue
		}
		x.live = append(x.live, j)
		if p.jobs[name] == nil {
			p.jobs[name] = &job{base: j.Spec}
		}
	}
	for name := range p.jobs {
		if j := x.jobs[name]; j == nil || j.Phase == Over {
			delete(p.jobs, name)
		}
	}
	q := p.queue[:0]
	for _, name := range p.queue {
		if j := x.jobs[name]; j != nil && j.Phase == Queued && p.jobs[name] != nil {
			q = append(q, name)
		}
	}
	p.queue = q
	if len(p.queue) == 0 && !x.capOn {
		return x.out
	}
	if p.admit != nil && (len(p.queue) == 0 || p.queue[0] != p.admit.job) {
		p.admit = nil
	}
	x.followGrowth()
	x.admit()
	if len(p.queue) == 0 && s.On && s.Now.Sub(p.lastGrow) >= s.Interval {
		p.lastGrow = s.Now
		x.grow()
	}
	for _, j := range x.live {
		if pj := p.jobs[j.Name]; len(pj.steps) > 0 && !inFlight(j) {
			x.out.Issue = append(x.out.Issue, pj.steps[0])
		}
	}
	return x.out
}

// Issued reports what became of a Step of the last plan: id is the action
// the gate took it as; err says why it was not carried out, busy that the
// job has another change under way (it is issued on a later pass).
func (p *Planner) Issued(st Step, id string, err error, busy bool) []Decision {
	pj := p.jobs[st.Job]
	if pj == nil || len(pj.steps) == 0 || busy {
		return nil
	}
	if err != nil {
		d := Decision{st.Job, "eps step dropped", fmt.Sprintf("%s not carried out: %v (%d more step(s) dropped)",
			st.Kind, err, len(pj.steps)-1)}
		pj.steps, pj.growth = nil, nil
		return []Decision{d}
	}
	pj.steps = pj.steps[1:]
	if st.growth && pj.growth != nil {
		pj.growth.ids = append(pj.growth.ids, id)
	}
	return nil
}

func (x *pass) decide(job, what, reason string) {
	x.out.Decisions = append(x.out.Decisions, Decision{job, what, reason})
}

func (x *pass) fits(used, size Size) bool {
	c := x.s.Capacity
	return (c.Workers <= 0 || used.Workers+size.Workers <= c.Workers) &&
		(c.Servers <= 0 || used.Servers+size.Servers <= c.Servers)
}

func (x *pass) used() Size {
	var u Size
	for _, j := range x.live {
		s := x.p.Slots(j)
		u.Workers += s.Workers
		u.Servers += s.Servers
	}
	return u
}

// inFlight says whether one of EPS's actions on the job is pending.
func inFlight(j *Job) bool {
	for _, a := range j.Actions {
		if a.Policy == policy.NameEPS && a.State.Pending() {
			return true
		}
	}
	return false
}

// earlyFeedback says whether a job is still in its early-feedback phase
// (§2.1, §4.1 rule 1).
func (x *pass) earlyFeedback(j *Job) bool {
	if j.Phase != Running || j.Iteration < x.s.EarlyIterations {
		return true
	}
	if d := x.s.EarlyFeedback; d > 0 {
		return j.Started.IsZero() || x.s.Now.Sub(j.Started) < d
	}
	return false
}

func (x *pass) growthDue(j *Job) bool {
	g := x.p.jobs[j.Name].growth
	return g != nil && !g.applied.IsZero() && x.s.Now.Sub(g.applied) >= j.Settle
}

// state is a live job as the EPS policy sees it.
func (x *pass) state(j *Job) policy.JobState {
	pj := x.p.jobs[j.Name]
	cur := x.p.Slots(j)
	js := policy.JobState{Name: j.Name, Workers: cur.Workers, Servers: cur.Servers,
		MinWorkers: max(j.MinWorkers, 1), MinServers: max(j.MinServers, 1),
		MaxWorkers: j.MaxWorkers, MaxServers: j.MaxServers, Submitted: time.Duration(j.Submitted.UnixNano())}
	if js.MaxServers <= 0 {
		js.MaxServers = max(j.Blocks, cur.Servers)
	}
	if pj.capped.Workers > 0 {
		js.MaxWorkers = min(js.MaxWorkers, pj.capped.Workers)
	}
	if pj.capped.Servers > 0 {
		js.MaxServers = min(js.MaxServers, pj.capped.Servers)
	}
	if j.FixedWorkers {
		js.MinWorkers, js.MaxWorkers = cur.Workers, cur.Workers
	}
	if j.FixedServers {
		js.MinServers, js.MaxServers = cur.Servers, cur.Servers
	}
	busy := len(pj.steps) > 0 || inFlight(j)
	fixed := busy || j.Mode == gate.ModeOff || j.Phase != Running
	js.Removable = !fixed
	js.EarlyFeedback = x.earlyFeedback(j)
	if fixed || (pj.growth != nil && !x.growthDue(j)) {
		js.MaxWorkers, js.MaxServers = cur.Workers, cur.Servers
	}
	// The policy reads a zero maximum as no limit.
	js.MaxWorkers, js.MaxServers = max(js.MaxWorkers, 1), max(js.MaxServers, 1)
	return js
}

func action(j *Job, id string) *ActionInfo {
	for i := range j.Actions {
		if j.Actions[i].ID == id {
			return &j.Actions[i]
		}
	}
	return nil
}

// followGrowth notes when each growth has been applied, and forgets a
// growth one of whose actions did not go through (with the rest of it).
func (x *pass) followGrowth() {
	for _, j := range x.live {
		pj := x.p.jobs[j.Name]
		g := pj.growth
		if g == nil || !g.applied.IsZero() {
			continue
		}
		done, lost := len(pj.steps) == 0, false
		for _, id := range g.ids {
			switch a := action(j, id); {
			case a == nil || a.State == gate.Failed || a.State == gate.Rejected || a.State == gate.Expired:
				lost = true
			case a.State != gate.Applied:
				done = false
			}
		}
		switch {
		case lost:
			pj.growth = nil
			steps := pj.steps[:0]
			for _, st := range pj.steps {
				if !st.growth {
					steps = append(steps, st)
				}
			}
			pj.steps = steps
		case done:
			g.applied = x.s.Now
		}
	}
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

// CapacityString says a capacity in words ("4 workers and unlimited
// servers").
func CapacityString(c policy.Capacity) string { return capacityString(c) }

func (x *pass) free(used Size) string {
	c := x.s.Capacity
	f := func(capN, usedN int, what string) string {
		if capN <= 0 {
			return "unlimited " + what + "s"
		}
		return plural(max(capN-usedN, 0), what)
	}
	return f(c.Workers, used.Workers, "worker") + " and " + f(c.Servers, used.Servers, "server")
}

// admit is incoming-job scheduling: it launches queued jobs, first in first
// out, while the head fits, and with EPS on makes room for the head by
// shrinking removable jobs.
func (x *pass) admit() {
	p := x.p
	for len(p.queue) > 0 {
		j := x.jobs[p.queue[0]]
		pj := p.jobs[j.Name]
		used := x.used()
		if a := p.admit; a != nil {
			if x.fits(used, a.size) {
				p.admit = nil
				x.launch(j, pj, a.size, fmt.Sprintf("its donors gave up their slots; %s of %s in use", used, capacityString(x.s.Capacity)))
				continue
			}
			for _, o := range x.live {
				if len(p.jobs[o.Name].steps) > 0 || inFlight(o) {
					return // donors still shrinking
				}
			}
			// A donor's change failed, expired or was rejected. An operator's
			// no stands for a while: the job waits for slots to free up.
			retry := x.s.Interval
			for _, o := range x.live {
				for _, act := range o.Actions {
					if act.Policy == policy.NameEPS && act.State == gate.Rejected && !act.Updated.Before(a.since) {
						retry = p.RejectHold
					}
				}
			}
			x.decide(j.Name, "eps admission abandoned",
				fmt.Sprintf("%s does not fit after its donors' changes (one failed, was rejected or expired): %s of %s in use; no new admission for %s",
					a.size, used, capacityString(x.s.Capacity), retry))
			p.admit = nil
			p.retryAt = x.s.Now.Add(retry)
			return
		}
		req := pj.sizes[0]
		if !x.fits(used, req) && x.withdrawGrowth() {
			used = x.used()
		}
		if x.fits(used, req) {
			x.launch(j, pj, req, fmt.Sprintf("%s free for %s", x.free(used), req))
			continue
		}
		if !x.s.On || j.Mode == gate.ModeOff {
			x.wait(j, pj, fmt.Sprintf("needs %s; %s free (first in, first out)", req, x.free(used)))
			return
		}
		if x.s.Now.Before(p.retryAt) {
			return
		}
		if !x.makeRoom(j, pj, used) {
			return
		}
	}
}

// makeRoom plans room for the head job at the largest of its launch sizes
// that removable jobs can make room for: it launches the job at once (room
// is free, and reports true) or plans the donors' shrinking.
func (x *pass) makeRoom(j *Job, pj *job, used Size) bool {
	p := x.p
	var running []policy.JobState
	for _, o := range x.live {
		running = append(running, x.state(o))
	}
	req, first := pj.sizes[0], ""
	for _, size := range pj.sizes {
		c := x.s.Capacity
		if c.Workers <= 0 {
			c.Workers = used.Workers + size.Workers
		}
		if c.Servers <= 0 {
			c.Servers = used.Servers + size.Servers
		}
		shrink, ok, reason := policy.AdmitIncoming(c, running, policy.JobState{Name: j.Name,
			Workers: size.Workers, Servers: size.Servers})
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
			x.launch(j, pj, size, reason)
			return true
		}
		for _, name := range slices.Sorted(maps.Keys(shrink)) {
			d := shrink[name]
			dj := p.jobs[name]
			dj.growth = nil
			for range -d.Workers {
				dj.steps = append(dj.steps, Step{Job: name, Kind: policy.KindRemoveWorker, Reason: d.Reason})
			}
			for range -d.Servers {
				dj.steps = append(dj.steps, Step{Job: name, Kind: policy.KindRemoveServer, Reason: d.Reason})
			}
		}
		p.admit = &admission{job: j.Name, size: size, since: x.s.Now}
		x.decide(j.Name, "eps admit", reason)
		return false
	}
	x.wait(j, pj, first)
	return false
}

// withdrawGrowth withdraws EPS's growth proposals still waiting for an
// operator (they hold their slots): a queued job comes first.
func (x *pass) withdrawGrowth() bool {
	withdrew := false
	for _, j := range x.live {
		for i := range j.Actions {
			a := &j.Actions[i]
			if a.Policy == policy.NameEPS && a.State == gate.Proposed &&
				(a.Kind == policy.KindAddWorker || a.Kind == policy.KindAddServer) {
				a.State, a.Updated = gate.Expired, x.s.Now
				x.out.Withdraw = append(x.out.Withdraw, Withdraw{j.Name, a.ID})
				withdrew = true
			}
		}
	}
	if withdrew {
		x.followGrowth()
	}
	return withdrew
}

// wait records why the head job waits, when that changes.
func (x *pass) wait(j *Job, pj *job, why string) {
	if pj.waiting == why {
		return
	}
	pj.waiting = why
	x.decide(j.Name, "queued", why)
}

// launch takes the head of the queue to launch at size.
func (x *pass) launch(j *Job, pj *job, size Size, why string) {
	p := x.p
	p.queue = p.queue[1:]
	j.Phase = Starting
	pj.base, pj.waiting = size, ""
	x.decide(j.Name, "launch", fmt.Sprintf("%s with %s after %.1fs in the queue: %s", j.Name, size,
		x.s.Now.Sub(j.Submitted).Seconds(), why))
	x.out.Launch = append(x.out.Launch, Launch{j.Name, size})
	x.live = append(x.live, j)
}

// grow is running-job scheduling: first the settled growths are judged (a
// job that got slower gives its growth back, §4.2), then the idle slots go
// to the jobs past early feedback.
func (x *pass) grow() {
	p := x.p
	used := x.used()
	c := x.s.Capacity
	if c.Workers <= 0 {
		c.Workers = used.Workers // unlimited: nothing to grow into
	}
	if c.Servers <= 0 {
		c.Servers = used.Servers
	}
	var running []policy.JobState
	judged := map[string]bool{}
	for _, j := range x.live {
		pj := p.jobs[j.Name]
		js := x.state(j)
		if x.growthDue(j) && js.Removable {
			g := pj.growth
			js.LastGrowth, js.PrevThroughput, js.Throughput = g.delta, g.before, j.Throughput
			judged[j.Name] = true
		}
		running = append(running, js)
	}
	deltas := policy.GrowRunning(c, running)
	for _, js := range running {
		if !judged[js.Name] {
			continue
		}
		pj := p.jobs[js.Name]
		if d := deltas[js.Name]; d.Workers >= 0 && d.Servers >= 0 {
			x.decide(js.Name, "eps growth kept", fmt.Sprintf("throughput %.0f samples/s, %.0f before adding %s",
				js.Throughput, js.PrevThroughput, describeDelta(pj.growth.delta)))
		}
		pj.growth = nil
	}
	for _, name := range slices.Sorted(maps.Keys(deltas)) {
		d := deltas[name]
		if d.IsZero() {
			continue
		}
		j, pj := x.jobs[name], p.jobs[name]
		cur := p.Slots(j)
		if d.Workers < 0 || d.Servers < 0 {
			for range -d.Workers {
				pj.steps = append(pj.steps, Step{Job: name, Kind: policy.KindRemoveWorker, Reason: d.Reason})
			}
			for range -d.Servers {
				pj.steps = append(pj.steps, Step{Job: name, Kind: policy.KindRemoveServer, Reason: d.Reason})
			}
			pj.capped = Size{cur.Workers + d.Workers, cur.Servers + d.Servers}
			x.decide(name, "eps back-off", d.Reason+"; not grown again")
			continue
		}
		for range d.Servers {
			pj.steps = append(pj.steps, Step{Job: name, Kind: policy.KindAddServer, Reason: d.Reason, growth: true})
		}
		for range d.Workers {
			pj.steps = append(pj.steps, Step{Job: name, Kind: policy.KindAddWorker, Reason: d.Reason, growth: true})
		}
		pj.growth = &growth{delta: d, before: j.Throughput}
		x.decide(name, "eps grow", fmt.Sprintf("%s (now %s, %.0f samples/s)", d.Reason, cur, pj.growth.before))
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

// plural returns "1 worker" or "2 workers".
func plural(n int, what string) string {
	if n == 1 || n == -1 {
		return fmt.Sprintf("%d %s", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}
