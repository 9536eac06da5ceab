package policy

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/kelpie/kelpie/core/policydecl"
	"github.com/kelpie/kelpie/scheduler/monitor"
)

// AdjustLR proposes AntDT's ADJUST_LR (Table II): the learning rate of a
// lagging worker is penalised (AntDT §III, after the staleness-aware
// methods it cites). For asynchronous training: with T̄ the short-window
// BPTs, a worker's gradient is on average τ_i = T̄_i · Σ_{j≠i} 1/T̄_j updates
// stale, and each straggler's rate is scaled by τ_ref/τ_i, τ_ref the mean
// staleness of the healthy workers — the η/τ rule, normalised so healthy
// workers keep their rate. Scales are floored at MinScale. When nobody
// straggles, scales go back to 1.
type AdjustLR struct {
	Lambda   float64 // as AntDTND.Lambda
	MinScale float64 // floor on a scale; zero means 0.1
}

// lrTolerance is how far a scale may drift from the one in effect before a
// new ADJUST_LR is worth it.
const lrTolerance = 0.05

// Propose returns the ADJUST_LR plan.
func (p AdjustLR) Propose(s monitor.Snapshot, j Job) []Action {
	lambda := lambdaOf(p.Lambda, s)
	floor := p.MinScale
	if floor <= 0 {
		floor = 0.1
	}
	workers := jobWorkers(s, j)
	var inv float64 // Σ 1/T̄_j
	for _, w := range workers {
		if w.SamplesTrans > 0 && w.BPTTrans > 0 {
			inv += 1 / w.BPTTrans.Seconds()
		}
	}
	tau := func(w monitor.WorkerStat) float64 {
		t := w.BPTTrans.Seconds()
		return t * (inv - 1/t)
	}
	var ref float64
	var nref int
	lagging := map[string]monitor.Class{}
	for _, w := range workers {
		if w.SamplesTrans == 0 || w.BPTTrans <= 0 {
			continue
		}
		switch c := classify(w, lambda); c {
		case monitor.Healthy:
			ref += tau(w)
			nref++
		case monitor.Transient, monitor.Persistent:
			lagging[w.Node] = c
		}
	}
	want := make(map[string]float64, len(workers))
	ev := map[string]float64{"lambda": lambda, "min_scale": floor}
	var why []string
	if nref > 0 && len(lagging) > 0 {
		ref /= float64(nref)
		ev["staleness_ref"] = ref
	}
	for _, w := range workers {
		want[w.Node] = 1
		c, ok := lagging[w.Node]
		if !ok || nref == 0 {
			continue
		}
		ti := tau(w)
		scale := 1.0
		if ti > 0 {
			scale = math.Max(floor, math.Min(1, ref/ti))
		}
		want[w.Node] = scale
		ev[w.Node+"/staleness"] = ti
		why = append(why, fmt.Sprintf("%s: staleness %s updates against %s for healthy workers → learning rate × %s",
			straggling(s, w, c, lambda, ev), num(ti), num(ref), num(scale)))
	}
	changed := false
	for _, w := range workers {
		have, ok := j.LRScale[w.Node]
		if !ok {
			have = 1
		}
		if math.Abs(want[w.Node]-have) > lrTolerance {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	reason := strings.Join(why, "; ")
	pred := "lagging workers' stale gradients weigh less"
	if len(why) == 0 {
		reason = fmt.Sprintf("no worker lags (λ = %s): every learning-rate scale back to 1", num(lambda))
		pred = "every worker at the base learning rate"
	}
	keys := slices.Sorted(maps.Keys(lagging))
	return []Action{{
		Kind:      KindAdjustLR,
		Policy:    NameAdjustLR,
		LRScale:   want,
		Reason:    reason,
		Evidence:  ev,
		Predicted: pred,
		Key:       NameAdjustLR + "/" + string(KindAdjustLR) + "/" + strings.Join(keys, ","),
	}}
}

// LRMinScale is ADJUST_LR's one parameter.
var LRMinScale = policydecl.Param{Name: "min_scale", Type: policydecl.Float, Default: 0, Min: 0, MinOpen: true, Max: 1, ZeroDefault: true,
	Source: "AntDT Table II (ADJUST_LR): a floor on the η/τ scale, in (0, 1] (0: 0.1)"}

// adjustLRPolicy is ADJUST_LR in the registry, with the Monitor's λ
// (AntDT-ND's).
type adjustLRPolicy struct{}

func (adjustLRPolicy) Decl() policydecl.Policy {
	return policydecl.Policy{Name: NameAdjustLR, Doc: "AntDT Table II: scale down a lagging worker's learning rate (asynchronous training)",
		Params: []policydecl.Param{LRMinScale}}
}

func (adjustLRPolicy) Propose(s Snapshot, _ *rand.Rand) []Action {
	return AdjustLR{Lambda: s.Monitor.Config.Lambda, MinScale: s.Params.Float(LRMinScale)}.Propose(s.Monitor, s.Job)
}
