package manager

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// runScript carries out the spec's timed operator actions (`script:`), each
// at its time after the job's start, as the operator "script" would: every
// step goes through the same gate and audit trail as a console command.
func (m *Manager) runScript(j *jobState) {
	steps := append([]spec.ScriptStep(nil), j.spec.Script...)
	if len(steps) == 0 {
		return
	}
	sort.SliceStable(steps, func(a, b int) bool { return steps[a].At < steps[b].At })
	if !m.waitStarted(j) {
		return
	}
	start := j.coord.Start()
	for _, st := range steps {
		select {
		case <-time.After(time.Until(start.Add(st.At))):
		case <-j.endedCh:
			return
		case <-m.done:
			return
		}
		a, err := scriptAction(j, st)
		if err == nil {
			// A table change still under way delays the next one.
			for attempt := 0; attempt < 600; attempt++ {
				_, err = m.Trigger(j.spec.Name, a, "script")
				if err == nil || !busy(err) {
					break
				}
				select {
				case <-time.After(100 * time.Millisecond):
				case <-j.endedCh:
					return
				}
			}
		}
		if err != nil {
			m.event(j.spec.Name, "action", st.Node, fmt.Sprintf("script step at %s (%s %s) not carried out: %v", st.At, st.Action, st.Node, err), "script")
		}
	}
}

func busy(err error) bool { return err != nil && strings.Contains(err.Error(), "still under way") }

// scriptAction converts a script step into an action.
func scriptAction(_ *jobState, st spec.ScriptStep) (*kelpiepb.Action, error) {
	reason := fmt.Sprintf("script: %s at %s", st.Action, st.At)
	switch st.Action {
	case spec.ActionAddServer:
		return &kelpiepb.Action{Kind: string(policy.KindAddServer), Reason: reason}, nil
	case spec.ActionRemoveServer:
		return &kelpiepb.Action{Kind: string(policy.KindRemoveServer), Target: st.Node, Reason: reason}, nil
	case spec.ActionAddWorker:
		// The manager names the new worker (the next index), as the spec's
		// validation did.
		return &kelpiepb.Action{Kind: string(policy.KindAddWorker), Reason: reason}, nil
	case spec.ActionRemoveWorker:
		return &kelpiepb.Action{Kind: string(policy.KindRemoveWorker), Target: st.Node, Reason: reason}, nil
	case spec.ActionReassign:
		return &kelpiepb.Action{Kind: string(policy.KindReassign), Reason: reason}, nil
	case spec.ActionRestart:
		return &kelpiepb.Action{Kind: string(policy.KindKillRestart), Target: st.Node, Reason: reason}, nil
	case spec.ActionAdjustBatch:
		a := &kelpiepb.Action{Kind: string(policy.KindAdjustBS), Reason: reason, BatchSizes: map[string]int32{}}
		for w, b := range st.Sizes {
			a.BatchSizes[w] = int32(b)
		}
		return a, nil
	case spec.ActionSetSync:
		if st.Sync == nil {
			return nil, fmt.Errorf("set-sync without settings")
		}
		a := &kelpiepb.Action{Kind: string(policy.KindSetSync), Reason: reason, SyncModel: st.Sync.Model,
			Params: map[string]float64{"staleness": float64(st.Sync.Staleness), "pssp_c": st.Sync.PSSP.C,
				"pssp_alpha": st.Sync.PSSP.Alpha, "drop_wait_for": float64(st.Sync.Drop.WaitFor)}}
		if st.Sync.PSSP.Dynamic {
			a.Params["pssp_dynamic"] = 1
		}
		if st.Sync.Pull == "soft-barrier" {
			a.Params["soft_barrier"] = 1
		}
		return a, nil
	}
	return nil, fmt.Errorf("%s is not supported by the runtime yet", st.Action)
}
