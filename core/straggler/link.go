package straggler

import (
	"math"
	"time"
)

// LinkTarget is what a link injection shapes: one node's link (Node) or
// one rack's uplink (Region).
type LinkTarget struct{ Node, Region string }

// LinkRates returns the cap in force at t on every link some injection of
// kind link targets: the lowest rate among the active ones, or 0 when none
// is active (the link runs at its own rate). Every targeted link has an
// entry, so that a caller applying the map also lifts ended caps.
func LinkRates(all []Injection, t time.Duration) map[LinkTarget]float64 {
	out := map[LinkTarget]float64{}
	for _, in := range all {
		if in.Kind != Link {
			continue
		}
		k := LinkTarget{Node: in.Node, Region: in.Region}
		cur, seen := out[k]
		if !seen {
			out[k] = 0
		}
		if in.Active(t) && (cur == 0 || in.Rate < cur) {
			out[k] = in.Rate
		}
	}
	return out
}

// NextLinkChange is the first time after t at which a link injection
// starts or stops being active; ok is false when none ever changes again.
func NextLinkChange(all []Injection, t time.Duration) (time.Duration, bool) {
	next := time.Duration(math.MaxInt64)
	for _, in := range all {
		if in.Kind != Link {
			continue
		}
		for _, e := range in.edges(t) {
			if e > t && e < next {
				next = e
			}
		}
	}
	return next, next != math.MaxInt64
}

// edges are the next times after t at which in turns on or off.
func (in Injection) edges(t time.Duration) []time.Duration {
	out := []time.Duration{in.Start}
	if in.End != 0 {
		out = append(out, in.End)
	}
	if in.Period > 0 && t >= in.Start {
		k := (t - in.Start) / in.Period
		on := in.Start + k*in.Period
		for _, e := range []time.Duration{on + in.On, on + in.Period} {
			if in.End == 0 || e < in.End {
				out = append(out, e)
			}
		}
	}
	return out
}
