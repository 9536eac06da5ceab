package manager

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// runScript carries out the spec's timed operator actions (`script:`), each
// at its time after the job's start, as the operator "script" would: every
// step goes through the same gate and audit trail as a console command.
func (m *Manager) runScript(j *jobState) {
	steps := scriptSteps(j.spec)
	if len(steps) == 0 {
		return
	}
	if !m.waitStarted(j) {
		return
	}
	start := j.coord.Start()
	for i, st := range steps {
		if !m.sleep(j, start.Add(st.At).Sub(m.now())) {
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
				if !m.sleep(j, 100*time.Millisecond) {
					return
				}
			}
		}
		if err != nil {
			m.event(j.spec.Name, "action", st.Node, fmt.Sprintf("script step at %s (%s %s) not carried out: %v", st.At, st.Action, st.Node, err), "script")
		}
		j.onActor(func() {
			j.scriptNext = i + 1
		})
	}
}

// scriptSteps returns the spec's script steps in the order they run: by
// time, in file order at equal times.
func scriptSteps(s *spec.Spec) []spec.ScriptStep {
	steps := append([]spec.ScriptStep(nil), s.Script...)
	sort.SliceStable(steps, func(a, b int) bool { return steps[a].At < steps[b].At })
	return steps
}

// SkippedStep is a script step that never ran because the job ended
// before its time (result JSON script_skipped).
type SkippedStep struct {
	AtS    float64 `json:"at_s"`
	Action string  `json:"action"`
	Node   string  `json:"node,omitempty"`
}

// skippedSteps lists the steps from next on (those not yet carried out
// or refused when the job ended).
func skippedSteps(steps []spec.ScriptStep, next int) []SkippedStep {
	out := []SkippedStep{}
	for _, st := range steps[min(next, len(steps)):] {
		out = append(out, SkippedStep{AtS: st.At.Seconds(), Action: st.Action, Node: st.Node})
	}
	return out
}

// reportSkipped logs and publishes (a console event) the script steps a
// finished job never ran.
func (m *Manager) reportSkipped(j *jobState, skipped []SkippedStep) {
	if len(skipped) == 0 {
		return
	}
	var b strings.Builder
	for i, st := range skipped {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s at %gs", st.Action, st.AtS)
		if st.Node != "" {
			fmt.Fprintf(&b, " (%s)", st.Node)
		}
	}
	m.event(j.spec.Name, "script", "", fmt.Sprintf("%d script step(s) never ran, the job ended first: %s", len(skipped), b.String()), "script")
}

func busy(err error) bool { return err != nil && strings.Contains(err.Error(), "still under way") }

// scriptAction converts a script step into an action.
func scriptAction(_ *jobState, st spec.ScriptStep) (*consolepb.Action, error) {
	reason := fmt.Sprintf("script: %s at %s", st.Action, st.At)
	switch st.Action {
	case spec.ActionAddServer:
		return &consolepb.Action{Kind: string(policy.KindAddServer), Reason: reason}, nil
	case spec.ActionRemoveServer:
		return &consolepb.Action{Kind: string(policy.KindRemoveServer), Target: st.Node, Reason: reason}, nil
	case spec.ActionAddWorker:
		// The manager names the new worker (the next index), as the spec's
		// validation did.
		return &consolepb.Action{Kind: string(policy.KindAddWorker), Reason: reason}, nil
	case spec.ActionRemoveWorker:
		return &consolepb.Action{Kind: string(policy.KindRemoveWorker), Target: st.Node, Reason: reason}, nil
	case spec.ActionReassign:
		return &consolepb.Action{Kind: string(policy.KindReassign), Reason: reason}, nil
	case spec.ActionRestart:
		return &consolepb.Action{Kind: string(policy.KindKillRestart), Target: st.Node, Reason: reason}, nil
	case spec.ActionAdjustBatch:
		a := &consolepb.Action{Kind: string(policy.KindAdjustBS), Reason: reason, BatchSizes: map[string]int32{}}
		for w, b := range st.Sizes {
			a.BatchSizes[w] = int32(b)
		}
		return a, nil
	case spec.ActionSetSync:
		if st.Sync == nil {
			return nil, fmt.Errorf("set-sync without settings")
		}
		a := &consolepb.Action{Kind: string(policy.KindSetSync), Reason: reason, Args: &consolepb.Action_SetSync{SetSync: &consolepb.SetSyncArgs{
			Model: st.Sync.Model, Staleness: int32(st.Sync.Staleness), SoftBarrier: st.Sync.Pull == "soft-barrier",
			PsspC: st.Sync.PSSP.C, PsspAlpha: st.Sync.PSSP.Alpha, PsspDynamic: st.Sync.PSSP.Dynamic, DropWaitFor: int32(st.Sync.Drop.WaitFor)}}}
		syncToParams(a)
		return a, nil
	}
	return nil, fmt.Errorf("%s is not supported by the runtime yet", st.Action)
}
