package policy

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kelpie/kelpie/scheduler/monitor"
)

// Outcome is what an applied action realized, as the scheduler measured it
// (scheduler/timeline.Realize): the policies read it to learn from their
// misses.
type Outcome struct {
	Policy  string
	Kind    Kind
	Targets []string // the stragglers it was for
	At      time.Time
	Miss    bool
	// The targets' mean BPT before and after (seconds), and the job's
	// throughput after against the prediction (samples/s).
	BPTBefore, BPTAfter float64
	ThroughputAfter     float64
	Predicted           float64
	// BatchesBefore is every worker's batch size before the action (an
	// ADJUST_BS), so that it can be reverted; BatchesAfter what it set.
	BatchesBefore, BatchesAfter map[string]int
	// Restarts is each target's restart count when the outcome was
	// measured: a restart since is a change.
	Restarts map[string]int
	// NodeBPTBefore and NodeBPTAfter are each target's own mean BPT (when
	// there were several: BPTBefore and BPTAfter are their mean).
	NodeBPTBefore, NodeBPTAfter map[string]float64
}

// bpts is node's BPT before and after: its own when measured, else the
// targets' mean.
func (o Outcome) bpts(node string) (before, after float64) {
	b, okb := o.NodeBPTBefore[node]
	f, okf := o.NodeBPTAfter[node]
	if okb && okf {
		return b, f
	}
	return o.BPTBefore, o.BPTAfter
}

// StuckBPT is how close to its old BPT a straggler's BPT must stay after a
// batch cut of unknown size to count as not batch-proportional (≥ 90 % of
// before).
const StuckBPT = 0.9

// ProportionalShare is the share of the BPT drop a batch-proportional
// slowness would give that a batch cut must deliver: a straggler whose BPT
// fell by less than half of before × (1 − new batch / old batch) is slow
// for another reason than its batch.
const ProportionalShare = 0.5

// stuck says whether node's BPT failed to follow o's batch cut.
func (o Outcome) stuck(node string) bool {
	before, after := o.bpts(node)
	if !(before > 0) || math.IsNaN(after) {
		return false
	}
	old, cut := o.BatchesBefore[node], o.BatchesAfter[node]
	if old <= 0 || cut <= 0 {
		return after >= StuckBPT*before
	}
	if cut >= old {
		return false // its batch was not cut
	}
	expected := before * (1 - float64(cut)/float64(old))
	return before-after < ProportionalShare*expected
}

// ChangedBPT is how far a stuck straggler's BPT must move from what it was
// after the miss (±25 %) for AntDT-ND to consider it changed and look at it
// afresh.
const ChangedBPT = 0.25

// stuckStragglers returns the workers for which AntDT-ND's last ADJUST_BS
// missed without moving their BPT — their slowness does not scale with the
// batch, so another batch cut cannot help — each with the outcome that
// showed it. A worker stops being stuck when something changes: it was
// restarted since, or its BPT moved by more than ChangedBPT.
func stuckStragglers(s monitor.Snapshot, j Job) map[string]Outcome {
	stuck := map[string]Outcome{}
	last := map[string]Outcome{} // AntDT-ND's latest batch change per straggler
	for _, o := range j.Outcomes {
		if o.Policy != NameAntDTND || o.Kind != KindAdjustBS {
			continue
		}
		for _, t := range o.Targets {
			if p, ok := last[t]; !ok || !o.At.Before(p.At) {
				last[t] = o
			}
		}
	}
	for node, o := range last {
		if !o.Miss || !o.stuck(node) {
			continue
		}
		if j.Restarts[node] != o.Restarts[node] {
			continue // restarted since: a new host, a new look
		}
		if w, ok := s.Worker(node); ok && w.BPTTrans > 0 {
			_, after := o.bpts(node)
			if now := w.BPTTrans.Seconds(); math.Abs(now-after) > ChangedBPT*after {
				continue
			}
		}
		stuck[node] = o
	}
	return stuck
}

// followedStragglers returns the workers whose last KILL_RESTART by
// AntDT-ND was a miss — the relaunched worker's BPT did not come down by
// half of what the restart predicted (the others' mean) — each with the
// outcome that showed it: the slowness came along to the new host (a slow
// device, not a contended host), so AntDT-ND restarts them no more and
// rebalances around them with ADJUST_BS. A later restart that was a hit
// takes this back.
func followedStragglers(j Job) map[string]Outcome {
	last := map[string]Outcome{}
	for _, o := range j.Outcomes {
		if o.Policy != NameAntDTND || o.Kind != KindKillRestart {
			continue
		}
		for _, t := range o.Targets {
			if p, ok := last[t]; !ok || !o.At.Before(p.At) {
				last[t] = o
			}
		}
	}
	out := map[string]Outcome{}
	for node, o := range last {
		if o.Miss {
			out[node] = o
		}
	}
	return out
}

// restartAwaited says whether an AntDT-ND KILL_RESTART of node was applied
// and its outcome is not measured yet: restarting it again before knowing
// whether the last restart helped (a contended host left behind) or missed
// (the slowness followed it) would restart a slow device over and over —
// the gate's cooldown (L_per from the restart) runs out before the
// outcome's window (L_per after the node is back) does.
func restartAwaited(j Job, node string) bool {
	return slices.ContainsFunc(j.Awaiting, func(a Awaiting) bool {
		return a.Policy == NameAntDTND && a.Kind == KindKillRestart && slices.Contains(a.Targets, node)
	})
}

// batchCutAwaited says whether an AntDT-ND ADJUST_BS was applied and its
// outcome is not measured yet. It is measured over the short window
// (L_trans after the split took effect), so a restart waits seconds for
// it; without the wait a persistent straggler's restart raced the split's
// verdict, and a fast job restarted a worker the split had cured, or
// restarted it without knowing the split had missed.
func batchCutAwaited(j Job) bool {
	return slices.ContainsFunc(j.Awaiting, func(a Awaiting) bool {
		return a.Policy == NameAntDTND && a.Kind == KindAdjustBS
	})
}

// escalate is AntDT-ND's answer to a stuck straggler that is still
// straggling: KILL_RESTART now when the cluster is not busy (a slowness
// that does not scale with the batch belongs to the host), else revert the
// batch split that did not help. others is the other workers' mean BPT the
// restart predicts: the timeline's long-window means when timeline (the
// figures the realized-effect judge reads), else the Monitor's.
func (p AntDTND) escalate(node string, o Outcome, w monitor.WorkerStat, others float64, timeline bool, j Job) Action {
	before, after := o.bpts(node)
	miss := fmt.Sprintf("ADJUST_BS cut %s's batch but its BPT stayed at %s (%s before; predicted %s/s, realized %s/s): its slowness does not scale with the batch",
		node, secs(after), secs(before), num(o.Predicted), num(o.ThroughputAfter))
	ev := map[string]float64{
		node + "/bpt_before_s":        before,
		node + "/bpt_after_s":         after,
		"missed_predicted_throughput": o.Predicted,
		"missed_realized_throughput":  o.ThroughputAfter,
		node + "/bpt_trans_s":         w.BPTTrans.Seconds(),
		"escalated_from_seconds":      float64(o.At.Unix()),
	}
	if !j.Busy {
		pred := "relaunched on another host, " + node + " should run like the others"
		switch {
		case others > 0 && timeline:
			pred += fmt.Sprintf(" (the timeline's mean BPT %s, as its effect is judged)", secs(others))
			ev["others_mean_bpt_timeline_s"] = others
		case others > 0:
			pred += fmt.Sprintf(" (mean BPT %s)", secs(others))
			ev["others_mean_bpt_trans_s"] = others
		}
		return Action{
			Kind:         KindKillRestart,
			Policy:       NameAntDTND,
			Target:       node,
			Reason:       miss + "; the cluster is not busy: kill and restart it",
			Evidence:     ev,
			Predicted:    pred,
			PredictedBPT: time.Duration(others * float64(time.Second)),
			Key:          NameAntDTND + "/" + string(KindKillRestart) + "/" + node,
		}
	}
	sizes := maps.Clone(o.BatchesBefore)
	var changes []string
	for _, name := range slices.Sorted(maps.Keys(sizes)) {
		if cur, ok := j.BatchSizes[name]; ok && cur != sizes[name] {
			changes = append(changes, fmt.Sprintf("%s %d→%d", name, cur, sizes[name]))
		}
	}
	return Action{
		Kind:       KindAdjustBS,
		Policy:     NameAntDTND,
		BatchSizes: sizes,
		Reason:     miss + "; the cluster is busy: revert the split (" + strings.Join(changes, ", ") + ")",
		Evidence:   ev,
		Predicted:  "the throughput from before the split",
		Key:        NameAntDTND + "/" + string(KindAdjustBS) + "/revert/" + node,
	}
}
