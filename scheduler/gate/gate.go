// Package gate is the approval gate between kelpie's policies and its
// nodes, as a pure state machine in the shape of etcd's raft: events go in
// (a policy's proposal with its key, an operator's trigger or decision, an
// agent's ack, a node lost, a tick carrying the time), and a batch of
// effects comes out (Ready): dispatch an action, record a transition
// (persist it and tell the console). The caller — the job manager — carries
// the effects out and reports back what it did (Dispatched, Await, Finish).
// Nothing here does I/O, starts a goroutine or reads a clock: time is a
// value in every event, so the scenario tests in testdata/ replay exactly.
//
// An action's life:
//
//	proposed ──decide──▶ approved ──dispatched──▶ dispatched ──acks──▶ applied
//	   │  └──decide no──▶ rejected          │            └──ack error / no ack in AckTTL / node lost──▶ failed
//	   └──ProposalTTL, or withdrawn──▶ expired  └──(a multi-step change) finish──▶ applied | failed
//
// De-duplication uses the proposing policy's own key (policy.Action.Key):
// a proposal whose key is pending, or was settled less than the proposal's
// cooldown ago, is dropped. Operator triggers are never de-duplicated.
//
// A proposal is also withdrawn (expired, with the reason in its history)
// when its policy, run again on fresh measurements and its current
// parameters, no longer proposes it (Withdraw): an operator approves what
// holds now, not what held when it was proposed.
package gate

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Mode is how a policy's proposals pass the gate.
type Mode string

// Policy modes.
const (
	ModeAuto    Mode = "auto"    // dispatched at once
	ModeApprove Mode = "approve" // wait for an operator
	ModeOff     Mode = "off"     // dropped
)

// ParseMode reads a mode's name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAuto, ModeApprove, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("policy mode must be auto, approve or off, not %q", s)
}

// State is where an action is in its life (the names are console.proto's).
type State string

// Action states.
const (
	Proposed   State = "proposed"
	Approved   State = "approved"
	Rejected   State = "rejected"
	Dispatched State = "dispatched"
	Applied    State = "applied"
	Failed     State = "failed"
	Expired    State = "expired"
)

// Pending says whether the action is still to be settled.
func (s State) Pending() bool { return s == Proposed || s == Approved || s == Dispatched }

// Config holds the gate's time limits.
type Config struct {
	// ProposalTTL is how long a proposal waits for an operator.
	ProposalTTL time.Duration
	// AckTTL is how long a dispatched action waits for the acks it awaits;
	// zero waits for ever.
	AckTTL time.Duration
	// WithdrawGrace is how long a proposal must go unproposed by its
	// policy, round after round, before Withdraw expires it: one round
	// without it is noise (a measurement at a window's edge, a policy
	// waiting for another action's outcome), not evidence gone. Zero
	// withdraws at the first round without it.
	WithdrawGrace time.Duration
}

// Transition is one step of an action's history.
type Transition struct {
	State State
	At    time.Time
	By    string
	Note  string
}

// Action is the gate's record of one action: what it is and where it is
// in its life. The caller keeps the kind's parameters.
type Action struct {
	ID     string
	Key    string // the proposing policy's key; "" for an operator's
	Policy string // "operator" for a trigger
	Kind   string
	Target string

	State            State
	Created, Updated time.Time
	DecidedBy        string
	Error            string
	AppliedIteration int64
	History          []Transition

	awaiting map[string]bool // nodes whose ack is still missing
	awaitAt  time.Time       // when the wait for acks began
	// withdrawn: expired because its evidence no longer held; it does not
	// hold back a new proposal with its key (nothing was done to judge).
	withdrawn bool
	// unproposedSince is when its policy's rounds began leaving it out
	// (zero while they propose it).
	unproposedSince time.Time
}

// Awaiting lists the nodes whose ack the action still waits for.
func (a *Action) Awaiting() []string {
	out := make([]string, 0, len(a.awaiting))
	for n := range a.awaiting {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// EffectType says what the caller must do.
type EffectType int

// Effect types.
const (
	// Dispatch: carry the action out (send its commands, start its change),
	// then report Dispatched (and Await the nodes whose acks count).
	Dispatch EffectType = iota + 1
	// Record: the action changed state: persist it and emit the transition
	// as an event.
	Record
)

// Effect is one piece of work for the caller.
type Effect struct {
	Type       EffectType
	Action     *Action
	Transition Transition // Record: the step just taken
}

// Errors of events that do not apply.
var (
	ErrDuplicate = errors.New("a proposal with the same key is pending or settled too recently")
	ErrOff       = errors.New("the policy is off")
	ErrNotFound  = errors.New("no such action")
	ErrState     = errors.New("the action is not in a state for this")
)

// Gate holds a job's actions. It is not safe for concurrent use: its owner
// (one job) serialises events.
type Gate struct {
	cfg     Config
	actions []*Action
	byID    map[string]*Action
	ready   []Effect
}

// New returns an empty gate.
func New(cfg Config) *Gate { return &Gate{cfg: cfg, byID: map[string]*Action{}} }

// Config returns the gate's time limits.
func (g *Gate) Config() Config { return g.cfg }

// Actions returns every action, oldest first. The records are the gate's:
// read them, do not change them.
func (g *Gate) Actions() []*Action { return g.actions }

// Get returns one action, nil when there is none with that id.
func (g *Gate) Get(id string) *Action { return g.byID[id] }

// Ready returns the effects produced since the last call and forgets them.
func (g *Gate) Ready() []Effect {
	r := g.ready
	g.ready = nil
	return r
}

// Proposal is a policy's proposed action.
type Proposal struct {
	ID     string // the caller names actions
	Key    string // the policy's own de-duplication key; "" uses Policy/Kind/Target
	Policy string
	Kind   string
	Target string
	Mode   Mode
	// Cooldown: a settled action with the same key blocks this one for so
	// long after it settled (its effect cannot be judged yet).
	Cooldown time.Duration
}

func (p Proposal) key() string {
	if p.Key != "" {
		return p.Key
	}
	return p.Policy + "/" + p.Kind + "/" + p.Target
}

// Propose passes a policy's proposal through the gate: dropped when its
// policy is off or its key is pending or cooling down, else approved and
// dispatched (auto) or proposed to an operator (approve).
func (g *Gate) Propose(now time.Time, p Proposal) error {
	if p.Mode == ModeOff || p.Mode == "" {
		return ErrOff
	}
	if g.byID[p.ID] != nil {
		return fmt.Errorf("gate: action id %s is taken", p.ID)
	}
	key := p.key()
	if g.Recent(key, now, p.Cooldown) {
		return ErrDuplicate
	}
	a := &Action{ID: p.ID, Key: key, Policy: p.Policy, Kind: p.Kind, Target: p.Target, Created: now}
	g.add(a)
	who := "policy:" + p.Policy
	if p.Mode == ModeAuto {
		g.step(a, now, Approved, who, "auto mode")
		g.ready = append(g.ready, Effect{Type: Dispatch, Action: a})
		return nil
	}
	g.step(a, now, Proposed, who, "waiting for an operator")
	return nil
}

// Waiting returns the action with this key that waits for an operator
// (Proposed), or nil.
func (g *Gate) Waiting(key string) *Action {
	for _, a := range g.actions {
		if key != "" && a.Key == key && a.State == Proposed {
			return a
		}
	}
	return nil
}

// Recent says whether an action with this key is pending, or settled less
// than cooldown before now.
func (g *Gate) Recent(key string, now time.Time, cooldown time.Duration) bool {
	if key == "" {
		return false
	}
	for _, a := range g.actions {
		if a.Key != key {
			continue
		}
		if a.State.Pending() || !a.withdrawn && now.Sub(a.Updated) < cooldown {
			return true
		}
	}
	return false
}

// Trigger records an operator's action, approved, and dispatches it.
func (g *Gate) Trigger(now time.Time, id, kind, target, who string) error {
	if g.byID[id] != nil {
		return fmt.Errorf("gate: action id %s is taken", id)
	}
	a := &Action{ID: id, Policy: "operator", Kind: kind, Target: target, Created: now}
	g.add(a)
	g.step(a, now, Approved, who, "")
	g.ready = append(g.ready, Effect{Type: Dispatch, Action: a})
	return nil
}

// Decide is an operator's answer to a proposal.
func (g *Gate) Decide(now time.Time, id string, approve bool, who, note string) error {
	a, err := g.in(id, Proposed)
	if err != nil {
		return err
	}
	if !approve {
		g.step(a, now, Rejected, who, note)
		return nil
	}
	g.step(a, now, Approved, who, note)
	g.ready = append(g.ready, Effect{Type: Dispatch, Action: a})
	return nil
}

// Dispatched reports that the caller carried an approved action out.
func (g *Gate) Dispatched(now time.Time, id, who, note string) error {
	a, err := g.in(id, Approved)
	if err != nil {
		return err
	}
	g.step(a, now, Dispatched, who, note)
	return nil
}

// Await names the nodes whose acks apply the action: once each has acked
// it is applied. It replaces an earlier wait; AckTTL runs from now.
func (g *Gate) Await(now time.Time, id string, nodes []string) error {
	a, err := g.in(id, Approved, Dispatched)
	if err != nil {
		return err
	}
	a.awaiting = map[string]bool{}
	for _, n := range nodes {
		a.awaiting[n] = true
	}
	a.awaitAt = now
	return nil
}

// Ack is a node's answer to a dispatched action: an error fails it;
// otherwise the node is no longer awaited, and when none is the action is
// applied at the highest iteration acked. An ack the action does not wait
// for is ignored (it reports false).
func (g *Gate) Ack(now time.Time, id, node string, iteration int64, ackErr string) (bool, error) {
	a, err := g.in(id, Dispatched)
	if err != nil {
		return false, err
	}
	if ackErr != "" {
		a.awaiting = nil
		g.step(a, now, Failed, node, ackErr)
		return true, nil
	}
	if !a.awaiting[node] {
		return false, nil
	}
	delete(a.awaiting, node)
	a.AppliedIteration = max(a.AppliedIteration, iteration)
	if len(a.awaiting) == 0 {
		a.awaiting = nil
		g.step(a, now, Applied, node, fmt.Sprintf("at iteration %d", a.AppliedIteration))
	}
	return true, nil
}

// Finish ends an action the caller carried out itself (a multi-step change
// such as a table change): applied with note, or failed with the error.
func (g *Gate) Finish(now time.Time, id, by string, iteration int64, note string, failure error) error {
	a, err := g.in(id, Approved, Dispatched)
	if err != nil {
		return err
	}
	a.awaiting = nil
	if failure != nil {
		g.step(a, now, Failed, by, failure.Error())
		return nil
	}
	if iteration > 0 {
		a.AppliedIteration = iteration
	}
	g.step(a, now, Applied, by, note)
	return nil
}

// Fail ends a pending action that cannot go on (it no longer validates,
// the job ended).
func (g *Gate) Fail(now time.Time, id, by, note string) error {
	a, err := g.in(id, Proposed, Approved, Dispatched)
	if err != nil {
		return err
	}
	a.awaiting = nil
	g.step(a, now, Failed, by, note)
	return nil
}

// Expire withdraws a proposal.
func (g *Gate) Expire(now time.Time, id, by, note string) error {
	a, err := g.in(id, Proposed)
	if err != nil {
		return err
	}
	g.step(a, now, Expired, by, note)
	return nil
}

// Withdraw expires the policy's proposals still waiting for an operator
// whose key has not been in current, the keys the policy proposes now, for
// Config.WithdrawGrace (every round since it was first left out): under the
// parameters and measurements it ran on this time, their evidence no longer
// holds (the straggler recovered, λ was raised), so approving them would
// act on a situation that is gone. why says so in each one's history. It
// returns the ids it expired. Approved and dispatched actions are left to
// run.
func (g *Gate) Withdraw(now time.Time, policy string, current map[string]bool, why string) []string {
	var out []string
	for _, a := range g.actions {
		if a.State != Proposed || a.Policy != policy {
			continue
		}
		if current[a.Key] {
			a.unproposedSince = time.Time{}
			continue
		}
		if a.unproposedSince.IsZero() {
			a.unproposedSince = now
		}
		if now.Sub(a.unproposedSince) < g.cfg.WithdrawGrace {
			continue
		}
		a.withdrawn = true
		g.step(a, now, Expired, "policy:"+policy, why)
		out = append(out, a.ID)
	}
	return out
}

// Tick expires proposals older than ProposalTTL and fails dispatched
// actions that waited longer than AckTTL for their acks.
func (g *Gate) Tick(now time.Time) {
	for _, a := range g.actions {
		switch {
		case a.State == Proposed && g.cfg.ProposalTTL > 0 && now.Sub(a.Created) > g.cfg.ProposalTTL:
			g.step(a, now, Expired, "gate", fmt.Sprintf("no decision within %s", g.cfg.ProposalTTL))
		case a.State == Dispatched && len(a.awaiting) > 0 && g.cfg.AckTTL > 0 && now.Sub(a.awaitAt) > g.cfg.AckTTL:
			missing := a.Awaiting()
			a.awaiting = nil
			g.step(a, now, Failed, "gate", fmt.Sprintf("no ack from %s within %s", strings.Join(missing, ", "), g.cfg.AckTTL))
		}
	}
}

// NodeLost fails every dispatched action still waiting for the node's ack:
// it cannot apply at the iteration the others do.
func (g *Gate) NodeLost(now time.Time, node, why string) {
	for _, a := range g.actions {
		if a.State == Dispatched && a.awaiting[node] {
			a.awaiting = nil
			g.step(a, now, Failed, "gate", fmt.Sprintf("%s was lost before it applied: %s", node, why))
		}
	}
}

// Restore puts back an action read from durable state, as it was. Pending
// acks are not restored: agents replay what they have not applied.
func (g *Gate) Restore(a Action) error {
	if g.byID[a.ID] != nil {
		return fmt.Errorf("gate: action id %s is taken", a.ID)
	}
	r := a
	r.awaiting = nil
	g.add(&r)
	return nil
}

func (g *Gate) add(a *Action) {
	g.actions = append(g.actions, a)
	g.byID[a.ID] = a
}

func (g *Gate) in(id string, states ...State) (*Action, error) {
	a := g.byID[id]
	if a == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if !slices.Contains(states, a.State) {
		return a, fmt.Errorf("%w: action %s is %s", ErrState, id, a.State)
	}
	return a, nil
}

func (g *Gate) step(a *Action, now time.Time, s State, by, note string) {
	a.State, a.Updated = s, now
	switch s {
	case Approved, Rejected:
		a.DecidedBy = by
	case Failed:
		a.Error = note
	}
	t := Transition{State: s, At: now, By: by, Note: note}
	a.History = append(a.History, t)
	g.ready = append(g.ready, Effect{Type: Record, Action: a, Transition: t})
}
