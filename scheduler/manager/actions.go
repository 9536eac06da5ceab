package manager

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/kelpie/kelpie/core/policydecl"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/proto/timelinepb"
	"github.com/kelpie/kelpie/scheduler/cause"
	"github.com/kelpie/kelpie/scheduler/change"
	"github.com/kelpie/kelpie/scheduler/gate"
	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
	"github.com/kelpie/kelpie/scheduler/timeline"
)

// Action states (console.proto).
const (
	ActProposed   = "proposed"
	ActApproved   = "approved"
	ActRejected   = "rejected"
	ActDispatched = "dispatched"
	ActApplied    = "applied"
	ActFailed     = "failed"
	ActExpired    = "expired"
)

// Policy modes.
const (
	ModeAuto    = "auto"
	ModeApprove = "approve"
	ModeOff     = "off"
)

// ProposalTTL is how long a proposal waits for an operator before it
// expires.
const ProposalTTL = 5 * time.Minute

// WithdrawGrace is how long a policy must leave a pending proposal out of
// its rounds before it is withdrawn as stale (gate.Config.WithdrawGrace):
// longer than a round or two of noise, shorter than an operator's look.
const WithdrawGrace = 10 * time.Second

// AckTTL is how long a dispatched action waits for its agents' acks before
// it fails (a table change's own steps have their own limits).
const AckTTL = 5 * time.Minute

// policySetting is one policy's mode and parameters for one job.
type policySetting struct {
	Mode   string             `json:"mode"`
	Params map[string]float64 `json:"params"`
}

// policyNames lists the registered policies in display order.
func policyNames() []string { return policy.Names() }

// defaultPolicies is every registered policy's setting as the spec gives
// it: its mode, and each declared parameter (the declared default where
// the spec has none, as for a spec built without Parse).
func defaultPolicies(s *spec.Spec) map[string]*policySetting {
	out := map[string]*policySetting{}
	for _, p := range policy.All() {
		d := p.Decl()
		ps := &policySetting{Mode: s.Policies.Mode(d.Name), Params: d.Defaults()}
		maps.Copy(ps.Params, s.Policies[d.Name].Params)
		out[d.Name] = ps
	}
	return out
}

// job is the job of that name, as last published (no lock).
func (m *Manager) job(name string) (*jobState, error) {
	j, ok := m.lookup(name)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no job %q", name)
	}
	return j, nil
}

// Trigger runs an operator's action on a job.
func (m *Manager) Trigger(job string, a *consolepb.Action, who string) (string, error) {
	if a == nil {
		return "", status.Error(codes.InvalidArgument, "trigger: no action")
	}
	if err := supported(a.Kind); err != nil {
		return "", err
	}
	j, err := m.job(job)
	if err != nil {
		return "", err
	}
	var (
		id    string
		after func()
	)
	j.call(func() { id, after, err = m.trigger(j, a, who) })
	if after != nil {
		after()
	}
	return id, err
}

// trigger runs an operator's action on a job, on the job's actor; after
// (nil if nothing) stores it and sends its commands, off the actor: a
// change's sends never run on the actor (they may call it).
func (m *Manager) trigger(j *jobState, a *consolepb.Action, who string) (string, func(), error) {
	job := j.spec.Name
	if j.over() {
		return "", nil, status.Errorf(codes.FailedPrecondition, "job %s is %s", job, j.state)
	}
	act := &consolepb.Action{Kind: a.Kind, Target: a.Target, Policy: "operator", Reason: a.Reason,
		BatchSizes: a.BatchSizes, Accumulation: a.Accumulation, Params: a.Params, Assignment: a.Assignment, SyncModel: a.SyncModel,
		Args: a.Args}
	if act.Reason == "" {
		act.Reason = "triggered by " + who
	}
	if err := typedArgs(act); err != nil {
		return "", nil, err
	}
	if err := j.validate(act); err != nil {
		return "", nil, err
	}
	sends, err := m.addLocked(j, act, "", gate.ModeAuto, who)
	if err != nil {
		return "", nil, status.Errorf(codes.Internal, "trigger: %v", err)
	}
	return act.Id, func() {
		m.persistAction(j, act)
		sends.run()
	}, nil
}

// Decide approves or rejects a proposed action.
func (m *Manager) Decide(job, id string, approve bool, who, note string) error {
	j, err := m.job(job)
	if err != nil {
		return err
	}
	var after func()
	j.call(func() { after, err = m.decide(j, id, approve, who, note) })
	if after != nil {
		after()
	}
	return err
}

// decide approves or rejects a proposed action, on the job's actor; after
// (nil if nothing) stores it and sends its commands, off the actor (see
// trigger).
func (m *Manager) decide(j *jobState, id string, approve bool, who, note string) (func(), error) {
	job := j.spec.Name
	a, ok := j.byID[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "job %s has no action %s", job, id)
	}
	if a.State != ActProposed {
		return nil, status.Errorf(codes.FailedPrecondition, "action %s is %s, not proposed", id, a.State)
	}
	if approve {
		if err := j.validate(a); err != nil {
			m.transition(j, a, ActFailed, who, err.Error())
			return func() { m.persistAction(j, a) }, err
		}
	}
	if err := j.gate.Decide(m.now(), id, approve, who, note); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "action %s: %v", id, err)
	}
	sends := m.applyGate(j)
	return func() {
		m.persistAction(j, a)
		sends.run()
	}, nil
}

// SetPolicy changes a policy's mode and parameters live; the next decision
// uses them.
func (m *Manager) SetPolicy(job, name, mode string, params map[string]float64, who string) error {
	j, err := m.job(job)
	if err != nil {
		return err
	}
	j.call(func() { err = m.setPolicy(j, name, mode, params, who) })
	return err
}

// setPolicy changes a policy's settings, on the job's actor.
func (m *Manager) setPolicy(j *jobState, name, mode string, params map[string]float64, who string) error {
	job := j.spec.Name
	p, ok := j.policies[name]
	if !ok {
		return status.Errorf(codes.InvalidArgument, "unknown policy %q (one of %s)", name, strings.Join(policyNames(), ", "))
	}
	switch mode {
	case "", ModeAuto, ModeApprove, ModeOff:
	default:
		return status.Errorf(codes.InvalidArgument, "policy mode must be auto, approve or off, not %q", mode)
	}
	for k, v := range params {
		if _, known := p.Params[k]; !known {
			return status.Errorf(codes.InvalidArgument, "policy %s has no parameter %q", name, k)
		}
		if math.IsNaN(v) || v < 0 {
			return status.Errorf(codes.InvalidArgument, "policy %s parameter %s must be ≥ 0, got %v", name, k, v)
		}
	}
	// The paper's bounds, on the parameters as they would be after the edit.
	if err := policy.CheckParams(name, mergeParams(p.Params, params), len(j.liveWorkers())); err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if mode != "" {
		p.Mode = mode
	}
	for k, v := range params {
		p.Params[k] = v
	}
	if name == policy.NameAntDTND {
		cfg := j.mon.Config()
		v := policydecl.Values(p.Params)
		cfg.Lambda, cfg.LTrans, cfg.LPer = v.Float(policy.NDLambda), v.Duration(policy.NDWindowTransient), v.Duration(policy.NDWindowPersistent)
		if err := cfg.Validate(); err != nil {
			return status.Errorf(codes.InvalidArgument, "policy %s: %v", name, err)
		}
		j.mon.SetConfig(cfg)
	}
	m.event(job, "policy", "", fmt.Sprintf("policy %s set to %s %s", name, p.Mode, formatParams(p.Params)), who)
	b := j.policiesJSON()
	return m.cfg.Store.PutPolicies(job, b)
}

// mergeParams is p with the edits applied, in a new map.
func mergeParams(p, edits map[string]float64) map[string]float64 {
	out := maps.Clone(p)
	if out == nil {
		out = map[string]float64{}
	}
	maps.Copy(out, edits)
	return out
}

func formatParams(p map[string]float64) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%g", k, p[k])
	}
	return b.String()
}

// validate checks an action against the job as it is now: the rules
// between concurrent actions here, the kind's own checks in its
// definition (kinds.go).
func (j *jobState) validate(a *consolepb.Action) error {
	d, err := kindOf(a.Kind)
	if err != nil {
		return err
	}
	if err := allreduceRefuses(j.spec, a.Kind); err != nil {
		return err
	}
	if d.exclusive {
		// One table change at a time, and no relaunch during one: a worker
		// that restarts mid-change would not know which table to follow.
		// Nor a table change while the set of workers changes: every live
		// worker must follow it.
		for _, other := range j.actions {
			od := defOf(other)
			if other != a && od != nil && (od.table || od.membership) && (other.State == ActApproved || other.State == ActDispatched) {
				return status.Errorf(codes.FailedPrecondition, "%s: table change %s is still under way", a.Kind, other.Id)
			}
		}
	}
	return d.validate(j, a)
}

// validateRestart checks a KILL_RESTART.
func (j *jobState) validateRestart(a *consolepb.Action) error {
	n, ok := j.nodes[a.Target]
	if !ok {
		return status.Errorf(codes.InvalidArgument, "KILL_RESTART: job %s has no node %q", j.spec.Name, a.Target)
	}
	if n.removed {
		return status.Errorf(codes.FailedPrecondition, "KILL_RESTART: %s was removed from job %s", a.Target, j.spec.Name)
	}
	if n.role == "server" {
		// A server is relaunched on a fresh host by a hot table change:
		// a new server takes its blocks, then it stops.
		return j.validateTable(&consolepb.Action{Kind: string(policy.KindRemoveServer), Target: a.Target})
	}
	return nil
}

// validateBackup checks a BACKUP_WORKERS.
func (j *jobState) validateBackup(a *consolepb.Action) error {
	d, live := int(a.GetBackupWorkers().GetDrop()), len(j.liveWorkers())
	if d < 0 || d >= live {
		return status.Errorf(codes.InvalidArgument, "BACKUP_WORKERS: drop must be a whole number in [0, %d), got %d", live, d)
	}
	if d > 0 && !j.aggregating() {
		return status.Errorf(codes.FailedPrecondition, "BACKUP_WORKERS: job %s runs %s; backup workers drop gradients from a synchronous barrier (bsp)",
			j.spec.Name, syncName(j.spec))
	}
	return nil
}

// validateSplit checks an ADJUST_BS.
func (j *jobState) validateSplit(a *consolepb.Action) error {
	if other := j.workerChanging(a); other != nil {
		return status.Errorf(codes.FailedPrecondition, "ADJUST_BS: %s %s is still under way", other.Kind, other.Id)
	}
	sum := 0
	for _, w := range j.liveWorkers() {
		b, ok := a.BatchSizes[w]
		if !ok {
			return status.Errorf(codes.InvalidArgument, "ADJUST_BS: no batch size for %s", w)
		}
		if b < 1 {
			return status.Errorf(codes.InvalidArgument, "ADJUST_BS: %s's batch size must be at least 1, got %d", w, b)
		}
		c := a.Accumulation[w]
		if _, set := a.Accumulation[w]; set && c < 1 {
			return status.Errorf(codes.InvalidArgument, "ADJUST_BS: %s's accumulation count must be at least 1, got %d", w, c)
		}
		sum += int(b) * int(max(c, 1))
	}
	for w := range a.BatchSizes {
		if n, ok := j.nodes[w]; !ok || n.role != "worker" || n.removed {
			return status.Errorf(codes.InvalidArgument, "ADJUST_BS: %s is not a worker of job %s", w, j.spec.Name)
		}
	}
	for w := range a.Accumulation {
		if _, ok := a.BatchSizes[w]; !ok {
			return status.Errorf(codes.InvalidArgument, "ADJUST_BS: accumulation for %s without a batch size", w)
		}
	}
	if sum != j.spec.Train.GlobalBatch {
		what := "batch sizes"
		if len(a.Accumulation) > 0 {
			what = "batch sizes × accumulation counts"
		}
		return status.Errorf(codes.InvalidArgument, "ADJUST_BS: %s sum to %d; the global batch is %d", what, sum, j.spec.Train.GlobalBatch)
	}
	return nil
}

// newActionLocked names a new action and files its console record; the
// gate holds its life (state, history, acks).
func (m *Manager) newActionLocked(j *jobState, a *consolepb.Action) {
	a.Id = fmt.Sprintf("a-%d", m.nextID.Add(1))
	a.Job = j.spec.Name
	a.Created = ts(m.now())
	a.State = ""
	j.actions = append(j.actions, a)
	j.byID[a.Id] = a
}

// addLocked records a new action through the gate: approved (an operator's
// trigger, or a policy in auto mode — then it is dispatched) or proposed
// (waiting for an operator). key is the proposing policy's de-duplication
// key ("" for none: every call is a change of its own); it reports
// gate.ErrDuplicate when an action with that key is pending or settled too
// recently.
func (m *Manager) addLocked(j *jobState, a *consolepb.Action, key string, mode gate.Mode, who string) (sendList, error) {
	now := m.now()
	m.newActionLocked(j, a)
	var err error
	if a.Policy == "operator" {
		err = j.gate.Trigger(now, a.Id, a.Kind, a.Target, who)
	} else {
		if key == "" {
			key = "once/" + a.Id
		}
		err = j.gate.Propose(now, gate.Proposal{ID: a.Id, Key: key, Policy: a.Policy, Kind: a.Kind, Target: a.Target,
			Mode: mode, Cooldown: j.mon.Config().LPer})
	}
	if err != nil {
		j.actions = j.actions[:len(j.actions)-1]
		delete(j.byID, a.Id)
		return nil, err
	}
	// Its preview asks the cluster: off the actor, on a goroutine.
	return append(m.applyGate(j), func() { m.spawn(func() { m.refreshPreview(j, a) }) }), nil
}

// applyGate carries out the gate's effects: a transition is mirrored onto
// the action's console record and told as an event; a dispatch sends the
// action's commands (run them off the actor).
func (m *Manager) applyGate(j *jobState) sendList {
	var sends sendList
	for {
		ready := j.gate.Ready()
		if len(ready) == 0 {
			return sends
		}
		for _, e := range ready {
			a := j.byID[e.Action.ID]
			if a == nil {
				continue
			}
			switch e.Type {
			case gate.Record:
				m.mirror(j, a, e.Action, e.Transition)
			case gate.Dispatch:
				sends = append(sends, m.dispatchLocked(j, a, e.Action.DecidedBy)...)
			}
		}
	}
}

// mirror copies one of the gate's transitions onto an action's console
// record.
func (m *Manager) mirror(j *jobState, a *consolepb.Action, g *gate.Action, t gate.Transition) {
	a.State = string(t.State)
	a.Updated = ts(t.At)
	a.DecidedBy, a.Error = g.DecidedBy, g.Error
	if t.State == gate.Applied && g.AppliedIteration > 0 {
		a.AppliedIteration = g.AppliedIteration
	}
	a.History = append(a.History, &consolepb.ActionTransition{State: string(t.State), At: ts(t.At), By: t.By, Note: t.Note})
	msg := fmt.Sprintf("action %s %s: %s", a.Id, strings.TrimSpace(a.Kind+" "+a.Target), t.State)
	if t.Note != "" {
		msg += " (" + t.Note + ")"
	}
	m.event(j.spec.Name, "action", a.Target, msg, t.By)
}

// transition moves an action on through the gate, for the steps the
// manager takes itself (dispatching, the end of a multi-step change, a
// failure, a withdrawal). A step the gate refuses (the action was settled
// meanwhile, say by an ack deadline) changes nothing.
func (m *Manager) transition(j *jobState, a *consolepb.Action, state, who, note string) {
	now := m.now()
	var err error
	switch state {
	case ActDispatched:
		err = j.gate.Dispatched(now, a.Id, who, note)
	case ActApplied:
		err = j.gate.Finish(now, a.Id, who, a.AppliedIteration, note, nil)
	case ActFailed:
		err = j.gate.Fail(now, a.Id, who, note)
	case ActExpired:
		err = j.gate.Expire(now, a.Id, who, note)
	case ActApproved, ActRejected:
		err = j.gate.Decide(now, a.Id, state == ActApproved, who, note)
	default:
		err = fmt.Errorf("unknown action state %q", state)
	}
	if err != nil {
		m.log.Debug("action transition refused", "job", j.spec.Name, "action", a.Id, "to", state, "err", err)
	}
	m.applyGate(j)
}

// await names the nodes whose acks apply an action.
func (j *jobState) await(a *consolepb.Action, nodes []string) {
	if err := j.gate.Await(j.m.now(), a.Id, nodes); err != nil {
		j.m.log.Debug("action await refused", "job", j.spec.Name, "action", a.Id, "err", err)
	}
}

// persistAction stores the action as it is now: its record is taken on the
// job's actor, the store write made on the caller's goroutine (not the
// actor's: see persistActionHere).
func (m *Manager) persistAction(j *jobState, a *consolepb.Action) {
	var rec store.ActionRecord
	j.onActor(func() { rec = j.actionRecord(a) })
	m.putAction(j, a, rec)
}

// persistActionHere is persistAction for code running on the actor.
func (m *Manager) persistActionHere(j *jobState, a *consolepb.Action) {
	m.putAction(j, a, j.actionRecord(a))
}

// actionRecord is the durable form of one of the job's actions, with its
// gate key. The caller is the actor.
func (j *jobState) actionRecord(a *consolepb.Action) store.ActionRecord {
	rec := actionRecord(a)
	if g := j.gate.Get(a.Id); g != nil && g.Key != "" {
		rec.Params["key"] = g.Key
	}
	if mv, ok := j.moves[a.Id]; ok {
		rec.Params["host"], rec.Params["from_host"] = mv.to, mv.from
	}
	return rec
}

func (m *Manager) putAction(j *jobState, a *consolepb.Action, rec store.ActionRecord) {
	if err := m.cfg.Store.PutAction(j.spec.Name, rec); err != nil {
		m.log.Error("store action", "job", j.spec.Name, "action", a.Id, "err", err)
	}
}

// actionRecord is the durable form of an action.
func actionRecord(a *consolepb.Action) store.ActionRecord {
	params := map[string]string{"policy": a.Policy, "predicted": a.Predicted, "decided_by": a.DecidedBy, "error": a.Error}
	for w, b := range a.BatchSizes {
		params["bs/"+w] = strconv.Itoa(int(b))
	}
	for w, c := range a.Accumulation {
		params["ac/"+w] = strconv.Itoa(int(c))
	}
	for k, v := range a.Params {
		params["p/"+k] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	for k, v := range map[string]string{"rollback_of": a.RollbackOf, "cause": a.Cause, "cause_warning": a.CauseWarning} {
		if v != "" {
			params[k] = v
		}
	}
	it := a.AppliedIteration
	if it == 0 {
		it = a.TargetIteration
	}
	last := a.History[len(a.History)-1]
	rec := store.ActionRecord{ID: a.Id, Kind: a.Kind, Node: a.Target, Reason: a.Reason, Predicted: a.Predicted,
		Numbers: a.Evidence, Params: params, State: a.State, Actor: last.By, Note: last.Note, Iteration: it,
		Created: a.Created.AsTime(), Updated: a.Updated.AsTime()}
	if a.Realized != nil {
		rec.Realized, _ = protojson.Marshal(a.Realized) // a proto message with finite and NaN numbers: never fails
	}
	if a.Undo != nil {
		// What a rollback restores: an applied reversible action stays
		// undoable across a scheduler restart.
		if b, err := protojson.Marshal(a.Undo); err == nil {
			params["undo"] = string(b)
		}
	}
	return rec
}

// actionFrom rebuilds an action from its durable form.
func actionFrom(job string, r store.ActionRecord) *consolepb.Action {
	a := &consolepb.Action{Id: r.ID, Job: job, Kind: r.Kind, Target: r.Node, Reason: r.Reason, Predicted: r.Predicted,
		Evidence: r.Numbers, State: r.State, Created: ts(r.Created), Updated: ts(r.Updated),
		Policy: r.Params["policy"], DecidedBy: r.Params["decided_by"], Error: r.Params["error"],
		RollbackOf: r.Params["rollback_of"], Cause: r.Params["cause"], CauseWarning: r.Params["cause_warning"]}
	if len(r.Realized) > 0 {
		a.Realized = &timelinepb.Realized{}
		if protojson.Unmarshal(r.Realized, a.Realized) != nil {
			a.Realized = nil
		}
	}
	if u := r.Params["undo"]; u != "" {
		a.Undo = &consolepb.ActionUndo{}
		if protojson.Unmarshal([]byte(u), a.Undo) != nil {
			a.Undo = nil
		}
	}
	for k, v := range r.Params {
		switch {
		case strings.HasPrefix(k, "bs/"):
			n, _ := strconv.Atoi(v)
			if a.BatchSizes == nil {
				a.BatchSizes = map[string]int32{}
			}
			a.BatchSizes[k[3:]] = int32(n)
		case strings.HasPrefix(k, "ac/"):
			n, _ := strconv.Atoi(v)
			if a.Accumulation == nil {
				a.Accumulation = map[string]int32{}
			}
			a.Accumulation[k[3:]] = int32(n)
		case strings.HasPrefix(k, "p/"):
			f, _ := strconv.ParseFloat(v, 64)
			if a.Params == nil {
				a.Params = map[string]float64{}
			}
			a.Params[k[2:]] = f
		}
	}
	if r.State == ActApplied {
		a.AppliedIteration = r.Iteration
	} else {
		a.TargetIteration = r.Iteration
	}
	for _, h := range r.History {
		a.History = append(a.History, &consolepb.ActionTransition{State: h.State, At: ts(h.At), By: h.Actor, Note: h.Note})
	}
	return a
}

// sendList is the stream sends that code on the job's actor decided on,
// run after, off the actor.
type sendList []func()

func (s sendList) run() {
	for _, f := range s {
		f()
	}
}

// targets says whether an action involves a node.
func (j *jobState) targets(a *consolepb.Action, node string) bool {
	if j.coord.PendingTable(a.Id) != nil {
		// A table change under way: every live worker follows the table.
		n, ok := j.nodes[node]
		return ok && n.role == "worker" && !n.removed
	}
	if tableKind(a.Kind) || j.serverRestart(a) || j.moved(a) {
		// A table change reaches the workers once it is announced; its
		// servers get their own commands (servercmd.go), and a relaunched
		// server's old agent must never see its KILL_RESTART, nor a node
		// moved to another host its new agent (hosts.go).
		return false
	}
	if d := defOf(a); d != nil && d.targets != nil {
		return d.targets(j, a, node)
	}
	return a.Target == node
}

// aggregating says whether the job's servers sum gradients per version
// (bsp, drop): backup workers can then drop the slowest.
func (j *jobState) aggregating() bool {
	return j.spec.Sync.Model == "bsp" || j.spec.Sync.Model == "drop"
}

// command is the wire form of an action for one node.
func (j *jobState) command(a *consolepb.Action, node string) *agentpb.ActionCommand {
	kind := a.Kind
	table := j.coord.PendingTable(a.Id)
	if table != nil {
		// Workers see every table change (a server relaunch included) as a
		// switch to a new table.
		kind = string(policy.KindReassign)
	}
	cmd := &agentpb.ActionCommand{ActionId: a.Id, Kind: kind, Target: a.Target, BatchSizes: a.BatchSizes,
		Accumulation: a.Accumulation, TargetIteration: a.TargetIteration, Assignment: table}
	if d := defOf(a); d != nil && d.command != nil && table == nil {
		d.command(j, a, cmd)
	}
	return cmd
}

// dispatchLocked sends an approved action to the agents that apply it: a
// node action to its node; a global one (a new batch split) to every
// worker through a primary agent (broadcast.go), to be applied at one
// target iteration chosen ahead of every worker's progress (AntDT Fig. 6).
func (m *Manager) dispatchLocked(j *jobState, a *consolepb.Action, who string) sendList {
	d, err := kindOf(a.Kind)
	if err != nil {
		m.transition(j, a, ActFailed, "scheduler", err.Error())
		return nil
	}
	j.recordUndo(a)  // what a rollback restores, as it is before
	j.forgetCause(a) // a relaunched node's time split starts afresh
	return d.dispatch(m, j, a, who)
}

// sendCommand is the sends of an action's command to the named nodes'
// agents; a node whose agent is not connected gets it replayed when it
// connects.
func (j *jobState) sendCommand(a *consolepb.Action, names []string) sendList {
	var sends sendList
	for _, name := range names {
		n := j.nodes[name]
		if n == nil || n.conn == nil {
			continue
		}
		conn, cmd := n.conn, j.command(a, name)
		sends = append(sends, func() {
			conn.send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Command{Command: cmd}})
		})
	}
	return sends
}

// settleOpen ends the actions a finished job leaves open: a proposal
// expires, an action not yet applied fails, saying the job ended first.
func (m *Manager) settleOpen(j *jobState) {
	var changed []*consolepb.Action
	j.onActor(func() {
		for _, a := range j.actions {
			switch a.State {
			case ActProposed:
				m.transition(j, a, ActExpired, "scheduler", "the job ended")
			case ActApproved, ActDispatched:
				m.transition(j, a, ActFailed, "scheduler", "the job ended before it applied")
			default:
				continue
			}
			changed = append(changed, a)
		}
	})
	for _, a := range changed {
		m.persistAction(j, a)
	}
}

// failChange fails an action whose change, run on a goroutine of its own,
// went wrong: on the job's actor, then persisted.
func (m *Manager) failChange(j *jobState, a *consolepb.Action, err error) {
	j.onActor(func() { m.transition(j, a, ActFailed, "scheduler", err.Error()) })
	m.persistAction(j, a)
}

// setSync switches every server's synchronization model (FluentPS: the
// model is decided at the servers, so the switch is theirs).
func (m *Manager) setSync(j *jobState, a *consolepb.Action) {
	m.applySync(j, a, syncSettings(a))
}

// backupWorkers turns backup workers on (AntDT Table II): the servers
// complete each iteration with the first N−b gradients and drop the b
// slowest (FluentPS's drop model, wait_for = N−b); a worker whose gradient
// was dropped hands the shard back to the queue. b = 0 turns them off:
// the job's synchronisation model before they were turned on comes back.
func (m *Manager) backupWorkers(j *jobState, a *consolepb.Action) {
	d := int(a.GetBackupWorkers().GetDrop())
	var settings *pspb.SyncSettings
	j.onActor(func() {
		if j.preBackup == nil {
			s := j.spec.Sync
			j.preBackup = &s
		}
		base := *j.preBackup
		settings = &pspb.SyncSettings{Model: "drop", DropWaitFor: int32(len(j.liveWorkers()) - d), Pull: base.Pull}
		if d == 0 {
			settings = &pspb.SyncSettings{Model: base.Model, Staleness: int32(base.Staleness), Pull: base.Pull,
				PsspC: base.PSSP.C, PsspAlpha: base.PSSP.Alpha, PsspDynamic: base.PSSP.Dynamic, DropWaitFor: int32(base.Drop.WaitFor)}
			j.preBackup = nil
		}
	})
	if m.applySync(j, a, settings) {
		j.onActor(func() { j.drop = d })
	}
}

// applySync sends new synchronisation settings to every live server,
// through its agent, and reports whether they all took them.
func (m *Manager) applySync(j *jobState, a *consolepb.Action, settings *pspb.SyncSettings) bool {
	addrs, names := j.coord.ServerAddrs(), j.coord.ServerNames()
	cmds := map[string]*agentpb.ActionCommand{}
	for i, addr := range addrs {
		if addr != "" && i < len(names) {
			cmds[names[i]] = &agentpb.ActionCommand{ActionId: a.Id + "/sync", Kind: serverSetSync, Target: names[i], Sync: settings}
		}
	}
	acks, err := m.askServers(j, cmds, serverCallTimeout)
	if errors.Is(err, errClosing) {
		return false
	}
	if err != nil {
		m.failChange(j, a, err)
		return false
	}
	released := int64(0)
	for _, ack := range acks {
		released += ack.Released
	}
	j.onActor(func() {
		j.spec.Sync = spec.Sync{Model: settings.Model, Staleness: int(settings.Staleness), Pull: settings.Pull,
			PSSP: spec.PSSP{C: settings.PsspC, Alpha: settings.PsspAlpha, Dynamic: settings.PsspDynamic},
			Drop: spec.Drop{WaitFor: int(settings.DropWaitFor)}}
		// Servers that join later (ADD_SERVER, a relaunch) start with it.
		j.coord.SetSpecYAML(j.spec.YAML())
		j.invalidateViews()
		m.transition(j, a, ActApplied, "scheduler", fmt.Sprintf("now %s; %d delayed pulls answered", syncName(j.spec), released))
	})
	m.persistAction(j, a)
	return true
}

// serverRestart says whether an action relaunches a server.
func (j *jobState) serverRestart(a *consolepb.Action) bool {
	d, n := defOf(a), j.nodes[a.Target]
	return d != nil && d.relaunches && n != nil && n.role == "server"
}

// aheadIteration is the iteration a global action (a batch split, a table
// change) is applied at: ahead of where the fastest live worker is now —
// its last report (sent every few iterations) plus the iterations its pace
// gives since — by enough for the command to reach every agent: half a
// second at that pace, at least 5, plus the staleness bound.
func (j *jobState) aheadIteration(now time.Time) int64 {
	var est int64
	var rate float64
	for _, w := range j.liveWorkers() {
		p := j.nodes[w].progress()
		e := p.iteration
		if p.rate > 0 && now.After(p.reportedAt) {
			e += int64(math.Ceil(p.rate * now.Sub(p.reportedAt).Seconds()))
		}
		est, rate = max(est, e), max(rate, p.rate)
	}
	// Every worker has passed the last table change, whatever their last
	// reports said: a change right after another must come after it (a
	// REMOVE_SERVER a second after a REASSIGN was once placed at the
	// REASSIGN's own iteration, which the workers had passed, and the job
	// hung).
	est = max(est, j.coord.TableAt())
	margin := int64(5)
	if rate > 0 {
		margin = max(margin, int64(math.Ceil(0.5*rate)))
	} else if bpt := j.snap.MeanBPT.Seconds(); bpt > 0 {
		margin = max(margin, int64(math.Ceil(0.5/bpt)))
	}
	return est + margin + int64(j.spec.Sync.Staleness)
}

// acked records an agent's answer to an action. A table change's acks go
// to its sequence (scheduler/change), which waits for every worker's
// switch; every other action's acks go to the gate, which applies it once every node it awaits has
// acked.
func (m *Manager) acked(j *jobState, node string, ack *agentpb.ActionAck) {
	if j.serverAcked(node, ack) {
		// A server's command (servercmd.go): its caller waits for it.
		return
	}
	a, ok := j.byID[ack.ActionId]
	if !ok || (a.State != ActDispatched) {
		return
	}
	if n := j.nodes[node]; (tableKind(a.Kind) || j.serverRestart(a)) && (n == nil || n.role != "worker") {
		// A table change hears servers through their own commands only.
		return
	}
	if tableKind(a.Kind) || j.serverRestart(a) {
		// A table change's sequence hears its workers' switches, here on
		// the actor: every ack reaches it.
		a.AppliedIteration = max(a.AppliedIteration, ack.AppliedIteration)
		if r := j.tables[a.Id]; r != nil {
			now := m.now()
			r.feed(func(c *change.Table) {
				if ack.Error != "" {
					c.WorkerFailed(now, node, ack.Error)
				} else {
					c.Switched(now, node)
				}
			})
		}
		return
	}
	d := defOf(a)
	it := ack.AppliedIteration
	if d != nil && d.ackAtNode {
		if n := j.nodes[node]; n != nil {
			it = n.progress().iteration // a node action: where the node is now
		}
	}
	if _, err := j.gate.Ack(m.now(), a.Id, node, it, ack.Error); err != nil {
		m.log.Debug("ack refused", "job", j.spec.Name, "action", a.Id, "node", node, "err", err)
	}
	m.applyGate(j)
	if a.State == ActApplied && d != nil && d.applied != nil {
		d.applied(m, j, a)
	}
	m.persistActionHere(j, a)
}

// runPolicies asks the active policies for proposals and passes them
// through the gate: de-duplicated on each policy's own key, then dispatched
// (auto) or queued for an operator (approve). Proposals that wait too long
// expire, and dispatched actions whose acks do not come fail.
//
// The policies themselves run off the job's actor, on a copy of
// what they read (policyInputs, frozen on the actor): evaluating them over thousands of workers
// must not hold up the job's reports. The gate then takes their proposals
// against the job as it is by then.
func (j *jobState) runPolicies(snap monitor.Snapshot, now time.Time) {
	m := j.m
	var changed []*consolepb.Action
	// The policies' inputs are frozen on the actor (O(workers), once a
	// tick); the policies propose from them off the actor.
	var in *policyInputs
	var frames []*timeline.Frame // the timeline's, for the policies' TimelineBPT
	j.onActor(func() {
		before := len(j.actions)
		changed = j.changedSince(now, func() { j.gate.Tick(now) })
		changed = append(changed, j.actions[before:]...)
		measured := j.measuredThroughput(snap.Config.LTrans)
		if j.state == StateRunning {
			in = j.policyInputs()
			if j.hist.rec != nil {
				frames = j.hist.rec.Frames()
			}
			if measured > 0 { // the judge's baseline, once the timeline has it
				in.job.Throughput = measured
			}
		}
	})
	if in != nil {
		in.thaw()
		sortWorkers(in.job.Workers)
		// Made when a policy reads it (about a straggler), once a tick.
		window := snap.Config.LPer
		in.job.TimelineBPTOf = sync.OnceValue(func() map[string]float64 { return timelineBPT(frames, window) })
	}
	var proposals []policy.Action
	if in != nil {
		proposals = in.propose(snap)
	}
	var sends sendList
	j.onActor(func() {
		if j.state != StateRunning {
			proposals = nil // it ended meanwhile
		}
		before := len(j.actions)
		m.proposeLocked(j, proposals, now, &sends)
		changed = append(changed, j.actions[before:]...)
		if in != nil && j.state == StateRunning {
			changed = append(changed, j.changedSince(now, func() { in.withdrawStale(j.gate, proposals, now) })...)
		}
	})
	for _, a := range changed {
		m.persistAction(j, a)
	}
	sends.run()
}

// proposeLocked passes the policies' proposals through the gate, adding
// the sends of those dispatched to sends. It runs on the job's actor.
func (m *Manager) proposeLocked(j *jobState, proposals []policy.Action, now time.Time, sends *sendList) {
	var why map[string]cause.Cause // the nodes' causes, once there is a proposal
	for _, p := range proposals {
		if err := supported(string(p.Kind)); err != nil {
			continue
		}
		a := fromProposal(p)
		if why == nil {
			why = j.causeInputs().causes()
		}
		j.citeCause(a, why)
		key := p.Key
		if key == "" {
			key = p.Policy + "/" + a.Kind + "/" + a.Target
		}
		ps := j.policies[p.Policy]
		if w := j.gate.Waiting(key); w != nil && ps != nil && ps.Mode == ModeAuto {
			// Proposed while the policy was in approve mode and proposed
			// again now that it is in auto: the policy decides it, as an
			// operator's switch to auto asked.
			if pa := j.byID[w.ID]; pa != nil && j.validate(pa) == nil &&
				j.gate.Decide(now, w.ID, true, "policy:"+p.Policy, "auto mode: its policy proposed it again") == nil {
				*sends = append(*sends, m.applyGate(j)...)
				*sends = append(*sends, func() { m.persistAction(j, pa) })
			}
			continue
		}
		if j.gate.Recent(key, now, j.mon.Config().LPer) {
			continue
		}
		if err := j.validate(a); err != nil {
			continue
		}
		if ps == nil || ps.Mode != ModeAuto && ps.Mode != ModeApprove {
			continue // turned off while it ran
		}
		s, err := m.addLocked(j, a, key, gate.Mode(ps.Mode), "policy:"+p.Policy)
		if err != nil {
			continue
		}
		if a.CauseWarning != "" {
			m.event(j.spec.Name, "warning", a.Target, a.CauseWarning, "policy:"+p.Policy)
		}
		*sends = append(*sends, s...)
	}
}

// changedSince runs f (a gate event that may settle actions on its own,
// such as a tick) with the gate's effects carried out, and returns the
// actions it changed, to persist.
func (j *jobState) changedSince(now time.Time, f func()) []*consolepb.Action {
	f()
	var changed []*consolepb.Action
	for {
		ready := j.gate.Ready()
		if len(ready) == 0 {
			return changed
		}
		for _, e := range ready {
			if a := j.byID[e.Action.ID]; a != nil && e.Type == gate.Record {
				j.m.mirror(j, a, e.Action, e.Transition)
				changed = append(changed, a)
			}
		}
	}
}

// policyInputs is what the job's policies read besides the Monitor's
// snapshot, frozen on the job's actor so that they run off it.
type policyInputs struct {
	job policy.Job
	// nodes make job's per-node maps, off the actor (thaw); nil once
	// they are made.
	nodes    *frozenPolicyJob
	policies map[string]policySetting // modes and parameters (copies)
	// The job's random source: only an exploring policy (PSLD) draws
	// from it, and only on the job's tick.
	rng *rand.Rand
}

// policyInputs copies what the policies read, its job's per-node maps
// not yet made and its Workers in no order (runPolicies thaws and sorts
// them off the actor). The caller is the job's
// actor; it writes nothing.
func (j *jobState) policyInputs() *policyInputs {
	f := j.freezePolicyJob()
	in := &policyInputs{job: f.job0, nodes: &f, policies: map[string]policySetting{}, rng: j.rng}
	in.job.Aggregating = j.aggregating()
	for name, p := range j.policies {
		in.policies[name] = policySetting{Mode: p.Mode, Params: maps.Clone(p.Params)}
	}
	if on := in.policies[policy.NamePSLD].Mode; on == ModeAuto || on == ModeApprove {
		names, addrs := j.coord.ServerNames(), j.coord.ServerAddrs()
		for i, n := range names {
			if addrs[i] != "" {
				in.job.LiveServers = append(in.job.LiveServers, n)
				in.job.ServerIndex = append(in.job.ServerIndex, nodeIndex(n))
			}
		}
		t := j.coord.Table()
		for i, b := range t.Blocks {
			in.job.Blocks = append(in.job.Blocks, policy.BlockInfo{ID: b.ID, Bytes: b.Bytes(), Server: names[t.ServerOf[i]]})
		}
	}
	return in
}

// thaw makes the job's per-node maps from the nodes frozen on the actor.
// The caller is not the actor.
func (in *policyInputs) thaw() {
	if in.nodes != nil {
		in.nodes.fill(&in.job)
		in.nodes = nil
	}
}

// withdrawStale expires the pending proposals of the policies that ran
// this round but did not propose them again: under their current
// parameters and the latest measurements the evidence no longer holds (a
// transient straggler recovered; λ was raised). An exploring policy
// (PSLD) is left out: it draws a new plan each round by design.
func (in *policyInputs) withdrawStale(g *gate.Gate, proposals []policy.Action, now time.Time) {
	keys := map[string]bool{}
	for _, p := range proposals {
		key := p.Key
		if key == "" {
			key = p.Policy + "/" + string(p.Kind) + "/" + p.Target
		}
		keys[key] = true
	}
	for _, p := range policy.All() {
		name := p.Decl().Name
		if !in.on(name) || policy.Explores(p) {
			continue
		}
		g.Withdraw(now, name, keys, fmt.Sprintf("withdrawn: %s no longer proposes it under its current parameters (%s) and the latest measurements",
			name, formatParams(in.policies[name].Params)))
	}
}

// on says whether a policy proposes (auto or approve).
func (in *policyInputs) on(name string) bool {
	m := in.policies[name].Mode
	return m == ModeAuto || m == ModeApprove
}

// propose asks every registered policy that is on (auto or approve) for
// its proposals, in registry order, each with its own parameters.
func (in *policyInputs) propose(snap monitor.Snapshot) []policy.Action {
	var out []policy.Action
	for _, p := range policy.All() {
		name := p.Decl().Name
		if in.on(name) {
			out = append(out, p.Propose(policy.Snapshot{Monitor: snap, Job: in.job, Params: in.policies[name].Params}, in.rng)...)
		}
	}
	return out
}

func fromProposal(p policy.Action) *consolepb.Action {
	a := &consolepb.Action{Kind: string(p.Kind), Target: p.Target, Policy: p.Policy, Reason: p.Reason,
		Predicted: p.Predicted, Evidence: maps.Clone(p.Evidence)}
	// The numbers the closed loop judges the action by (history.go).
	if p.PredictedThroughput > 0 || p.PredictedBPT > 0 {
		if a.Evidence == nil {
			a.Evidence = map[string]float64{}
		}
		if p.PredictedThroughput > 0 {
			a.Evidence["predicted_throughput"] = p.PredictedThroughput
		}
		if _, ok := a.Evidence["predicted_bpt_s"]; !ok && p.PredictedBPT > 0 {
			a.Evidence["predicted_bpt_s"] = p.PredictedBPT.Seconds()
		}
	}
	if len(p.BatchSizes) > 0 {
		a.BatchSizes = map[string]int32{}
		for w, b := range p.BatchSizes {
			a.BatchSizes[w] = int32(b)
		}
	}
	for _, r := range p.Assignment {
		a.Assignment = append(a.Assignment, int32(r))
	}
	fromProposalParams(p, a)
	return a
}

// gateRecord is the gate's record of an action read back from durable
// state.
func gateRecord(a *consolepb.Action, key string) gate.Action {
	if key == "" && a.Policy != "operator" {
		key = a.Policy + "/" + a.Kind + "/" + a.Target
	}
	g := gate.Action{ID: a.Id, Key: key, Policy: a.Policy, Kind: a.Kind, Target: a.Target, State: gate.State(a.State),
		Created: a.Created.AsTime(), Updated: a.Updated.AsTime(), DecidedBy: a.DecidedBy, Error: a.Error,
		AppliedIteration: a.AppliedIteration}
	for _, h := range a.History {
		g.History = append(g.History, gate.Transition{State: gate.State(h.State), At: h.At.AsTime(), By: h.By, Note: h.Note})
	}
	return g
}

// allreduceRefuses says why an action does not apply to an allreduce job
// (cluster.exchange ring or rat): it has no parameter servers (block
// tables, server changes, barrier drops). ADJUST_BS (with accumulation)
// and ADJUST_LR apply as in PS jobs; adding, removing and relaunching
// workers too, the workers' ring or trees being rebuilt at an iteration
// boundary (runtime/worker's reducer).
func allreduceRefuses(s *spec.Spec, kind string) error {
	ex := s.Cluster.Exchange
	if ex != spec.ExchangeRing && ex != spec.ExchangeRAT {
		return nil
	}
	d, err := kindOf(kind)
	switch {
	case err != nil:
		return status.Errorf(codes.FailedPrecondition, "%s is not supported for job %s (exchange %s)", kind, s.Name, ex)
	case d.allreduce:
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s does not apply to job %s: exchange %s has no parameter servers (needs exchange ps)", kind, s.Name, ex)
}
