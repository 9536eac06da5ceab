package manager

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/server"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
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

// policySetting is one policy's mode and parameters for one job.
type policySetting struct {
	Mode   string             `json:"mode"`
	Params map[string]float64 `json:"params"`
}

// policyNames lists the policies in display order.
var policyNames = []string{policy.NameAntDTND, policy.NameAntDTDD, policy.NameBackupWorkers, policy.NameAdjustLR, policy.NamePSLD}

func defaultPolicies(s *spec.Spec) map[string]*policySetting {
	p := s.Policies
	return map[string]*policySetting{
		policy.NameAntDTND: {Mode: p.AntDTND.Mode, Params: map[string]float64{"lambda": p.AntDTND.Lambda,
			"window_transient_s": p.AntDTND.WindowTransient.Seconds(), "window_persistent_s": p.AntDTND.WindowPersistent.Seconds()}},
		policy.NameAntDTDD: {Mode: p.AntDTDD.Mode, Params: map[string]float64{"min_accumulation": float64(p.AntDTDD.MinAccumulation),
			"max_accumulation": float64(p.AntDTDD.MaxAccumulation), "min_batch": float64(p.AntDTDD.MinBatch),
			"max_batch": float64(p.AntDTDD.MaxBatch)}},
		policy.NameBackupWorkers: {Mode: p.BackupWorkers.Mode, Params: map[string]float64{"drop": float64(p.BackupWorkers.Drop)}},
		policy.NameAdjustLR:      {Mode: p.AdjustLR.Mode, Params: map[string]float64{}},
		policy.NamePSLD: {Mode: p.PSLD.Mode, Params: map[string]float64{"epsilon": p.PSLD.Epsilon,
			"theta1_over_theta0": p.PSLD.Theta1OverTheta0, "scale_threshold": p.PSLD.ScaleThreshold,
			"variance_threshold": p.PSLD.VarianceThreshold, "strawman": b2f(p.PSLD.Strawman)}},
	}
}

// b2f is 1 for true: policy parameters are numbers.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// supported says whether the runtime can apply an action kind today.
func supported(kind string) error {
	switch kind {
	case string(policy.KindKillRestart), string(policy.KindAdjustBS), string(policy.KindReassign),
		string(policy.KindAddServer), string(policy.KindRemoveServer), string(policy.KindSetSync),
		string(policy.KindBackupWorkers), string(policy.KindAdjustLR), string(policy.KindAddWorker),
		string(policy.KindRemoveWorker):
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "unknown action kind %q", kind)
}

func (m *Manager) job(name string) (*jobState, error) {
	j, ok := m.jobs[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no job %q", name)
	}
	return j, nil
}

// Trigger runs an operator's action on a job.
func (m *Manager) Trigger(job string, a *kelpiepb.Action, who string) (string, error) {
	if a == nil {
		return "", status.Error(codes.InvalidArgument, "trigger: no action")
	}
	if err := supported(a.Kind); err != nil {
		return "", err
	}
	m.mu.Lock()
	j, err := m.job(job)
	if err != nil {
		m.mu.Unlock()
		return "", err
	}
	if j.over() {
		m.mu.Unlock()
		return "", status.Errorf(codes.FailedPrecondition, "job %s is %s", job, j.state)
	}
	act := &kelpiepb.Action{Kind: a.Kind, Target: a.Target, Policy: "operator", Reason: a.Reason,
		BatchSizes: a.BatchSizes, Accumulation: a.Accumulation, Params: a.Params, Assignment: a.Assignment, SyncModel: a.SyncModel}
	if act.Reason == "" {
		act.Reason = "triggered by " + who
	}
	if err := j.validate(act); err != nil {
		m.mu.Unlock()
		return "", err
	}
	m.addLocked(j, act, ActApproved, who, "")
	sends := m.dispatchLocked(j, act, who)
	m.mu.Unlock()
	m.persistAction(j, act)
	sends.run()
	return act.Id, nil
}

// Decide approves or rejects a proposed action.
func (m *Manager) Decide(job, id string, approve bool, who, note string) error {
	m.mu.Lock()
	j, err := m.job(job)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	a, ok := j.byID[id]
	if !ok {
		m.mu.Unlock()
		return status.Errorf(codes.NotFound, "job %s has no action %s", job, id)
	}
	if a.State != ActProposed {
		m.mu.Unlock()
		return status.Errorf(codes.FailedPrecondition, "action %s is %s, not proposed", id, a.State)
	}
	var sends sendList
	if approve {
		if err := j.validate(a); err != nil {
			m.transition(j, a, ActFailed, who, err.Error())
			m.mu.Unlock()
			m.persistAction(j, a)
			return err
		}
		m.transition(j, a, ActApproved, who, note)
		sends = m.dispatchLocked(j, a, who)
	} else {
		m.transition(j, a, ActRejected, who, note)
	}
	m.mu.Unlock()
	m.persistAction(j, a)
	sends.run()
	return nil
}

// SetPolicy changes a policy's mode and parameters live; the next decision
// uses them.
func (m *Manager) SetPolicy(job, name, mode string, params map[string]float64, who string) error {
	m.mu.Lock()
	j, err := m.job(job)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	p, ok := j.policies[name]
	if !ok {
		m.mu.Unlock()
		return status.Errorf(codes.InvalidArgument, "unknown policy %q (one of %s)", name, strings.Join(policyNames, ", "))
	}
	switch mode {
	case "", ModeAuto, ModeApprove, ModeOff:
	default:
		m.mu.Unlock()
		return status.Errorf(codes.InvalidArgument, "policy mode must be auto, approve or off, not %q", mode)
	}
	for k, v := range params {
		if _, known := p.Params[k]; !known {
			m.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "policy %s has no parameter %q", name, k)
		}
		if math.IsNaN(v) || v < 0 {
			m.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "policy %s parameter %s must be ≥ 0, got %v", name, k, v)
		}
	}
	if mode != "" {
		p.Mode = mode
	}
	for k, v := range params {
		p.Params[k] = v
	}
	if name == policy.NameAntDTND {
		cfg := j.mon.Config()
		cfg.Lambda = p.Params["lambda"]
		cfg.LTrans = time.Duration(p.Params["window_transient_s"] * float64(time.Second))
		cfg.LPer = time.Duration(p.Params["window_persistent_s"] * float64(time.Second))
		if err := cfg.Validate(); err != nil {
			m.mu.Unlock()
			return status.Errorf(codes.InvalidArgument, "policy %s: %v", name, err)
		}
		j.mon.SetConfig(cfg)
	}
	m.eventLocked(job, "policy", "", fmt.Sprintf("policy %s set to %s %s", name, p.Mode, formatParams(p.Params)), who)
	b := j.policiesJSON()
	m.mu.Unlock()
	return m.cfg.Store.PutPolicies(job, b)
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

// validate checks an action against the job as it is now.
func (j *jobState) validate(a *kelpiepb.Action) error {
	if err := supported(a.Kind); err != nil {
		return err
	}
	if tableKind(a.Kind) || a.Kind == string(policy.KindKillRestart) || membershipKind(a.Kind) {
		// One table change at a time, and no relaunch during one: a worker
		// that restarts mid-change would not know which table to follow.
		// Nor a table change while the set of workers changes: every live
		// worker must follow it.
		for _, other := range j.actions {
			if other != a && (tableKind(other.Kind) || membershipKind(other.Kind)) && (other.State == ActApproved || other.State == ActDispatched) {
				return status.Errorf(codes.FailedPrecondition, "%s: table change %s is still under way", a.Kind, other.Id)
			}
		}
	}
	if tableKind(a.Kind) {
		return j.validateTable(a)
	}
	switch a.Kind {
	case string(policy.KindAddWorker), string(policy.KindRemoveWorker):
		return j.validateWorkerChange(a)
	case string(policy.KindAdjustLR):
		return j.validateLR(a)
	case string(policy.KindBackupWorkers):
		d, live := a.Params["drop"], len(j.liveWorkers())
		if d < 0 || d != float64(int(d)) || int(d) >= live {
			return status.Errorf(codes.InvalidArgument, "BACKUP_WORKERS: params.drop must be a whole number in [0, %d), got %g", live, d)
		}
		if d > 0 && !j.aggregating() {
			return status.Errorf(codes.FailedPrecondition, "BACKUP_WORKERS: job %s runs %s; backup workers drop gradients from a synchronous barrier (bsp)",
				j.spec.Name, syncName(j.spec))
		}
	case string(policy.KindSetSync):
		if err := server.SyncFrom(syncSettings(a)).Validate(); err != nil {
			return status.Errorf(codes.InvalidArgument, "SET_SYNC: %v", err)
		}
	case string(policy.KindKillRestart):
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
			return j.validateTable(&kelpiepb.Action{Kind: string(policy.KindRemoveServer), Target: a.Target})
		}
	case string(policy.KindAdjustBS):
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
	}
	return nil
}

// addLocked records a new action.
func (m *Manager) addLocked(j *jobState, a *kelpiepb.Action, state, who, note string) {
	m.nextID++
	now := m.now()
	a.Id = fmt.Sprintf("a-%d", m.nextID)
	a.Job = j.spec.Name
	a.Created = ts(now)
	a.State = ""
	j.actions = append(j.actions, a)
	j.byID[a.Id] = a
	m.transition(j, a, state, who, note)
}

func (m *Manager) transition(j *jobState, a *kelpiepb.Action, state, who, note string) {
	now := m.now()
	a.State = state
	a.Updated = ts(now)
	if state == ActApproved || state == ActRejected {
		a.DecidedBy = who
	}
	if state == ActFailed {
		a.Error = note
	}
	a.History = append(a.History, &kelpiepb.ActionTransition{State: state, At: ts(now), By: who, Note: note})
	msg := fmt.Sprintf("action %s %s %s: %s", a.Id, a.Kind, a.Target, state)
	if note != "" {
		msg += " (" + note + ")"
	}
	m.eventLocked(j.spec.Name, "action", a.Target, msg, who)
}

func (m *Manager) persistAction(j *jobState, a *kelpiepb.Action) {
	m.mu.Lock()
	rec := actionRecord(a)
	m.mu.Unlock()
	if err := m.cfg.Store.PutAction(j.spec.Name, rec); err != nil {
		m.log.Error("store action", "job", j.spec.Name, "action", a.Id, "err", err)
	}
}

// actionRecord is the durable form of an action.
func actionRecord(a *kelpiepb.Action) store.ActionRecord {
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
	it := a.AppliedIteration
	if it == 0 {
		it = a.TargetIteration
	}
	last := a.History[len(a.History)-1]
	return store.ActionRecord{ID: a.Id, Kind: a.Kind, Node: a.Target, Reason: a.Reason, Predicted: a.Predicted,
		Numbers: a.Evidence, Params: params, State: a.State, Actor: last.By, Note: last.Note, Iteration: it,
		Created: a.Created.AsTime(), Updated: a.Updated.AsTime()}
}

// actionFrom rebuilds an action from its durable form.
func actionFrom(job string, r store.ActionRecord) *kelpiepb.Action {
	a := &kelpiepb.Action{Id: r.ID, Job: job, Kind: r.Kind, Target: r.Node, Reason: r.Reason, Predicted: r.Predicted,
		Evidence: r.Numbers, State: r.State, Created: ts(r.Created), Updated: ts(r.Updated),
		Policy: r.Params["policy"], DecidedBy: r.Params["decided_by"], Error: r.Params["error"]}
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
		a.History = append(a.History, &kelpiepb.ActionTransition{State: h.State, At: ts(h.At), By: h.Actor, Note: h.Note})
	}
	return a
}

// sendList is the stream sends that a locked section decided on, run after
// the lock is released.
type sendList []func()

func (s sendList) run() {
	for _, f := range s {
		f()
	}
}

// targets says whether an action involves a node.
func (j *jobState) targets(a *kelpiepb.Action, node string) bool {
	switch {
	case resplitKind(a.Kind) && len(a.BatchSizes) == 0:
		return false // an ADD_WORKER whose worker has not joined yet: no split to send
	case resplitKind(a.Kind) || j.tables[a.Id] != nil:
		n, ok := j.nodes[node]
		return ok && n.role == "worker" && !n.removed
	case a.Kind == string(policy.KindBackupWorkers) || a.Kind == string(policy.KindSetSync):
		return false // the servers apply them
	case a.Kind == string(policy.KindAdjustLR):
		_, ok := lrScales(a)[node]
		return ok
	}
	return a.Target == node
}

// membershipKind says whether an action changes the set of workers.
func membershipKind(kind string) bool {
	return kind == string(policy.KindAddWorker) || kind == string(policy.KindRemoveWorker)
}

// resplitKind says whether an action kind re-splits the global batch among
// the workers (every live worker applies it at one iteration).
func resplitKind(kind string) bool {
	return kind == string(policy.KindAdjustBS) || kind == string(policy.KindAddWorker) || kind == string(policy.KindRemoveWorker)
}

// aggregating says whether the job's servers sum gradients per version
// (bsp, drop): backup workers can then drop the slowest.
func (j *jobState) aggregating() bool {
	return j.spec.Sync.Model == "bsp" || j.spec.Sync.Model == "drop"
}

// command is the wire form of an action for one node.
func (j *jobState) command(a *kelpiepb.Action, node string) *kelpiepb.ActionCommand {
	kind := a.Kind
	if j.tables[a.Id] != nil {
		// Workers see every table change (a server relaunch included) as a
		// switch to a new table.
		kind = string(policy.KindReassign)
	}
	cmd := &kelpiepb.ActionCommand{ActionId: a.Id, Kind: kind, Target: a.Target, BatchSizes: a.BatchSizes,
		Accumulation: a.Accumulation, TargetIteration: a.TargetIteration, Assignment: j.tables[a.Id]}
	if kind == string(policy.KindAdjustLR) {
		cmd.LrScale = lrScales(a)
	}
	return cmd
}

// dispatchLocked sends an approved action to the agents that apply it: a
// node action to its node; a global one (a new batch split) to every
// worker, to be applied at one target iteration chosen ahead of every
// worker's progress (AntDT Fig. 6: the scheduler, which holds a stream to
// every agent, plays the primary agent's broadcast).
func (m *Manager) dispatchLocked(j *jobState, a *kelpiepb.Action, who string) sendList {
	if tableKind(a.Kind) || j.serverRestart(a) {
		m.transition(j, a, ActDispatched, who, "changing the block table")
		go m.retable(j, a)
		return nil
	}
	switch a.Kind {
	case string(policy.KindSetSync):
		m.transition(j, a, ActDispatched, who, "to every server")
		go m.setSync(j, a)
		return nil
	case string(policy.KindBackupWorkers):
		m.transition(j, a, ActDispatched, who, "to every server")
		go m.backupWorkers(j, a)
		return nil
	case string(policy.KindAddWorker):
		m.transition(j, a, ActDispatched, who, "launching a worker")
		go m.addWorker(j, a)
		return nil
	case string(policy.KindRemoveWorker):
		return m.removeWorker(j, a, who)
	case string(policy.KindAdjustLR):
		return m.dispatchLR(j, a, who)
	case string(policy.KindAdjustBS):
		sends := m.splitCommands(j, a)
		m.transition(j, a, ActDispatched, who, fmt.Sprintf("to %d workers, at iteration %d", len(j.liveWorkers()), a.TargetIteration))
		return sends
	}
	j.mon.Forget(a.Target)
	m.transition(j, a, ActDispatched, who, "to 1 node(s)")
	return j.sendCommand(a, []string{a.Target})
}

// sendCommand is the sends of an action's command to the named nodes'
// agents; a node whose agent is not connected gets it replayed when it
// connects.
func (j *jobState) sendCommand(a *kelpiepb.Action, names []string) sendList {
	var sends sendList
	for _, name := range names {
		n := j.nodes[name]
		if n == nil || n.conn == nil {
			continue
		}
		conn, cmd := n.conn, j.command(a, name)
		sends = append(sends, func() {
			conn.send(&kelpiepb.SchedulerMessage{Body: &kelpiepb.SchedulerMessage_Command{Command: cmd}})
		})
	}
	return sends
}

// settleOpen ends the actions a finished job leaves open: a proposal
// expires, an action not yet applied fails, saying the job ended first.
func (m *Manager) settleOpen(j *jobState) {
	m.mu.Lock()
	var changed []*kelpiepb.Action
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
	m.mu.Unlock()
	for _, a := range changed {
		m.persistAction(j, a)
	}
}

// syncSettings reads a SET_SYNC action's settings: sync_model, and params
// staleness, pssp_c, pssp_alpha, pssp_dynamic (1), drop_wait_for and
// soft_barrier (1 for the soft barrier, else the lazy pull buffer).
func syncSettings(a *kelpiepb.Action) *kelpiepb.SyncSettings {
	p := a.Params
	pull := "lazy"
	if p["soft_barrier"] == 1 {
		pull = "soft-barrier"
	}
	return &kelpiepb.SyncSettings{Model: a.SyncModel, Staleness: int32(p["staleness"]), Pull: pull, PsspC: p["pssp_c"],
		PsspAlpha: p["pssp_alpha"], PsspDynamic: p["pssp_dynamic"] == 1, DropWaitFor: int32(p["drop_wait_for"])}
}

// setSync switches every server's synchronization model (FluentPS: the
// model is decided at the servers, so the switch is theirs).
func (m *Manager) setSync(j *jobState, a *kelpiepb.Action) {
	m.applySync(j, a, syncSettings(a))
}

// backupWorkers turns backup workers on (AntDT Table II): the servers
// complete each iteration with the first N−b gradients and drop the b
// slowest (FluentPS's drop model, wait_for = N−b); a worker whose gradient
// was dropped hands the shard back to the queue. b = 0 turns them off:
// the job's synchronisation model before they were turned on comes back.
func (m *Manager) backupWorkers(j *jobState, a *kelpiepb.Action) {
	m.mu.Lock()
	d := int(a.Params["drop"])
	if j.preBackup == nil {
		s := j.spec.Sync
		j.preBackup = &s
	}
	base := *j.preBackup
	settings := &kelpiepb.SyncSettings{Model: "drop", DropWaitFor: int32(len(j.liveWorkers()) - d), Pull: base.Pull}
	if d == 0 {
		settings = &kelpiepb.SyncSettings{Model: base.Model, Staleness: int32(base.Staleness), Pull: base.Pull,
			PsspC: base.PSSP.C, PsspAlpha: base.PSSP.Alpha, PsspDynamic: base.PSSP.Dynamic, DropWaitFor: int32(base.Drop.WaitFor)}
		j.preBackup = nil
	}
	m.mu.Unlock()
	if m.applySync(j, a, settings) {
		m.mu.Lock()
		j.drop = d
		m.mu.Unlock()
	}
}

// applySync sends new synchronisation settings to every live server and
// reports whether they all took them.
func (m *Manager) applySync(j *jobState, a *kelpiepb.Action, settings *kelpiepb.SyncSettings) bool {
	released := int64(0)
	for i, addr := range j.coord.ServerAddrs() {
		if addr == "" {
			continue
		}
		c, closeFn, err := dialPS(addr)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var r *kelpiepb.SetSyncResponse
			r, err = c.SetSync(ctx, settings)
			cancel()
			closeFn()
			if err == nil {
				released += r.Released
			}
		}
		if err != nil {
			m.mu.Lock()
			m.transition(j, a, ActFailed, "scheduler", fmt.Sprintf("server %s: %v", j.coord.ServerNames()[i], err))
			m.mu.Unlock()
			m.persistAction(j, a)
			return false
		}
	}
	m.mu.Lock()
	j.spec.Sync = spec.Sync{Model: settings.Model, Staleness: int(settings.Staleness), Pull: settings.Pull,
		PSSP: spec.PSSP{C: settings.PsspC, Alpha: settings.PsspAlpha, Dynamic: settings.PsspDynamic},
		Drop: spec.Drop{WaitFor: int(settings.DropWaitFor)}}
	// Servers that join later (ADD_SERVER, a relaunch) start with it.
	j.coord.SetSpecYAML(j.spec.YAML())
	j.views = nil
	m.transition(j, a, ActApplied, "scheduler", fmt.Sprintf("now %s; %d delayed pulls answered", syncName(j.spec), released))
	m.mu.Unlock()
	m.persistAction(j, a)
	return true
}

// serverRestart says whether an action relaunches a server.
func (j *jobState) serverRestart(a *kelpiepb.Action) bool {
	n := j.nodes[a.Target]
	return a.Kind == string(policy.KindKillRestart) && n != nil && n.role == "server"
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
		n := j.nodes[w]
		e := n.iteration
		if n.rate > 0 && now.After(n.reportedAt) {
			e += int64(math.Ceil(n.rate * now.Sub(n.reportedAt).Seconds()))
		}
		est, rate = max(est, e), max(rate, n.rate)
	}
	margin := int64(5)
	if rate > 0 {
		margin = max(margin, int64(math.Ceil(0.5*rate)))
	} else if bpt := j.snap.MeanBPT.Seconds(); bpt > 0 {
		margin = max(margin, int64(math.Ceil(0.5/bpt)))
	}
	return est + margin + int64(j.spec.Sync.Staleness)
}

// acked records an agent's answer to an action.
func (m *Manager) acked(j *jobState, node string, ack *kelpiepb.ActionAck) {
	m.mu.Lock()
	a, ok := j.byID[ack.ActionId]
	if !ok || (a.State != ActDispatched) {
		m.mu.Unlock()
		return
	}
	switch {
	case ack.Error != "":
		m.transition(j, a, ActFailed, node, ack.Error)
	case tableKind(a.Kind) || j.serverRestart(a):
		a.AppliedIteration = max(a.AppliedIteration, ack.AppliedIteration)
		if j.allAcked(a.Id, node, ack.AppliedIteration) {
			if ch := j.tableDone[a.Id]; ch != nil {
				close(ch)
				delete(j.tableDone, a.Id)
			}
		}
		m.mu.Unlock()
		return
	case resplitKind(a.Kind):
		if !j.allAcked(a.Id, node, ack.AppliedIteration) {
			m.mu.Unlock()
			return
		}
		a.AppliedIteration = ack.AppliedIteration
		m.applySplit(j, a)
		m.transition(j, a, ActApplied, node, fmt.Sprintf("at iteration %d", a.AppliedIteration))
	case a.Kind == string(policy.KindAdjustLR):
		if !j.allAcked(a.Id, node, ack.AppliedIteration) {
			m.mu.Unlock()
			return
		}
		a.AppliedIteration = ack.AppliedIteration
		if j.lrScale == nil {
			j.lrScale = map[string]float64{}
		}
		for w, f := range lrScales(a) {
			j.lrScale[w] = f
		}
		m.transition(j, a, ActApplied, node, fmt.Sprintf("at iteration %d", a.AppliedIteration))
	default:
		a.AppliedIteration = j.nodes[node].iteration
		m.transition(j, a, ActApplied, node, "")
	}
	m.mu.Unlock()
	m.persistAction(j, a)
}

// allAcked records one worker's ack of a global action and reports whether
// every worker has now acked it (then it forgets the acks).
func (j *jobState) allAcked(id, node string, applied int64) bool {
	if j.acks == nil {
		j.acks = map[string]map[string]int64{}
	}
	if j.acks[id] == nil {
		j.acks[id] = map[string]int64{}
	}
	j.acks[id][node] = applied
	want, ok := j.want[id]
	if !ok {
		want = len(j.liveWorkers())
	}
	if len(j.acks[id]) < want {
		return false
	}
	delete(j.acks, id)
	delete(j.want, id)
	return true
}

// ackWant sets how many workers must ack a global action.
func (j *jobState) ackWant(id string, n int) {
	if j.want == nil {
		j.want = map[string]int{}
	}
	j.want[id] = n
}

// runPolicies asks the active policies for proposals and passes them
// through the gate: de-duplicated, then dispatched (auto) or queued for an
// operator (approve). Proposals that wait too long expire.
func (j *jobState) runPolicies(snap monitor.Snapshot, now time.Time) {
	m := j.m
	m.mu.Lock()
	var changed []*kelpiepb.Action
	for _, a := range j.actions {
		if a.State == ActProposed && now.Sub(a.Created.AsTime()) > ProposalTTL {
			m.transition(j, a, ActExpired, "gate", fmt.Sprintf("no decision within %s", ProposalTTL))
			changed = append(changed, a)
		}
	}
	var proposals []policy.Action
	if j.state == StateRunning {
		proposals = j.propose(snap)
	}
	var sends sendList
	for _, p := range proposals {
		if err := supported(string(p.Kind)); err != nil {
			continue
		}
		a := fromProposal(p)
		if j.recent(actionKey(a), now) {
			continue
		}
		if err := j.validate(a); err != nil {
			continue
		}
		who := "policy:" + p.Policy
		if j.policies[p.Policy].Mode == ModeAuto {
			m.addLocked(j, a, ActApproved, who, "auto mode")
			sends = append(sends, m.dispatchLocked(j, a, who)...)
		} else {
			m.addLocked(j, a, ActProposed, who, "waiting for an operator")
		}
		changed = append(changed, a)
	}
	m.mu.Unlock()
	for _, a := range changed {
		m.persistAction(j, a)
	}
	sends.run()
}

// recent says whether a proposal with this key is pending, or was decided
// lately enough that its effect cannot be judged yet (one long window).
func (j *jobState) recent(key string, now time.Time) bool {
	cool := j.mon.Config().LPer
	for _, a := range j.actions {
		if actionKey(a) != key {
			continue
		}
		switch a.State {
		case ActProposed, ActApproved, ActDispatched:
			return true
		}
		if now.Sub(a.Updated.AsTime()) < cool {
			return true
		}
	}
	return false
}

func actionKey(a *kelpiepb.Action) string {
	if a.Policy == "operator" {
		return ""
	}
	return a.Policy + "/" + a.Kind + "/" + a.Target
}

// propose asks every active policy for proposals (under the manager's
// lock). Policies whose actions the runtime cannot apply yet stay quiet.
func (j *jobState) propose(snap monitor.Snapshot) []policy.Action {
	on := func(name string) bool {
		m := j.policies[name].Mode
		return m == ModeAuto || m == ModeApprove
	}
	pj := j.policyJob()
	out := j.proposeAntDT(snap, pj, on)
	if on(policy.NamePSLD) {
		out = append(out, j.proposePSLD(snap, pj)...)
	}
	return out
}

func fromProposal(p policy.Action) *kelpiepb.Action {
	a := &kelpiepb.Action{Kind: string(p.Kind), Target: p.Target, Policy: p.Policy, Reason: p.Reason,
		Predicted: p.Predicted, Evidence: p.Evidence}
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
