// Package rollback decides whether an applied action whose realized effect
// missed its prediction is undone, and builds the action that undoes it:
// the same kind, with what was in force before it (Action.undo, recorded
// when it was dispatched). Pure: the manager feeds it the realized-effect
// judge's verdict (scheduler/timeline.Realize) and proposes what it
// returns through the gate — dispatched at once when the proposing
// policy is in auto mode, waiting for an operator in approve mode.
package rollback

import (
	"fmt"
	"maps"
	"slices"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// Reversible says whether an action of kind can be undone by another of
// the same kind: batch sizes, learning-rate scales, the synchronisation
// model and the block table all have a state before to go back to. A
// restart, an added or removed node cannot be undone.
func Reversible(kind string) bool {
	switch kind {
	case "ADJUST_BS", "ADJUST_LR", "SET_SYNC", "REASSIGN":
		return true
	}
	return false
}

// Policy is the name rollbacks are proposed under: not the original
// policy's, so that its own proposals (and their withdrawal) never touch
// them.
const Policy = "rollback"

// Due says whether a should be rolled back, and why: it is reversible,
// recorded its state before (undo), is not itself a rollback, and the
// realized-effect judge found it a miss — it delivered less than
// timeline.MissFraction of the gain it predicted, the tolerance. A miss is
// undone even when it gained a little: the prediction it was approved on
// did not hold, and what it changed (a worker's batch, its learning rate,
// the sync model, the block table) is no longer backed by evidence.
func Due(a *consolepb.Action) (bool, string) {
	r := a.GetRealized()
	if !Reversible(a.GetKind()) || a.GetUndo() == nil || a.GetRollbackOf() != "" || r == nil || !r.GetMiss() {
		return false, ""
	}
	effect := "cost throughput"
	if r.GetThroughputAfter() > r.GetThroughputBefore() {
		effect = "fell short of its prediction"
	}
	why := fmt.Sprintf("%s %s missed its prediction and %s: %.0f samples/s after, %.0f before",
		a.GetKind(), a.GetId(), effect, r.GetThroughputAfter(), r.GetThroughputBefore())
	if p := r.GetPredictedThroughput(); p > 0 {
		why += fmt.Sprintf(", %.0f predicted", p)
	}
	if v := r.GetVerdict(); v != "" {
		why += " (" + v + ")"
	}
	return true, why
}

// Of is the action that undoes a (Due said so): the same kind, with its
// undo's state, the realized effect as its evidence.
func Of(a *consolepb.Action, why string) *consolepb.Action {
	u, r := a.GetUndo(), a.GetRealized()
	out := &consolepb.Action{Kind: a.GetKind(), Target: a.GetTarget(), Policy: Policy, RollbackOf: a.GetId(),
		Reason:    "roll back: " + why,
		Predicted: "the throughput from before " + a.GetId() + fmt.Sprintf(" (%.0f samples/s)", r.GetThroughputBefore()),
		Evidence: map[string]float64{
			"throughput_before":             r.GetThroughputBefore(),
			"throughput_after":              r.GetThroughputAfter(),
			"missed_predicted_throughput":   r.GetPredictedThroughput(),
			"prediction_error":              r.GetPredictionError(),
			"predicted_throughput":          r.GetThroughputBefore(),
			"rolled_back_applied_iteration": float64(a.GetAppliedIteration()),
		}}
	switch a.GetKind() {
	case "ADJUST_BS":
		out.BatchSizes = maps.Clone(u.GetBatchSizes())
		if len(u.GetAccumulation()) > 0 {
			out.Accumulation = maps.Clone(u.GetAccumulation())
		}
	case "ADJUST_LR":
		out.Args = &consolepb.Action_AdjustLr{AdjustLr: &consolepb.AdjustLRArgs{LrScale: maps.Clone(u.GetLrScale())}}
		out.Params = map[string]float64{}
		for _, w := range slices.Sorted(maps.Keys(u.GetLrScale())) {
			out.Params["lr_scale/"+w] = u.GetLrScale()[w]
		}
	case "SET_SYNC":
		s := u.GetSync()
		out.SyncModel = s.GetModel()
		out.Args = &consolepb.Action_SetSync{SetSync: &consolepb.SetSyncArgs{Model: s.GetModel(), Staleness: s.GetStaleness(),
			SoftBarrier: s.GetSoftBarrier(), PsspC: s.GetPsspC(), PsspAlpha: s.GetPsspAlpha(), PsspDynamic: s.GetPsspDynamic(),
			DropWaitFor: s.GetDropWaitFor()}}
	case "REASSIGN":
		out.Assignment = slices.Clone(u.GetAssignment())
	}
	return out
}
