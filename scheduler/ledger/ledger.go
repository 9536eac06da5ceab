// Package ledger keeps a job's goodput ledger: its wall-clock time, from
// submission, split into phases that add up to its age — computing,
// communicating (pushes and pulls on the wire, an allreduce's exchange),
// waiting (held by a barrier or staleness bound for the others),
// recovering (a restart, relaunch or rendezvous), paused (an elastic
// change), queued (submitted, its processes not yet training) and idle
// (nothing measured) — per node and for the job.
//
// It is pure: time comes in as values. Measurements come in with Report
// (what a worker's progress report says of the iterations since its
// previous one), lifecycle with Advance (the phase each node and the job
// are in by their state, sampled at each tick). Advance splits the time
// since its previous call: a node in a lifecycle phase (Recovering,
// Paused, Queued, Idle) gets all of it; a running node gets it in the
// shares its last report measured (computing, communicating and waiting
// over the report's span, the rest idle), or idle once that report is
// older than Stale. The job's own phase is derived from its workers':
// while the job itself is in a lifecycle phase (queued before its first
// report, recovering during a checkpoint-and-restart, paused during an
// elastic change) all of its time goes there; otherwise each slice of
// time is split as the mean of its workers' splits of that slice (so one
// worker of four restarting makes a quarter of the job's time recovering,
// and a worker waiting at a barrier for a straggler counts as waiting).
// Servers have node ledgers too (their lifecycle, and while running the
// share of time workers spent on the wire with them, the rest idle) but
// do not enter the job's split: their time overlaps the workers'.
package ledger

import (
	"math"
	"slices"
	"time"
)

// Phase is where a slice of wall-clock time went.
type Phase int

// The phases. Running is not a phase of the ledger: it is what Advance is
// told for a node or job whose time is split by measurement.
const (
	Computing Phase = iota
	Communicating
	Waiting
	Recovering
	Paused
	Queued
	Idle
	NumPhases
	// Running is passed to Advance for a node (or job) whose time is split
	// by what its reports measured.
	Running Phase = -1
)

// Names are the phases' names, as the console API and /metrics spell them.
var Names = [NumPhases]string{"computing", "communicating", "waiting", "recovering", "paused", "queued", "idle"}

func (p Phase) String() string {
	if p >= 0 && p < NumPhases {
		return Names[p]
	}
	return "running"
}

// Phases is seconds per phase.
type Phases [NumPhases]float64

// Total is the seconds over every phase.
func (p Phases) Total() float64 {
	var s float64
	for _, x := range p {
		s += x
	}
	return s
}

// Productive is the seconds spent training: computing and communicating.
func (p Phases) Productive() float64 { return p[Computing] + p[Communicating] }

// Share is the productive share of the total (0 when there is none).
func (p Phases) Share() float64 {
	if t := p.Total(); t > 0 {
		return p.Productive() / t
	}
	return 0
}

// Map is p by phase name.
func (p Phases) Map() map[string]float64 {
	m := make(map[string]float64, NumPhases)
	for i, x := range p {
		m[Names[i]] = x
	}
	return m
}

// Measure is what one report measured of a worker's iterations since its
// previous report: seconds computing (forward and backward), on the wire
// (each iteration's time less compute and the wait, i.e. BPT − compute)
// and held by the pull condition.
type Measure struct {
	Compute, Comm, Wait float64
}

// DefaultStale is how long a report's shares stand for a running node.
const DefaultStale = 5 * time.Second

// Ledger is one job's goodput ledger.
type Ledger struct {
	// Stale is how long a node's last report's shares stand (DefaultStale
	// if 0): a running node silent for longer is idle.
	Stale time.Duration

	start, last, end time.Time
	job              Phases
	jobPhase         Phase
	nodes            map[string]*node
	// order is the nodes' names sorted, made again when a node joined
	// (nodes never leave): a tick's Advance sums over them in that order,
	// and sorting 20,000 names at every tick, under the lock the job's
	// reports take, held them back.
	order  []string
	checks []Check
}

type node struct {
	worker   bool
	phases   Phases
	phase    Phase
	share    [3]float64 // computing, communicating, waiting
	sharedAt time.Time  // when the shares were measured (zero: never)
	reported time.Time  // last report (worker) or comm sample (server)
}

// New starts a ledger at start (the job's submission). Workers and
// servers name the job's nodes (more may come with Advance).
func New(start time.Time, workers, servers []string) *Ledger {
	l := &Ledger{start: start, last: start, jobPhase: Queued, nodes: map[string]*node{}}
	for _, w := range workers {
		l.nodes[w] = &node{worker: true, phase: Queued}
	}
	for _, s := range servers {
		l.nodes[s] = &node{phase: Queued}
	}
	return l
}

func (l *Ledger) stale() time.Duration {
	if l.Stale > 0 {
		return l.Stale
	}
	return DefaultStale
}

// Report takes in a worker's report at t: its shares stand from now on.
// The span it covers is the time since the worker's previous report (or,
// for its first, the time it measured); measured time beyond the span
// (clock skew, overlapping pulls) is scaled down to fit.
func (l *Ledger) Report(name string, t time.Time, m Measure) {
	n := l.node(name, true)
	sum := max(m.Compute, 0) + max(m.Comm, 0) + max(m.Wait, 0)
	span := sum
	if !n.reported.IsZero() && t.After(n.reported) {
		span = max(t.Sub(n.reported).Seconds(), sum)
	}
	n.reported = t
	if span <= 0 {
		return
	}
	n.share = [3]float64{max(m.Compute, 0) / span, max(m.Comm, 0) / span, max(m.Wait, 0) / span}
	n.sharedAt = t
}

// ServerComm takes in a server's time on the wire with the workers over
// span seconds ending at t (each worker's comm with it, summed over
// workers, divided by the workers: the share of a worker's time the server
// served it).
func (l *Ledger) ServerComm(name string, t time.Time, share float64) {
	n := l.node(name, false)
	n.share = [3]float64{0, min(max(share, 0), 1), 0}
	n.sharedAt, n.reported = t, t
}

func (l *Ledger) node(name string, worker bool) *node {
	n := l.nodes[name]
	if n == nil {
		n = &node{worker: worker, phase: Queued}
		l.nodes[name] = n
	}
	return n
}

// Advance splits the time since the previous call up to now: job is the
// job's lifecycle phase (Running to derive it from its workers), nodes
// each node's (Running to split it by measurement; a node not named keeps
// its previous phase). A node named for the first time joins the ledger
// now (its earlier time is not its own: it did not exist).
func (l *Ledger) Advance(now time.Time, job Phase, nodes map[string]Phase) {
	if !l.end.IsZero() {
		return
	}
	for name, p := range nodes {
		if n, ok := l.nodes[name]; ok {
			n.phase = p
		}
	}
	l.jobPhase = job
	if now.After(l.last) {
		l.job = l.advanced(now)
		l.last = now
	}
	// Nodes named for the first time start now.
	for name, p := range nodes {
		if _, ok := l.nodes[name]; !ok {
			l.nodes[name] = &node{phase: p}
		}
	}
}

// advanced moves every node's phases to now (committing them) and returns
// the job's.
func (l *Ledger) advanced(now time.Time) Phases {
	d := now.Sub(l.last).Seconds()
	job := l.job
	var sum Phases
	workers := 0
	for _, name := range l.names() {
		n := l.nodes[name]
		slice := l.split(n, now, d)
		for i, x := range slice {
			n.phases[i] += x
		}
		if n.worker {
			workers++
			for i, x := range slice {
				sum[i] += x
			}
		}
	}
	switch {
	case l.jobPhase != Running:
		job[l.jobPhase] += d
	case workers == 0:
		job[Idle] += d
	default:
		for i, x := range sum {
			job[i] += x / float64(workers)
		}
	}
	return job
}

// names is the nodes' names in order (so float sums do not depend on
// map order).
func (l *Ledger) names() []string {
	if len(l.order) == len(l.nodes) {
		return l.order
	}
	out := make([]string, 0, len(l.nodes))
	for name := range l.nodes {
		out = append(out, name)
	}
	slices.Sort(out)
	l.order = out
	return out
}

// split is how d seconds up to now go for node n.
func (l *Ledger) split(n *node, now time.Time, d float64) Phases {
	var p Phases
	if n.phase != Running {
		p[n.phase] = d
		return p
	}
	if n.sharedAt.IsZero() || now.Sub(n.sharedAt) > l.stale() {
		p[Idle] = d
		return p
	}
	used := 0.0
	for i, s := range n.share {
		p[i] = s * d
		used += s
	}
	p[Idle] = max(1-used, 0) * d
	return p
}

// End closes the ledger at t: the job's last slice goes to the phases it
// was in, and Job and Node no longer grow.
func (l *Ledger) End(t time.Time) {
	if !l.end.IsZero() {
		return
	}
	if t.After(l.last) {
		l.job = l.advanced(t)
		l.last = t
	}
	l.end = l.last
	for i := range l.checks {
		l.checks[i].Actual = l.end.Sub(l.checks[i].At).Seconds()
		l.checks[i].Done = true
	}
}

// Age is the job's age at now: from its submission to now, or to its end.
func (l *Ledger) Age(now time.Time) float64 {
	if !l.end.IsZero() {
		now = l.end
	}
	return math.Max(now.Sub(l.start).Seconds(), 0)
}

// Job is the job's phases at now: those committed, and the time since the
// last Advance split by the phases given then. They add up to Age(now).
func (l *Ledger) Job(now time.Time) Phases {
	if !l.end.IsZero() || !now.After(l.last) {
		return l.job
	}
	c := l.clone()
	return c.advanced(now)
}

// Node is a node's phases at now (as Job), and whether the ledger has it.
func (l *Ledger) Node(name string, now time.Time) (Phases, bool) {
	n, ok := l.nodes[name]
	if !ok {
		return Phases{}, false
	}
	if !l.end.IsZero() || !now.After(l.last) {
		return n.phases, true
	}
	p := n.phases
	for i, x := range l.split(n, now, now.Sub(l.last).Seconds()) {
		p[i] += x
	}
	return p, true
}

func (l *Ledger) clone() *Ledger {
	c := *l
	c.nodes = make(map[string]*node, len(l.nodes))
	for k, n := range l.nodes {
		cp := *n
		c.nodes[k] = &cp
	}
	return &c
}

// Now is the time the ledger has been advanced to: Job and Node at Now
// are what it has committed (they only grow from one Now to the next).
func (l *Ledger) Now() time.Time { return l.last }
