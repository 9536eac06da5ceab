// Package change holds kelpie's elastic change sequences as pure state
// machines: what happens, in which order and under which deadlines, when a
// job's block table changes while it trains (REASSIGN, ADD_SERVER,
// REMOVE_SERVER, a server's relaunch). In the shape of etcd's raft: the job
// manager feeds events in (the new server registered, the servers took the
// table, a worker switched, a worker was lost, the blocks settled, a tick
// with the time) and carries out the effects that come out (retable the
// servers and tell the workers, commit the table, shut the leaving server
// down, finish the action). Nothing here does I/O, starts a goroutine or
// reads a clock, so testdata/ scenarios replay a change exactly, with a fake
// agent harness that acks, fails or stays silent.
//
// A table change:
//
//	joining ──joined──▶ retabling ──retabled──▶ switching ──every worker switched──▶ settling ──settled──▶ done
//	   └─ no join by the deadline ─▶ failed       │ └─ a worker lost / failed, or the switch deadline ─▶ failed
//	                                              └─ a server refused the table ─▶ failed
package change

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kelpie/kelpie/core/blocks"
)

// Kind is what a table change does.
type Kind int

// Table change kinds.
const (
	Reassign     Kind = iota + 1 // move blocks among the active servers
	AddServer                    // a new server takes a share of the blocks
	RemoveServer                 // a server hands its blocks to the others and stops
	Relaunch                     // a new server takes exactly one server's blocks; that one stops
)

var kindNames = map[Kind]string{Reassign: "REASSIGN", AddServer: "ADD_SERVER", RemoveServer: "REMOVE_SERVER", Relaunch: "RELAUNCH"}

func (k Kind) String() string { return kindNames[k] }

// Limits are a change's deadlines.
type Limits struct {
	Join   time.Duration // a new server registers
	Switch time.Duration // every worker switches to the new table
}

// Plan is a table change to carry out.
type Plan struct {
	Kind Kind
	Old  blocks.Table
	// Servers is the number of server slots once the new server (if any)
	// has one; Active the servers that hold or may hold blocks before the
	// change.
	Servers int
	Active  []int
	// Remove is the leaving server (RemoveServer, Relaunch), New the
	// joining one (AddServer, Relaunch); -1 when none.
	Remove, New int
	// Assignment is a REASSIGN's explicit block → server (empty: rebalance
	// by size).
	Assignment []int
	// Names are the servers' names, for the sentences.
	Names  []string
	Limits Limits
}

// Next is the table a plan leads to and the servers it takes out.
func Next(p Plan) (blocks.Table, []int, error) {
	old := p.Old
	var removed []int
	active := slices.Clone(p.Active)
	if p.New >= 0 && !slices.Contains(active, p.New) {
		active = append(active, p.New)
	}
	if p.Remove >= 0 {
		removed = []int{p.Remove}
		active = slices.DeleteFunc(active, func(r int) bool { return r == p.Remove })
	}
	switch {
	case p.Kind == Relaunch:
		if p.New < 0 || p.Remove < 0 {
			return blocks.Table{}, nil, fmt.Errorf("change: a relaunch needs the leaving and the new server")
		}
		next := blocks.Table{Version: old.Version + 1, Blocks: old.Blocks, Servers: p.Servers, ServerOf: slices.Clone(old.ServerOf)}
		for i, r := range next.ServerOf {
			if r == p.Remove {
				next.ServerOf[i] = p.New
			}
		}
		return next, removed, nil
	case len(p.Assignment) > 0:
		if len(p.Assignment) != len(old.Blocks) {
			return blocks.Table{}, nil, fmt.Errorf("change: %d entries for %d blocks", len(p.Assignment), len(old.Blocks))
		}
		next := blocks.Table{Version: old.Version + 1, Blocks: old.Blocks, Servers: p.Servers, ServerOf: slices.Clone(p.Assignment)}
		return next, removed, nil
	}
	next, err := blocks.Rebalance(old, p.Servers, active)
	return next, removed, err
}

// Phase is where a change is.
type Phase int

// Phases of a change.
const (
	Joining   Phase = iota + 1 // waiting for the new server to register
	Retabling                  // the servers are taking the table, the workers are told
	Switching                  // waiting for every worker to switch
	Settling                   // the table is committed; blocks in transit arrive
	Done                       // applied
	Failed                     // failed; Err says why
)

var phaseNames = map[Phase]string{Joining: "joining", Retabling: "retabling", Switching: "switching", Settling: "settling",
	Done: "done", Failed: "failed"}

func (p Phase) String() string { return phaseNames[p] }

// EffectType says what the caller must do.
type EffectType int

// Effects.
const (
	// Retable: move every server to Table from an iteration ahead of every
	// worker (the removed ones hand their blocks off), then send it to the
	// workers; report Retabled with that iteration and the workers told,
	// or RetableFailed.
	Retable EffectType = iota + 1
	// Commit: every worker follows the new table; commit it and wait for
	// the blocks in transit, then report Settled.
	Commit
	// Shutdown: stop the servers in Removed.
	Shutdown
	// Finish: the change is over: applied (Err nil, Note says how) or
	// failed.
	Finish
)

// Effect is one piece of work for the caller.
type Effect struct {
	Type    EffectType
	Table   blocks.Table
	Removed []int
	Note    string
	Err     error
}

// Table is one table change under way.
type Table struct {
	plan     Plan
	phase    Phase
	next     blocks.Table
	removed  []int
	at       int64
	deadline time.Time // of the current phase (zero: none)
	awaiting map[string]bool
	paused   float64
	err      error
	ready    []Effect
}

// NewTable starts a table change at now: it waits for its new server, or
// retables at once.
func NewTable(p Plan, now time.Time) *Table {
	t := &Table{plan: p}
	if p.New >= 0 && p.Kind != Reassign {
		t.phase = Joining
		t.deadline = now.Add(p.Limits.Join)
		return t
	}
	t.retable()
	return t
}

// Phase says where the change is.
func (t *Table) Phase() Phase { return t.phase }

// Over says whether the change has finished, applied or failed.
func (t *Table) Over() bool { return t.phase == Done || t.phase == Failed }

// Err is why the change failed.
func (t *Table) Err() error { return t.err }

// Next is the new table (once the change has retabled).
func (t *Table) Next() blocks.Table { return t.next }

// Moved counts the blocks that change server.
func (t *Table) Moved() int {
	n := 0
	for i := range t.next.ServerOf {
		if i >= len(t.plan.Old.ServerOf) || t.plan.Old.ServerOf[i] != t.next.ServerOf[i] {
			n++
		}
	}
	return n
}

// Paused is how long the job waited for the blocks in transit.
func (t *Table) Paused() float64 { return t.paused }

// Awaiting lists the workers that have not switched yet.
func (t *Table) Awaiting() []string {
	out := make([]string, 0, len(t.awaiting))
	for w := range t.awaiting {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}

// Deadline is when the current phase times out (zero: no deadline): call
// Tick then.
func (t *Table) Deadline() time.Time { return t.deadline }

// Ready returns the effects produced since the last call.
func (t *Table) Ready() []Effect {
	r := t.ready
	t.ready = nil
	return r
}

func (t *Table) name(i int) string {
	if i >= 0 && i < len(t.plan.Names) {
		return t.plan.Names[i]
	}
	return fmt.Sprintf("server %d", i)
}

func (t *Table) fail(err error) {
	t.phase, t.err, t.deadline, t.awaiting = Failed, err, time.Time{}, nil
	t.ready = append(t.ready, Effect{Type: Finish, Err: err})
}

func (t *Table) retable() {
	next, removed, err := Next(t.plan)
	if err != nil {
		t.fail(err)
		return
	}
	t.next, t.removed = next, removed
	t.phase, t.deadline = Retabling, time.Time{}
	t.ready = append(t.ready, Effect{Type: Retable, Table: next, Removed: removed})
}

// Joined: the new server has registered.
func (t *Table) Joined(time.Time) {
	if t.phase == Joining {
		t.retable()
	}
}

// Retabled: every server took the table, switching at iteration at, and
// these workers were told; each must switch.
func (t *Table) Retabled(now time.Time, at int64, workers []string) {
	if t.phase != Retabling {
		return
	}
	t.at = at
	t.awaiting = map[string]bool{}
	for _, w := range workers {
		t.awaiting[w] = true
	}
	t.phase, t.deadline = Switching, now.Add(t.plan.Limits.Switch)
	t.switched()
}

// RetableFailed: a server did not take the table.
func (t *Table) RetableFailed(_ time.Time, server int, err error) {
	if t.phase == Retabling {
		t.fail(fmt.Errorf("retable %s: %v", t.name(server), err))
	}
}

// Switched: a worker follows the new table. A worker it does not wait for
// (a replay, one added meanwhile) changes nothing.
func (t *Table) Switched(_ time.Time, worker string) {
	if t.phase != Switching || !t.awaiting[worker] {
		return
	}
	delete(t.awaiting, worker)
	t.switched()
}

func (t *Table) switched() {
	if len(t.awaiting) == 0 {
		t.phase, t.deadline = Settling, time.Time{}
		t.ready = append(t.ready, Effect{Type: Commit, Table: t.next})
	}
}

// WorkerFailed: a worker answered the switch with an error.
func (t *Table) WorkerFailed(_ time.Time, worker, msg string) {
	if t.phase == Switching && t.awaiting[worker] {
		t.fail(fmt.Errorf("%s could not switch to table v%d: %s", worker, t.next.Version, msg))
	}
}

// Lost: a node was lost. A worker that has yet to switch fails the change
// (the others would wait for its gradients on the old table for ever).
func (t *Table) Lost(_ time.Time, node string) {
	switch {
	case t.phase == Switching && t.awaiting[node]:
		t.fail(fmt.Errorf("%s was lost before it switched to table v%d", node, t.next.Version))
	case t.phase == Joining && t.plan.New >= 0 && node == t.name(t.plan.New):
		t.fail(fmt.Errorf("%s was lost before it registered", node))
	}
}

// Settled: the blocks in transit have arrived (or the caller stopped
// waiting for them); the job waited paused seconds for them.
func (t *Table) Settled(_ time.Time, paused float64) {
	if t.phase != Settling {
		return
	}
	if len(t.removed) > 0 {
		t.ready = append(t.ready, Effect{Type: Shutdown, Removed: t.removed})
	}
	t.phase, t.paused = Done, paused
	t.ready = append(t.ready, Effect{Type: Finish, Note: fmt.Sprintf("table v%d at iteration %d, paused %.3fs", t.next.Version, t.at, paused)})
}

// Tick: the time now; a phase past its deadline fails the change.
func (t *Table) Tick(now time.Time) {
	if t.deadline.IsZero() || now.Before(t.deadline) {
		return
	}
	switch t.phase {
	case Joining:
		t.fail(fmt.Errorf("%s did not register within %s", t.name(t.plan.New), t.plan.Limits.Join))
	case Switching:
		t.fail(fmt.Errorf("workers did not switch to table v%d within %s (%s did not)", t.next.Version, t.plan.Limits.Switch,
			strings.Join(t.Awaiting(), ", ")))
	}
}
