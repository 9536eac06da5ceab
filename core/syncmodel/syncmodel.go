// Package syncmodel decides, at one parameter server, when a worker's pull
// may be answered and when the server's training progress moves on: the
// condition-aware synchronization of FluentPS (Alg. 1, Table III).
//
// An Engine is a pure state machine for one server's parameter shard: no
// goroutines, no clock, and the random draw PSSP needs is passed in. The
// server calls Push when a gradient arrives and Pull when a worker asks for
// the parameters of its next iteration; the engine answers at once or holds
// the pull as a delayed pull request (DPR) and later hands its id back in a
// Release list.
//
// # Progress and V_train
//
// A worker that has just pushed the gradient of iteration i (its progress,
// 0-based) pulls the parameters for iteration i+1. V_train, the server's
// training progress, starts at 0 and counts completed iterations: it moves
// from v to v+1 once the push condition holds for v, Count[v] == N (N the
// members of the barrier), or Count[v] >= N_t for drop-stragglers. Several
// steps may happen in one call (after a membership change, say).
//
// # Pull conditions (Table III)
//
//	bsp   progress < V_train
//	asp   always
//	ssp   progress < V_train + s
//	dsps  progress < V_train + s', s' adapted at run time (below)
//	drop  progress < V_train, push condition Count[V_train] >= N_t
//	pssp  progress < V_train + s, or u >= P(s, k)
//
// The table printed in the paper is garbled; these rows are rebuilt from
// Alg. 1 and the prose and agree with its §V remark that SSP with s = 0 is
// BSP. Note that the paper's Fig. 3 narrative counts one iteration less of
// headroom (it blocks a worker once s gradients of the slowest worker are
// missing); the table's condition admits s missing iterations and blocks at
// s+1. The scenario tests replay Fig. 3 with the table's condition.
//
// For PSSP, k is the gap between the pulling worker and the slowest one,
// k = progress - V_train (Alg. 1 reads V_train as "the progress of the
// slowest worker"), so P applies exactly when the SSP condition fails
// (k >= s). P is the constant c, or, when dynamic, α/(1+e^(s-k)), which is
// α/2 at k = s and grows toward α as the worker runs ahead (§III-E);
// it is clamped to [0, 1]. The pull is served when u >= P, so c = 0 is
// exactly ASP and c = 1 exactly SSP for u drawn from [0, 1).
//
// # Delayed pulls: lazy buffer or soft barrier (§III-C)
//
// In lazy mode a DPR is filed under the worker's progress p and released
// when V_train reaches p+1, that is, when every gradient it lacked has
// arrived: the worker then reads fresh parameters (gap 0). In soft-barrier
// mode a DPR is filed under V_train at its arrival and released at the next
// advance of V_train whatever its gap then, so it may read stale parameters
// and block again at its next iteration (Fig. 3a). Lazy mode therefore
// holds a fast worker longer but far less often.
//
// A pull whose progress is below V_train, or from a worker outside the
// barrier, is answered at once under every model.
//
// Releases are returned in a deterministic order: by the step of V_train
// at which they fell due, then by arrival. Every held pull is released
// exactly once (or dropped by Cancel); a pull answered at once is never. A
// pull from a worker that already has a DPR waiting is held too and is not
// released before it, so a retried request never overtakes the one it
// retries; a pull whose id is already waiting is ignored. Statistics of a
// released pull (its gap, the advances it waited) are taken against V_train
// at the end of the call, which is the version the server then serves.
//
// # Pushes
//
// A worker's pushes count once per iteration: a second push of the same (or
// an earlier) progress by the same worker is rejected as a duplicate, and
// pushes from workers outside the barrier are rejected. A push for an
// iteration already completed (progress < V_train) is rejected as stale in
// the aggregating models (bsp and drop, where that version's sum has already
// been applied; for drop these are the dropped stragglers of Table III) and
// is accepted, and applied at once, in the others.
//
// # DSPS rule
//
// DSPS (Zhang et al., cited by FluentPS) adapts the staleness threshold to
// how the workers are doing. kelpie's rule: the engine counts pulls in
// windows of DSPSWindow arrivals; when at least one pull in eight of a
// window was delayed, fast workers keep waiting on a straggler and s' grows
// by one; when a window had no DPR at all, the slack is unused and s' shrinks
// by one to give fresher parameters; s' stays within [1, 2s] and starts at
// s. (Shrinking when DPRs pile up would feed on itself down to s' = 1, so
// the rule relaxes under pressure instead, as adaptive-staleness schemes
// do.) A new s' applies to pulls that arrive afterwards.
//
// # Membership and live changes
//
// SetWorkers changes the barrier (elastic add or remove): counts are taken
// over the new members, V_train may advance, and a removed worker's waiting
// pulls are released. A worker that is added again starts afresh. SetConfig
// switches the model live: waiting pulls that the new pull condition admits
// are released, the others are filed again under the new pull mode, and the
// new push condition may advance V_train. Both return released ids;
// compare VTrain before and after to see whether V_train moved (an
// aggregating server then applies the completed versions).
package syncmodel

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Kind names a synchronization model.
type Kind string

// The synchronization models of FluentPS Table III.
const (
	BSP  Kind = "bsp"
	ASP  Kind = "asp"
	SSP  Kind = "ssp"
	DSPS Kind = "dsps"
	Drop Kind = "drop" // drop stragglers: an iteration completes after N_t pushes
	PSSP Kind = "pssp"
)

// PullMode says how delayed pulls are released.
type PullMode string

// Pull modes. The empty mode means Lazy.
const (
	Lazy        PullMode = "lazy"         // buffer indexed by the worker's progress
	SoftBarrier PullMode = "soft-barrier" // released at the next advance of V_train
)

// HistogramBuckets is the length of Stats.Staleness; the last bucket holds
// every gap from HistogramBuckets-1 up.
const HistogramBuckets = 16

// DSPSWindow is the number of pull arrivals after which DSPS reconsiders its
// staleness threshold.
const DSPSWindow = 32

// Config is one server's synchronization settings.
type Config struct {
	Model     Kind
	Staleness int // s for ssp, dsps and pssp
	Pull      PullMode

	PSSPC       float64 // constant P for pssp
	PSSPAlpha   float64 // α of the dynamic P(s,k) = α/(1+e^(s-k))
	PSSPDynamic bool

	DropWaitFor int // N_t for drop: pushes that complete an iteration
}

// Validate reports the first setting that is out of range.
func (c Config) Validate() error {
	switch c.Model {
	case BSP, ASP, SSP, DSPS, Drop, PSSP:
	default:
		return fmt.Errorf("syncmodel: unknown model %q (want bsp, asp, ssp, dsps, drop or pssp)", c.Model)
	}
	switch c.Pull {
	case "", Lazy, SoftBarrier:
	default:
		return fmt.Errorf("syncmodel: unknown pull mode %q (want lazy or soft-barrier)", c.Pull)
	}
	if c.Staleness < 0 {
		return fmt.Errorf("syncmodel: staleness %d is negative", c.Staleness)
	}
	switch c.Model {
	case DSPS:
		if c.Staleness < 1 {
			return errors.New("syncmodel: dsps needs staleness >= 1")
		}
	case Drop:
		if c.DropWaitFor < 1 {
			return fmt.Errorf("syncmodel: drop needs wait_for >= 1, got %d", c.DropWaitFor)
		}
	case PSSP:
		if c.PSSPDynamic {
			if !(c.PSSPAlpha >= 0) || math.IsInf(c.PSSPAlpha, 0) {
				return fmt.Errorf("syncmodel: pssp alpha %v must be a finite number >= 0", c.PSSPAlpha)
			}
		} else if !(c.PSSPC >= 0 && c.PSSPC <= 1) {
			return fmt.Errorf("syncmodel: pssp c %v must be in [0, 1]", c.PSSPC)
		}
	}
	return nil
}

// Aggregate reports whether the server sums a version's gradients and applies
// them when V_train advances (bsp, drop) rather than applying each push at
// once (Alg. 1 line 14).
func (c Config) Aggregate() bool { return c.Model == BSP || c.Model == Drop }

// Probability is PSSP's P for a worker k iterations ahead of V_train: 0
// below the threshold s, then c, or α/(1+e^(s-k)) when dynamic, in [0, 1].
func (c Config) Probability(k int64) float64 {
	s := int64(c.Staleness)
	if k < s {
		return 0
	}
	p := c.PSSPC
	if c.PSSPDynamic {
		p = c.PSSPAlpha / (1 + math.Exp(float64(s-k)))
	}
	return min(max(p, 0), 1)
}

func (c Config) mode() PullMode {
	if c.Pull == "" {
		return Lazy
	}
	return c.Pull
}

// String is a short description for logs, e.g. "ssp(s=3, lazy)".
func (c Config) String() string {
	var b strings.Builder
	b.WriteString(string(c.Model))
	var args []string
	switch c.Model {
	case SSP, DSPS:
		args = append(args, fmt.Sprintf("s=%d", c.Staleness))
	case PSSP:
		args = append(args, fmt.Sprintf("s=%d", c.Staleness))
		if c.PSSPDynamic {
			args = append(args, fmt.Sprintf("alpha=%g", c.PSSPAlpha))
		} else {
			args = append(args, fmt.Sprintf("c=%g", c.PSSPC))
		}
	case Drop:
		args = append(args, fmt.Sprintf("wait_for=%d", c.DropWaitFor))
	}
	args = append(args, string(c.mode()))
	fmt.Fprintf(&b, "(%s)", strings.Join(args, ", "))
	return b.String()
}

// PullID names one pull request; the server chooses it.
type PullID uint64

// Reject says why a push was not accepted.
type Reject string

// Reasons a push is rejected.
const (
	Stale     Reject = "stale"      // its iteration is complete (dropped straggler)
	Duplicate Reject = "duplicate"  // this worker already pushed this progress
	NotMember Reject = "not-member" // the worker is not in the barrier
)

// PushResult is what one push did.
type PushResult struct {
	// Accept is false when the gradient must be discarded, with Reject
	// saying why.
	Accept bool
	Reject Reject
	// Advanced is how many steps V_train moved.
	Advanced int
	// Release lists the delayed pulls to answer now, in order.
	Release []PullID
}

// Stats are an engine's counters since New.
type Stats struct {
	DPRs              int64 // pulls delayed
	DelayedIterations int64 // sum over released DPRs of the V_train advances they waited
	Dropped           int64 // pushes rejected as stale
	Duplicates        int64 // pushes rejected as duplicates
	Served            int64 // pulls answered, at once or on release
	// Staleness is a histogram over served pulls of the gap
	// progress+1 - V_train (iterations whose gradients were still missing),
	// clamped at 0; the last bucket is open-ended.
	Staleness []int64
}

type pending struct {
	id       PullID
	worker   int
	progress int64
	u        float64
	arrived  int64  // V_train at arrival
	due      int64  // released when V_train reaches due
	seq      uint64 // arrival order
}

// Engine is the synchronization state of one server's shard. It is not safe
// for concurrent use; the server serializes calls.
type Engine struct {
	cfg     Config
	members map[int]bool
	vtrain  int64
	pushed  map[int64]map[int]bool // version >= vtrain -> members that pushed it
	spare   []map[int]bool         // emptied sets of pushed, for reuse
	last    map[int]int64          // member -> last progress pushed
	from    map[int]int64          // member that joined mid-job -> first version it owes a push
	// maxFrom bounds every value in from (it may exceed the largest one
	// left): from V_train = maxFrom on, every member owes a push.
	maxFrom int64
	due     map[int64][]*pending // V_train value -> pulls released then
	byID    map[PullID]*pending
	waiting map[int][]*pending // worker -> its waiting pulls, in arrival order
	seq     uint64

	bound          int // DSPS's current staleness
	winPulls, winD int // DSPS window: pulls and DPRs so far

	stats Stats
}

// New returns an engine for the given members. c must pass Validate; New
// panics otherwise, since a server must not run with an unchecked model.
func New(c Config, workers []int) *Engine {
	mustValid(c)
	e := &Engine{
		cfg:     c,
		members: map[int]bool{},
		pushed:  map[int64]map[int]bool{},
		last:    map[int]int64{},
		from:    map[int]int64{},
		due:     map[int64][]*pending{},
		byID:    map[PullID]*pending{},
		waiting: map[int][]*pending{},
		bound:   c.Staleness,
		stats:   Stats{Staleness: make([]int64, HistogramBuckets)},
	}
	for _, w := range workers {
		e.members[w] = true
	}
	return e
}

// NewAt returns an engine whose training progress starts at vtrain: a
// server that joins a running job (scale-out, a restart) counts pushes from
// the iteration the workers are at.
func NewAt(c Config, workers []int, vtrain int64) *Engine {
	e := New(c, workers)
	e.vtrain = max(vtrain, 0)
	return e
}

func mustValid(c Config) {
	if err := c.Validate(); err != nil {
		panic(err)
	}
}

// VTrain is the server's training progress: iterations completed.
func (e *Engine) VTrain() int64 { return e.vtrain }

// Config returns the current settings.
func (e *Engine) Config() Config { return e.cfg }

// Bound is the staleness threshold now in force: DSPS's adapted s', s for
// ssp and pssp, 0 for bsp and drop, and -1 for asp (unbounded).
func (e *Engine) Bound() int {
	switch e.cfg.Model {
	case BSP, Drop:
		return 0
	case ASP:
		return -1
	case DSPS:
		return e.bound
	}
	return e.cfg.Staleness
}

// Pending is the number of delayed pulls waiting.
func (e *Engine) Pending() int { return len(e.byID) }

// Members returns the barrier's workers in increasing order.
func (e *Engine) Members() []int {
	out := make([]int, 0, len(e.members))
	for w := range e.members {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// Stats returns a copy of the counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Staleness = slices.Clone(e.stats.Staleness)
	return s
}

// Push records that worker finished iteration progress and pushed its
// gradient.
func (e *Engine) Push(worker int, progress int64) PushResult {
	if !e.members[worker] {
		return PushResult{Reject: NotMember}
	}
	if last, ok := e.last[worker]; ok && progress <= last {
		e.stats.Duplicates++
		return PushResult{Reject: Duplicate}
	}
	e.last[worker] = progress
	if progress < e.vtrain || progress < e.from[worker] {
		if e.cfg.Aggregate() {
			e.stats.Dropped++
			return PushResult{Reject: Stale}
		}
		return PushResult{Accept: true}
	}
	set := e.pushed[progress]
	if set == nil {
		// A set V_train has left behind, emptied: no map per push.
		if n := len(e.spare); n > 0 {
			set, e.spare = e.spare[n-1], e.spare[:n-1]
		} else {
			set = map[int]bool{}
		}
		e.pushed[progress] = set
	}
	set[worker] = true
	adv, rel := e.advance(nil)
	return PushResult{Accept: true, Advanced: adv, Release: e.finish(rel)}
}

// Pull asks for the parameters a worker needs after pushing progress, that
// is, for iteration progress+1. u is a uniform draw from [0, 1) (used by
// pssp). It reports whether to answer now; otherwise the pull waits and its
// id comes back in a later Release.
func (e *Engine) Pull(id PullID, worker int, progress int64, u float64) (serveNow bool) {
	if _, ok := e.byID[id]; ok {
		return false
	}
	var ahead *pending // this worker's latest waiting pull
	if w := e.waiting[worker]; len(w) > 0 {
		ahead = w[len(w)-1]
	}
	if ahead == nil && e.allow(worker, progress, u) {
		e.dspsCount(false)
		e.served(progress, e.vtrain)
		return true
	}
	p := &pending{id: id, worker: worker, progress: progress, u: u, arrived: e.vtrain, seq: e.seq}
	e.seq++
	p.due = e.dueOf(p)
	if ahead != nil {
		p.due = max(p.due, ahead.due)
		if ahead.progress == progress {
			// A retry of the waiting request is not a new delay.
			e.file(p)
			return false
		}
	}
	e.stats.DPRs++
	e.dspsCount(true)
	e.file(p)
	return false
}

// Cancel forgets a waiting pull (its requester went away). It reports
// whether the pull was waiting.
func (e *Engine) Cancel(id PullID) bool {
	p, ok := e.byID[id]
	if !ok {
		return false
	}
	e.unfile(p)
	return true
}

// SetWorkers replaces the barrier's members. It returns the pulls released:
// those of removed workers first, then those freed by advances of V_train.
func (e *Engine) SetWorkers(ids []int) []PullID {
	next := map[int]bool{}
	for _, w := range ids {
		next[w] = true
	}
	var rel []*pending
	for w := range e.members {
		if next[w] {
			continue
		}
		delete(e.last, w)
		delete(e.from, w)
		for _, set := range e.pushed {
			delete(set, w)
		}
	}
	for w, ps := range e.waiting {
		if !next[w] {
			rel = append(rel, ps...)
		}
	}
	sortBySeq(rel)
	for _, p := range rel {
		e.unfile(p)
	}
	e.members = next
	_, rel = e.advance(rel)
	return e.finish(rel)
}

// Join adds a worker to the barrier from version from on (a worker added
// while the job runs): the versions before it complete without it, so the
// members pushing them are not held. A from behind V_train counts from
// V_train. Joining a member changes nothing.
func (e *Engine) Join(worker int, from int64) {
	if e.members[worker] {
		return
	}
	e.members[worker] = true
	e.from[worker] = max(from, e.vtrain)
	e.maxFrom = max(e.maxFrom, e.from[worker])
}

// SetConfig switches the synchronization model live. c must pass Validate
// (SetConfig panics otherwise). Waiting pulls that the new pull condition
// admits are released first, in arrival order; the rest wait under the new
// pull mode; then the new push condition may advance V_train.
func (e *Engine) SetConfig(c Config) []PullID {
	mustValid(c)
	old := e.cfg
	e.cfg = c
	if c.Model != old.Model || c.Staleness != old.Staleness {
		e.bound = c.Staleness
		e.winPulls, e.winD = 0, 0
	}
	all := make([]*pending, 0, len(e.byID))
	for _, p := range e.byID {
		all = append(all, p)
	}
	sortBySeq(all)
	var rel []*pending
	blocked := map[int]int64{} // worker -> due of its last pull still waiting
	for _, p := range all {
		e.unfile(p)
		d, waitsBehind := blocked[p.worker]
		if !waitsBehind && e.allow(p.worker, p.progress, p.u) {
			rel = append(rel, p)
			continue
		}
		p.due = e.dueOf(p)
		if waitsBehind {
			p.due = max(p.due, d)
		}
		blocked[p.worker] = p.due
		e.file(p)
	}
	_, rel = e.advance(rel)
	return e.finish(rel)
}

// allow is the pull condition for the current V_train.
func (e *Engine) allow(worker int, progress int64, u float64) bool {
	if !e.members[worker] || progress < e.vtrain {
		return true
	}
	k := progress - e.vtrain // >= 0 here
	switch e.cfg.Model {
	case ASP:
		return true
	case SSP:
		return k < int64(e.cfg.Staleness)
	case DSPS:
		return k < int64(e.bound)
	case PSSP:
		return k < int64(e.cfg.Staleness) || u >= e.cfg.Probability(k)
	}
	return false // bsp, drop
}

// dueOf is the V_train value at which p is released under the current mode.
func (e *Engine) dueOf(p *pending) int64 {
	if e.cfg.mode() == SoftBarrier {
		return e.vtrain + 1
	}
	return max(p.progress+1, e.vtrain+1)
}

// file adds p to the buffer. Pulls are filed in arrival order, so each
// worker's list stays sorted.
func (e *Engine) file(p *pending) {
	e.byID[p.id] = p
	e.due[p.due] = append(e.due[p.due], p)
	e.waiting[p.worker] = append(e.waiting[p.worker], p)
}

func (e *Engine) unfile(p *pending) {
	e.due[p.due] = remove(e.due[p.due], p)
	if len(e.due[p.due]) == 0 {
		delete(e.due, p.due)
	}
	e.forget(p)
}

// forget drops p from the indexes other than due.
func (e *Engine) forget(p *pending) {
	delete(e.byID, p.id)
	e.waiting[p.worker] = remove(e.waiting[p.worker], p)
	if len(e.waiting[p.worker]) == 0 {
		delete(e.waiting, p.worker)
	}
}

func remove(list []*pending, p *pending) []*pending {
	if i := slices.Index(list, p); i >= 0 {
		return slices.Delete(list, i, i+1)
	}
	return list
}

// pushCondition is Table III's push condition for the current V_train.
func (e *Engine) pushCondition() bool {
	n := len(e.members)
	if e.vtrain < e.maxFrom { // a member joined for a later version: count
		n = 0
		for w := range e.members {
			if e.from[w] <= e.vtrain {
				n++
			}
		}
	}
	if n == 0 {
		return false
	}
	need := n
	if e.cfg.Model == Drop {
		need = min(e.cfg.DropWaitFor, n)
	}
	return len(e.pushed[e.vtrain]) >= need
}

// maxSpareSets bounds the emptied push sets an engine keeps for reuse.
const maxSpareSets = 8

// advance moves V_train while the push condition holds, appending the pulls
// that fall due at each step.
func (e *Engine) advance(rel []*pending) (int, []*pending) {
	n := 0
	for e.pushCondition() {
		if set := e.pushed[e.vtrain]; set != nil && len(e.spare) < maxSpareSets {
			clear(set)
			e.spare = append(e.spare, set)
		}
		delete(e.pushed, e.vtrain)
		e.vtrain++
		n++
		step := e.due[e.vtrain]
		delete(e.due, e.vtrain)
		sortBySeq(step)
		for _, p := range step {
			e.forget(p)
		}
		rel = append(rel, step...)
	}
	return n, rel
}

// finish records the statistics of released pulls against the final V_train
// and returns their ids.
func (e *Engine) finish(rel []*pending) []PullID {
	if len(rel) == 0 {
		return nil
	}
	ids := make([]PullID, len(rel))
	for i, p := range rel {
		ids[i] = p.id
		e.stats.DelayedIterations += e.vtrain - p.arrived
		e.served(p.progress, e.vtrain)
	}
	return ids
}

func (e *Engine) served(progress, vtrain int64) {
	e.stats.Served++
	gap := max(progress+1-vtrain, 0)
	e.stats.Staleness[min(gap, HistogramBuckets-1)]++
}

// dspsCount feeds DSPS's window and adapts its bound at the window's end.
func (e *Engine) dspsCount(delayed bool) {
	if e.cfg.Model != DSPS {
		return
	}
	e.winPulls++
	if delayed {
		e.winD++
	}
	if e.winPulls < DSPSWindow {
		return
	}
	switch {
	case 8*e.winD >= e.winPulls:
		e.bound = min(e.bound+1, 2*e.cfg.Staleness)
	case e.winD == 0:
		e.bound = max(e.bound-1, 1)
	}
	e.winPulls, e.winD = 0, 0
}

func sortBySeq(ps []*pending) {
	slices.SortFunc(ps, func(a, b *pending) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
}
