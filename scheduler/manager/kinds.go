package manager

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/scheduler/change"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// kindDef is everything the manager knows of one action kind, in one
// place: how its console-API params convert to its typed arguments, how it
// is checked against the job, how it is carried out, which nodes get its
// command and what that command carries, and what it changes once every
// ack has come. The gate (scheduler/gate) holds the action's life; this
// table holds what differs between kinds.
//
// To add a kind: a value in proto/console.proto's ActionKind (and typed
// arguments in Action's args oneof if it has any), `make proto`, and one
// entry in kindDefs. A policy proposes it with policy.Kind set to its name.
type kindDef struct {
	kind consolepb.ActionKind
	// Families, for the rules between concurrent actions: a table change
	// (the block table moves: REASSIGN, ADD_SERVER, REMOVE_SERVER), a
	// change of the set of workers, a re-split of the global batch among
	// the workers (every live worker applies it at one iteration).
	table, membership, resplit bool
	// exclusive: refused while a table change or a change of the set of
	// workers is under way (a node relaunched mid-change would not know
	// which table to follow).
	exclusive bool
	// fromParams fills the typed arguments from the console API's params
	// map when a client sent that (nil: the kind has no arguments there);
	// toParams fills the params map from them, for display and the store.
	fromParams func(a *consolepb.Action) error
	toParams   func(a *consolepb.Action)
	// validate checks the action against the job as it is now.
	validate func(j *jobState, a *consolepb.Action) error
	// dispatch carries an approved action out: it reports the dispatch to
	// the gate (m.transition), names the nodes whose acks apply it
	// (j.await) or starts a multi-step change, and returns the sends.
	dispatch func(m *Manager, j *jobState, a *consolepb.Action, who string) sendList
	// targets says whether a node gets the action's command (nil: its
	// target does).
	targets func(j *jobState, a *consolepb.Action, node string) bool
	// command fills the kind's fields of a node's command.
	command func(j *jobState, a *consolepb.Action, cmd *agentpb.ActionCommand)
	// applied changes the job's settings once the action has applied.
	applied func(m *Manager, j *jobState, a *consolepb.Action)
	// ackAtNode: the applied iteration is where the acking node is (a node
	// action), not the one its ack reports (a global action).
	ackAtNode bool
	// change is the table change a table kind makes (scheduler/change);
	// leaving says its target's blocks must all move (REMOVE_SERVER) and
	// checkAssignment whether an explicit assignment is checked against
	// the job's servers.
	change                   change.Kind
	leaving, checkAssignment bool
	// relaunches: the action relaunches its target (KILL_RESTART); a
	// server's relaunch is a table change (a new server takes its blocks).
	relaunches bool
	// nodeChange: a node comes or goes (the closed-loop judgement allows
	// for the transition).
	nodeChange bool
	// allreduce: the kind applies to an allreduce job (no parameter
	// servers) as well.
	allreduce bool
	// fromProposal carries a policy proposal's typed arguments.
	fromProposal func(p policy.Action, a *consolepb.Action)
	// removable picks the node an EPS step of this kind takes out ("":
	// none left); nil for a kind that takes none out.
	removable func(j *jobState) string
}

var kindDefs map[consolepb.ActionKind]*kindDef

func init() {
	resplitTargets := func(j *jobState, a *consolepb.Action, node string) bool {
		if len(a.BatchSizes) == 0 {
			return false // an ADD_WORKER whose worker has not joined yet: no split to send
		}
		n, ok := j.nodes[node]
		return ok && n.role == "worker" && !n.removed
	}
	servers := func(*jobState, *consolepb.Action, string) bool { return false } // the servers apply it
	table := func(m *Manager, j *jobState, a *consolepb.Action, who string) sendList {
		// Its table change runs on a goroutine of its own (retable), which
		// the job's actor feeds every ack, loss and tick.
		m.transition(j, a, ActDispatched, who, "changing the block table")
		m.spawn(func() { m.retable(j, a) })
		return nil
	}
	defs := []*kindDef{
		{kind: consolepb.ActionKind_ACTION_KIND_ADJUST_BS, resplit: true, allreduce: true, validate: (*jobState).validateSplit,
			dispatch: func(m *Manager, j *jobState, a *consolepb.Action, who string) sendList {
				sends := m.splitCommands(j, a)
				m.transition(j, a, ActDispatched, who, fmt.Sprintf("to %d workers, at iteration %d", len(j.liveWorkers()), a.TargetIteration))
				return sends
			},
			targets: resplitTargets, applied: (*Manager).applySplit},
		{kind: consolepb.ActionKind_ACTION_KIND_KILL_RESTART, exclusive: true, ackAtNode: true, relaunches: true, nodeChange: true,
			allreduce: true, validate: (*jobState).validateRestart,
			dispatch: func(m *Manager, j *jobState, a *consolepb.Action, who string) sendList {
				if j.serverRestart(a) {
					// A server is relaunched on a fresh host by a hot table
					// change: a new server takes its blocks, then it stops.
					return table(m, j, a, who)
				}
				if m.cfg.Pods != nil {
					// On Kubernetes a worker's restart is a fresh Pod.
					j.mon.Forget(a.Target)
					m.transition(j, a, ActDispatched, who, "replacing its pod")
					m.spawn(func() { m.restartPod(j, a) })
					return nil
				}
				if old, mv, ok := j.moveTarget(a); ok {
					// A host is free (cluster.spare_hosts): the node is
					// relaunched there, leaving its host behind.
					j.mon.Forget(a.Target)
					m.transition(j, a, ActDispatched, who, fmt.Sprintf("relaunching it on host %s (leaving host %s)", mv.to, mv.from))
					m.spawn(func() { m.moveNode(j, a, old, mv) })
					return nil
				}
				j.mon.Forget(a.Target)
				j.await(a, []string{a.Target})
				m.transition(j, a, ActDispatched, who, "to 1 node(s)")
				return j.sendCommand(a, []string{a.Target})
			}},
		{kind: consolepb.ActionKind_ACTION_KIND_BACKUP_WORKERS, fromParams: backupFromParams, toParams: backupToParams,
			fromProposal: func(p policy.Action, a *consolepb.Action) {
				a.Args = &consolepb.Action_BackupWorkers{BackupWorkers: &consolepb.BackupWorkersArgs{Drop: int32(p.Drop)}}
				backupToParams(a)
			},
			validate: (*jobState).validateBackup, targets: servers,
			dispatch: func(m *Manager, j *jobState, a *consolepb.Action, who string) sendList {
				m.transition(j, a, ActDispatched, who, "to every server")
				m.spawn(func() { m.backupWorkers(j, a) })
				return nil
			}},
		{kind: consolepb.ActionKind_ACTION_KIND_ADJUST_LR, fromParams: lrFromParams, toParams: lrToParams, allreduce: true,
			fromProposal: func(p policy.Action, a *consolepb.Action) {
				a.Args = &consolepb.Action_AdjustLr{AdjustLr: &consolepb.AdjustLRArgs{LrScale: maps.Clone(p.LRScale)}}
				lrToParams(a)
			},
			validate: (*jobState).validateLR, dispatch: (*Manager).dispatchLR,
			targets: func(_ *jobState, a *consolepb.Action, node string) bool {
				_, ok := a.GetAdjustLr().GetLrScale()[node]
				return ok
			},
			command: func(_ *jobState, a *consolepb.Action, cmd *agentpb.ActionCommand) {
				cmd.LrScale = a.GetAdjustLr().GetLrScale()
			},
			applied: func(_ *Manager, j *jobState, a *consolepb.Action) {
				if j.lrScale == nil {
					j.lrScale = map[string]float64{}
				}
				maps.Copy(j.lrScale, a.GetAdjustLr().GetLrScale())
			}},
		{kind: consolepb.ActionKind_ACTION_KIND_REASSIGN, table: true, exclusive: true, change: change.Reassign, checkAssignment: true,
			validate: (*jobState).validateTable, dispatch: table},
		{kind: consolepb.ActionKind_ACTION_KIND_ADD_SERVER, table: true, exclusive: true, change: change.AddServer, nodeChange: true,
			validate: (*jobState).validateTable, dispatch: table},
		{kind: consolepb.ActionKind_ACTION_KIND_REMOVE_SERVER, table: true, exclusive: true, change: change.RemoveServer, leaving: true,
			checkAssignment: true, nodeChange: true, removable: removableServer, validate: (*jobState).validateTable, dispatch: table},
		{kind: consolepb.ActionKind_ACTION_KIND_ADD_WORKER, membership: true, resplit: true, exclusive: true, nodeChange: true, allreduce: true,
			validate: (*jobState).validateAddWorker, targets: resplitTargets, applied: (*Manager).applySplit,
			dispatch: func(m *Manager, j *jobState, a *consolepb.Action, who string) sendList {
				m.transition(j, a, ActDispatched, who, "launching a worker")
				m.spawn(func() { m.addWorker(j, a) })
				return nil
			}},
		{kind: consolepb.ActionKind_ACTION_KIND_REMOVE_WORKER, membership: true, resplit: true, exclusive: true, nodeChange: true,
			allreduce: true, removable: removableWorker,
			validate: (*jobState).validateRemoveWorker, targets: resplitTargets, applied: (*Manager).applyRemoveWorker,
			dispatch: (*Manager).removeWorker},
		{kind: consolepb.ActionKind_ACTION_KIND_SET_SYNC, fromParams: syncFromParams, toParams: syncToParams,
			validate: func(_ *jobState, a *consolepb.Action) error {
				if err := job.SyncFrom(syncSettings(a)).Validate(); err != nil {
					return status.Errorf(codes.InvalidArgument, "SET_SYNC: %v", err)
				}
				return nil
			},
			targets: servers,
			dispatch: func(m *Manager, j *jobState, a *consolepb.Action, who string) sendList {
				m.transition(j, a, ActDispatched, who, "to every server")
				m.spawn(func() { m.setSync(j, a) })
				return nil
			}},
	}
	kindDefs = map[consolepb.ActionKind]*kindDef{}
	for _, d := range defs {
		kindDefs[d.kind] = d
	}
}

// kindOf is the definition of an action kind by its console API name.
func kindOf(name string) (*kindDef, error) {
	k, ok := consolepb.ParseActionKind(name)
	if d := kindDefs[k]; ok && d != nil {
		return d, nil
	}
	var names []string
	for _, k := range slices.Sorted(maps.Keys(kindDefs)) {
		names = append(names, consolepb.ActionKindName(k))
	}
	return nil, status.Errorf(codes.InvalidArgument, "unknown action kind %q (one of %s)", name, strings.Join(names, ", "))
}

// defOf is the definition of an action's kind (nil for a kind no longer
// known, say one read back from an older store).
func defOf(a *consolepb.Action) *kindDef {
	d, _ := kindOf(a.Kind)
	return d
}

// supported says whether the runtime can apply an action kind today.
func supported(kind string) error {
	_, err := kindOf(kind)
	return err
}

// typedArgs converts an action arriving at the edge (the console API, the
// CLI, the store) to its typed arguments: typed ones win; otherwise the
// params map is read. The params map is then filled from the typed
// arguments, so that the console shows what it showed before.
func typedArgs(a *consolepb.Action) error {
	d, err := kindOf(a.Kind)
	if err != nil {
		return err
	}
	if a.Args == nil && d.fromParams != nil {
		if err := d.fromParams(a); err != nil {
			return err
		}
	}
	if d.toParams != nil {
		d.toParams(a)
	}
	return nil
}

// lrFromParams reads ADJUST_LR's params: lr_scale for its target, or
// lr_scale/<worker> for several workers at once.
func lrFromParams(a *consolepb.Action) error {
	scales := map[string]float64{}
	if a.Target != "" {
		if f, ok := a.Params["lr_scale"]; ok {
			scales[a.Target] = f
		}
	} else {
		for k, v := range a.Params {
			if w, ok := strings.CutPrefix(k, "lr_scale/"); ok {
				scales[w] = v
			}
		}
	}
	a.Args = &consolepb.Action_AdjustLr{AdjustLr: &consolepb.AdjustLRArgs{LrScale: scales}}
	return nil
}

func lrToParams(a *consolepb.Action) {
	a.Params = map[string]float64{}
	for w, f := range a.GetAdjustLr().GetLrScale() {
		if w == a.Target {
			a.Params["lr_scale"] = f
		} else {
			a.Params["lr_scale/"+w] = f
		}
	}
}

// backupFromParams reads BACKUP_WORKERS's params.drop.
func backupFromParams(a *consolepb.Action) error {
	d := a.Params["drop"]
	if d < 0 || d != math.Trunc(d) || d > math.MaxInt32 {
		return status.Errorf(codes.InvalidArgument, "BACKUP_WORKERS: params.drop must be a whole number ≥ 0, got %g", d)
	}
	a.Args = &consolepb.Action_BackupWorkers{BackupWorkers: &consolepb.BackupWorkersArgs{Drop: int32(d)}}
	return nil
}

func backupToParams(a *consolepb.Action) {
	a.Params = map[string]float64{"drop": float64(a.GetBackupWorkers().GetDrop())}
}

// syncFromParams reads SET_SYNC's sync_model and params staleness, pssp_c,
// pssp_alpha, pssp_dynamic (1), drop_wait_for and soft_barrier (1 for the
// soft barrier, else the lazy pull buffer).
func syncFromParams(a *consolepb.Action) error {
	p := a.Params
	for _, k := range []string{"staleness", "drop_wait_for"} {
		if v := p[k]; v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
			return status.Errorf(codes.InvalidArgument, "SET_SYNC: params.%s must be a whole number ≥ 0, got %g", k, v)
		}
	}
	a.Args = &consolepb.Action_SetSync{SetSync: &consolepb.SetSyncArgs{Model: a.SyncModel, Staleness: int32(p["staleness"]),
		SoftBarrier: p["soft_barrier"] == 1, PsspC: p["pssp_c"], PsspAlpha: p["pssp_alpha"], PsspDynamic: p["pssp_dynamic"] == 1,
		DropWaitFor: int32(p["drop_wait_for"])}}
	return nil
}

func syncToParams(a *consolepb.Action) {
	s := a.GetSetSync()
	a.SyncModel = s.GetModel()
	a.Params = map[string]float64{"staleness": float64(s.GetStaleness()), "pssp_c": s.GetPsspC(),
		"pssp_alpha": s.GetPsspAlpha(), "drop_wait_for": float64(s.GetDropWaitFor())}
	if s.GetPsspDynamic() {
		a.Params["pssp_dynamic"] = 1
	}
	if s.GetSoftBarrier() {
		a.Params["soft_barrier"] = 1
	}
}

// syncSettings is a SET_SYNC's settings as the servers take them.
func syncSettings(a *consolepb.Action) *pspb.SyncSettings {
	s := a.GetSetSync()
	pull := "lazy"
	if s.GetSoftBarrier() {
		pull = "soft-barrier"
	}
	return &pspb.SyncSettings{Model: s.GetModel(), Staleness: s.GetStaleness(), Pull: pull, PsspC: s.GetPsspC(),
		PsspAlpha: s.GetPsspAlpha(), PsspDynamic: s.GetPsspDynamic(), DropWaitFor: s.GetDropWaitFor()}
}

// lrScales is an ADJUST_LR's factors by worker.
func lrScales(a *consolepb.Action) map[string]float64 { return a.GetAdjustLr().GetLrScale() }
