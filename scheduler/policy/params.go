package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Bound is the range a policy parameter may take while a job runs, and
// where the range comes from. The job spec's validation (core/spec)
// states the same ranges for the spec's keys; SetPolicy checks live edits
// against these, so that an edit cannot put a policy where the paper's
// rule no longer means anything (λ below 1 makes every node a straggler).
type Bound struct {
	Policy, Param string
	// Min and Max bound the value; MinOpen and MaxOpen exclude the
	// bound itself. Max is +Inf when there is none.
	Min, Max         float64
	MinOpen, MaxOpen bool
	// Whole asks for a whole number (a count); Flag for 0 or 1.
	Whole, Flag bool
	// ZeroDefault: 0 is accepted and means the default (below Min).
	ZeroDefault bool
	// Source says why: the paper and section the bound comes from.
	Source string
}

// Bounds lists every policy parameter a job's settings hold, in the order
// the console shows them.
var Bounds = []Bound{
	{Policy: NameAntDTND, Param: "lambda", Min: 1, MinOpen: true, Max: math.Inf(1),
		Source: "AntDT §VI-A 3: λ is the slowness ratio T̄ᵢ/T̄ over the mean; at or below 1 every node at the mean straggles (the paper uses values above 1.3)"},
	{Policy: NameAntDTND, Param: "window_transient_s", Min: 0, MinOpen: true, Max: math.Inf(1),
		Source: "AntDT §VI-A 1: L^trans, the short window, is a length of time"},
	{Policy: NameAntDTND, Param: "window_persistent_s", Min: 0, MinOpen: true, Max: math.Inf(1),
		Source: "AntDT §VI-A 1: L^per, the long window, at least L^trans"},
	{Policy: NameAntDTDD, Param: "min_accumulation", Min: 1, Max: math.Inf(1), Whole: true,
		Source: "AntDT §VI-B Eq. 4: Ĉ^min, at least one micro-batch per iteration"},
	{Policy: NameAntDTDD, Param: "max_accumulation", Min: 1, Max: math.Inf(1), Whole: true,
		Source: "AntDT §VI-B Eq. 4: Ĉ^max ≥ Ĉ^min"},
	{Policy: NameAntDTDD, Param: "min_batch", Min: 1, Max: math.Inf(1), Whole: true,
		Source: "AntDT §VI-B Eq. 4: B̂^min, the smallest micro-batch worth running, at least 1 sample"},
	{Policy: NameAntDTDD, Param: "max_batch", Min: 1, Max: math.Inf(1), Whole: true, ZeroDefault: true,
		Source: "AntDT §VI-B Eq. 4: B̂^max ≥ B̂^min, a device's memory limit (0: the global batch)"},
	{Policy: NameBackupWorkers, Param: "drop", Min: 1, Max: math.Inf(1), Whole: true,
		Source: "AntDT Table II (BACKUP_WORKERS, after Sync-OPT): b gradients dropped per iteration, 1 ≤ b < workers"},
	{Policy: NameAdjustLR, Param: "min_scale", Min: 0, MinOpen: true, Max: 1, ZeroDefault: true,
		Source: "AntDT Table II (ADJUST_LR): a floor on the η/τ scale, in (0, 1] (0: 0.1)"},
	{Policy: NamePSLD, Param: "epsilon", Min: 0, Max: 1,
		Source: "PSLD §4.3 Alg. 3: ε is the probability of exploring, in [0, 1]"},
	{Policy: NamePSLD, Param: "theta1_over_theta0", Min: 0, Max: math.Inf(1),
		Source: "PSLD §4.3 Alg. 2: the cost weights θ0, θ1 are not negative"},
	{Policy: NamePSLD, Param: "scale_threshold", Min: 0, Max: 1,
		Source: "PSLD Alg. 1 lines 11–12: scale out when |superior| < threshold·|PS|, a fraction (1/2 in the paper)"},
	{Policy: NamePSLD, Param: "variance_threshold", Min: 0, Max: math.Inf(1),
		Source: "PSLD §4: the PS speed variation (best−worst)/worst is not negative (1 in the paper)"},
	{Policy: NamePSLD, Param: "strawman", Min: 0, Max: 1, Flag: true,
		Source: "kelpie: 1 assigns blocks by speed (PSLD §6's baseline), 0 runs Alg. 1–3"},
}

// BoundOf returns the bound of one policy parameter.
func BoundOf(policy, param string) (Bound, bool) {
	i := slices.IndexFunc(Bounds, func(b Bound) bool { return b.Policy == policy && b.Param == param })
	if i < 0 {
		return Bound{}, false
	}
	return Bounds[i], true
}

// Range writes the bound for people: "> 1", "in [0, 1]", "a whole number ≥ 1".
func (b Bound) Range() string {
	var s string
	switch {
	case b.Flag:
		return "0 or 1"
	case math.IsInf(b.Max, 1):
		op := "≥"
		if b.MinOpen {
			op = ">"
		}
		s = op + " " + fnum(b.Min)
	default:
		lo, hi := "[", "]"
		if b.MinOpen {
			lo = "("
		}
		if b.MaxOpen {
			hi = ")"
		}
		s = "in " + lo + fnum(b.Min) + ", " + fnum(b.Max) + hi
	}
	if b.Whole {
		s = "a whole number " + s
	}
	if b.ZeroDefault {
		s += " (or 0 for the default)"
	}
	return s
}

// Check says whether x is within the bound.
func (b Bound) Check(x float64) error {
	bad := math.IsNaN(x) || math.IsInf(x, 0)
	if !bad && b.ZeroDefault && x == 0 {
		return nil
	}
	switch {
	case bad:
	case b.Flag:
		bad = x != 0 && x != 1
	case b.Whole && x != math.Trunc(x):
		bad = true
	case x < b.Min || b.MinOpen && x == b.Min:
		bad = true
	case x > b.Max || b.MaxOpen && x == b.Max:
		bad = true
	}
	if bad {
		return fmt.Errorf("%s %s must be %s, not %s (%s)", b.Policy, b.Param, b.Range(), fnum(x), b.Source)
	}
	return nil
}

// CheckParams checks a policy's parameters as they would be after an
// edit: each against its bound, and the rules between them (L^per ≥
// L^trans, Ĉ^max ≥ Ĉ^min, B̂^max ≥ B̂^min, b < workers). workers is the
// job's worker count (0: unknown, not checked). Parameters without a
// bound (none today) pass.
func CheckParams(policy string, p map[string]float64, workers int) error {
	names := make([]string, 0, len(p))
	for k := range p {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if b, ok := BoundOf(policy, k); ok {
			if err := b.Check(p[k]); err != nil {
				return err
			}
		}
	}
	pair := func(lo, hi, why string) error {
		l, okl := p[lo]
		h, okh := p[hi]
		if okl && okh && h != 0 && h < l {
			return fmt.Errorf("%s %s (%s) must be at least %s (%s) (%s)", policy, hi, fnum(h), lo, fnum(l), why)
		}
		return nil
	}
	switch policy {
	case NameAntDTND:
		return pair("window_transient_s", "window_persistent_s", "AntDT §VI-A 1: the long window L^per is at least the short one L^trans")
	case NameAntDTDD:
		if err := pair("min_accumulation", "max_accumulation", "AntDT §VI-B Eq. 4: Ĉ^min ≤ Ĉ^max"); err != nil {
			return err
		}
		return pair("min_batch", "max_batch", "AntDT §VI-B Eq. 4: B̂^min ≤ B̂^max")
	case NameBackupWorkers:
		if d, ok := p["drop"]; ok && workers > 0 && d >= float64(workers) {
			return fmt.Errorf("%s drop must be less than the job's %s, not %s (AntDT Table II: the iteration goes ahead with the first n − b gradients)",
				policy, plural(workers, "worker"), fnum(d))
		}
	}
	return nil
}

// BoundsText lists a policy's parameter ranges ("lambda > 1, ..."), for
// help texts.
func BoundsText(policy string) string {
	var parts []string
	for _, b := range Bounds {
		if b.Policy == policy {
			parts = append(parts, b.Param+" "+b.Range())
		}
	}
	return strings.Join(parts, ", ")
}

// fnum writes a parameter value as people type it: "1.5", "0.2", "20".
func fnum(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
