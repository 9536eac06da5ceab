package manager

import (
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/gate"
	"github.com/kelpie/kelpie/scheduler/rollback"
)

// recordUndo keeps on a reversible action what it changes, as it is before
// it is dispatched: what a rollback restores (scheduler/rollback). The
// caller is the job's actor.
func (j *jobState) recordUndo(a *consolepb.Action) {
	if !rollback.Reversible(a.Kind) || a.Undo != nil {
		return
	}
	u := &consolepb.ActionUndo{}
	switch a.Kind {
	case "ADJUST_BS":
		u.BatchSizes = map[string]int32{}
		for _, w := range j.liveWorkers() {
			n := j.nodes[w]
			b := n.progress().batch
			if b <= 0 {
				return // a worker that has not reported its batch: nothing to go back to
			}
			u.BatchSizes[w] = int32(b)
			if c := j.accum[w]; c > 1 {
				if u.Accumulation == nil {
					u.Accumulation = map[string]int32{}
				}
				u.Accumulation[w] = int32(c)
			}
		}
	case "ADJUST_LR":
		u.LrScale = map[string]float64{}
		for w := range lrScales(a) {
			u.LrScale[w] = 1
			if f, ok := j.lrScale[w]; ok {
				u.LrScale[w] = f
			}
		}
	case "SET_SYNC":
		s := j.spec.Sync
		u.Sync = &consolepb.SetSyncArgs{Model: s.Model, Staleness: int32(s.Staleness), SoftBarrier: s.Pull == "soft-barrier",
			PsspC: s.PSSP.C, PsspAlpha: s.PSSP.Alpha, PsspDynamic: s.PSSP.Dynamic, DropWaitFor: int32(s.Drop.WaitFor)}
	case "REASSIGN":
		for _, srv := range j.coord.Table().ServerOf {
			u.Assignment = append(u.Assignment, int32(srv))
		}
	}
	a.Undo = u
}

// proposeRollbacks proposes undoing every measured action that is due a
// rollback (scheduler/rollback.Due): through the gate in its policy's mode
// — dispatched at once in auto mode, waiting for an operator in approve
// mode and for an operator's own action — with the realized effect as its
// evidence. It returns the rollbacks it added, to persist.
func (m *Manager) proposeRollbacks(j *jobState, measured []*consolepb.Action) []*consolepb.Action {
	var added []*consolepb.Action
	var sends sendList
	j.onActor(func() {
		if j.state != StateRunning {
			return
		}
		for _, a := range measured {
			due, why := rollback.Due(a)
			if !due {
				continue
			}
			mode := gate.Mode(ModeApprove)
			if ps := j.policies[a.Policy]; ps != nil && ps.Mode == ModeAuto {
				mode = gate.Mode(ModeAuto)
			}
			r := rollback.Of(a, why)
			if j.validate(r) != nil {
				continue // the job moved on (a worker left): nothing to go back to
			}
			s, err := m.addLocked(j, r, rollback.Policy+"/"+a.Id, mode, "policy:"+rollback.Policy)
			if err != nil {
				continue
			}
			sends = append(sends, s...)
			added = append(added, r)
		}
	})
	sends.run()
	for _, r := range added {
		m.event(j.spec.Name, "rollback", r.Target, r.Kind+" "+r.Id+": "+r.Reason, "policy:"+rollback.Policy)
	}
	return added
}
