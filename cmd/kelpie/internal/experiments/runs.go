package experiments

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/kelpie/kelpie/scheduler/manager"
)

// A row runs its sides N times (--runs), interleaved: round i runs every
// spec of every row once before round i+1 starts, so a slow minute of the
// machine falls on both sides of a comparison instead of on one. The row is
// judged on the median run set (medianSet), and the table shows each side's
// figure and the ratio with their median and min–max over the rounds
// (Values).

// Metric reads one figure of a run: what a row compares.
type Metric struct {
	Name string // "JCT", "samples/s", ...
	Unit string // printed after the value: "s", "ms", "", ...
	// Scale multiplies the value for printing (1000 for seconds shown in ms).
	Scale float64
	Of    func(*manager.Result) float64
}

// The metrics rows compare.
var (
	MetricJCT        = Metric{"JCT", "s", 1, func(r *manager.Result) float64 { return r.JCTSeconds }}
	MetricThroughput = Metric{"samples/s", "", 1, func(r *manager.Result) float64 { return r.Throughput }}
	MetricDPRs       = Metric{"DPRs", "", 1, func(r *manager.Result) float64 { return float64(r.DPRs) }}
	MetricIteration  = Metric{"iteration", "ms", 1e3, iterationTime}
	MetricCrossBytes = Metric{"cross-rack", "MB", 1e-6, func(r *manager.Result) float64 { return float64(r.BytesCrossRegion) }}
	MetricStall      = Metric{"stall", "s", 1, func(r *manager.Result) float64 {
		_, secs, ok := stalls(r)
		if !ok {
			return math.NaN()
		}
		sum := 0.0
		for _, s := range secs {
			sum += s
		}
		return sum
	}}
)

// Value is one figure of a row over the rounds.
type Value struct {
	Name   string    `json:"name"`
	Unit   string    `json:"unit,omitempty"`
	Runs   []float64 `json:"runs"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// newValue summarizes xs (NaNs, runs that measured nothing, are kept in
// Runs but left out of the summary; all NaN gives NaN).
func newValue(name, unit string, xs []float64) Value {
	v := Value{Name: name, Unit: unit, Runs: xs, Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	var ok []float64
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			ok = append(ok, x)
		}
	}
	if len(ok) == 0 {
		return v
	}
	v.Median, v.Min, v.Max = median(ok), slices.Min(ok), slices.Max(ok)
	return v
}

// String is "median [min–max] unit", or just the value for one run.
func (v Value) String() string {
	f := func(x float64) string {
		switch {
		case math.IsNaN(x):
			return "–"
		case math.Abs(x) >= 100:
			return fmt.Sprintf("%.0f", x)
		case math.Abs(x) >= 10:
			return fmt.Sprintf("%.1f", x)
		}
		return fmt.Sprintf("%.2f", x)
	}
	unit := ""
	if v.Unit != "" {
		unit = " " + v.Unit
	}
	if len(v.Runs) <= 1 {
		return fmt.Sprintf("%s %s%s", v.Name, f(v.Median), unit)
	}
	return fmt.Sprintf("%s %s%s [%s–%s]", v.Name, f(v.Median), unit, f(v.Min), f(v.Max))
}

// median is the median of xs (the mean of the middle two for an even
// count); NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// valuesFn computes some of a row's Values from its rounds.
type valuesFn func(rounds []map[string]*manager.Result) []Value

// label is a spec file's name without .yaml.
func label(f string) string { return strings.TrimSuffix(f, ".yaml") }

// perRound is f of each round (NaN where f has nothing, or is not > 0).
func perRound(rounds []map[string]*manager.Result, f func(map[string]*manager.Result) float64) []float64 {
	xs := make([]float64, len(rounds))
	for i, r := range rounds {
		xs[i] = math.NaN()
		if x := f(r); x > 0 {
			xs[i] = x
		}
	}
	return xs
}

// of is metric m of spec file in r (0 when absent).
func of(m Metric, file string, r map[string]*manager.Result) float64 {
	if res := r[file]; res != nil {
		return m.Of(res)
	}
	return 0
}

// sides is metric m of each spec, per round.
func sides(m Metric, specs ...string) valuesFn {
	return func(rounds []map[string]*manager.Result) []Value {
		var out []Value
		for _, f := range specs {
			xs := perRound(rounds, func(r map[string]*manager.Result) float64 { return of(m, f, r) * m.Scale })
			out = append(out, newValue(label(f)+" "+m.Name, m.Unit, xs))
		}
		return out
	}
}

// ratio is metric m of num over that of den, per round.
func ratio(m Metric, num, den string) valuesFn {
	return func(rounds []map[string]*manager.Result) []Value {
		xs := perRound(rounds, func(r map[string]*manager.Result) float64 {
			a, b := of(m, num, r), of(m, den, r)
			if !(a > 0 && b > 0) {
				return 0
			}
			return a / b
		})
		return []Value{newValue(fmt.Sprintf("%s/%s %s", label(num), label(den), m.Name), "×", xs)}
	}
}

// values joins valuesFns.
func values(fs ...valuesFn) valuesFn {
	return func(rounds []map[string]*manager.Result) []Value {
		var out []Value
		for _, f := range fs {
			out = append(out, f(rounds)...)
		}
		return out
	}
}

// pair is the common Values of a row comparing two specs by m: both sides
// and b over a.
func pair(m Metric, a, b string) valuesFn { return values(sides(m, a, b), ratio(m, b, a)) }

// medianSet is the run set a row is judged on: for each spec, medianResult
// of its runs over the rounds.
func medianSet(rounds []map[string]*manager.Result) map[string]*manager.Result {
	keys := map[string]bool{}
	for _, r := range rounds {
		for k := range r {
			keys[k] = true
		}
	}
	out := map[string]*manager.Result{}
	for k := range keys {
		var rs []*manager.Result
		for _, r := range rounds {
			if r[k] != nil {
				rs = append(rs, r[k])
			}
		}
		if len(rs) == len(rounds) {
			out[k] = medianResult(rs)
		}
	}
	return out
}

// medianResult is one spec's runs summarized: every figure a Judge or a
// premise reads is the median over the runs (JCT, training time,
// throughput, iterations, DPRs, bytes across regions, accuracy, paused
// time, each node's BPT, each server's bytes, each applied action's stall
// when every run applied the same actions); what is not a figure (the
// actions, the nodes and servers) comes from the run of median JCT.
func medianResult(rs []*manager.Result) *manager.Result {
	if len(rs) == 1 {
		return rs[0]
	}
	byJCT := slices.Clone(rs)
	slices.SortStableFunc(byJCT, func(a, b *manager.Result) int {
		switch {
		case a.JCTSeconds < b.JCTSeconds:
			return -1
		case a.JCTSeconds > b.JCTSeconds:
			return 1
		}
		return 0
	})
	rep := byJCT[(len(byJCT)-1)/2]
	out := *rep
	med := func(f func(*manager.Result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return median(xs)
	}
	out.JCTSeconds = med(func(r *manager.Result) float64 { return r.JCTSeconds })
	out.TrainSeconds = med(func(r *manager.Result) float64 { return r.TrainSeconds })
	out.Throughput = med(func(r *manager.Result) float64 { return r.Throughput })
	out.Accuracy = med(func(r *manager.Result) float64 { return r.Accuracy })
	out.PausedSeconds = med(func(r *manager.Result) float64 { return r.PausedSeconds })
	out.Iterations = int64(math.Round(med(func(r *manager.Result) float64 { return float64(r.Iterations) })))
	out.DPRs = int64(math.Round(med(func(r *manager.Result) float64 { return float64(r.DPRs) })))
	out.BytesCrossRegion = int64(math.Round(med(func(r *manager.Result) float64 { return float64(r.BytesCrossRegion) })))
	out.Nodes = slices.Clone(rep.Nodes)
	for i, n := range out.Nodes {
		out.Nodes[i].BPTMeanS = med(func(r *manager.Result) float64 {
			for _, x := range r.Nodes {
				if x.Name == n.Name {
					return x.BPTMeanS
				}
			}
			return math.NaN()
		})
	}
	out.Servers = slices.Clone(rep.Servers)
	for i, s := range out.Servers {
		pick := func(f func(manager.ServerResult) int64) int64 {
			return int64(math.Round(med(func(r *manager.Result) float64 {
				for _, x := range r.Servers {
					if x.Name == s.Name {
						return float64(f(x))
					}
				}
				return math.NaN()
			})))
		}
		out.Servers[i].BytesIn = pick(func(x manager.ServerResult) int64 { return x.BytesIn })
		out.Servers[i].BytesOut = pick(func(x manager.ServerResult) int64 { return x.BytesOut })
	}
	// Stalls: the median per applied action, when every run applied the
	// same kinds in the same order; otherwise the representative's.
	repKinds, _, _ := stalls(rep)
	same := true
	for _, r := range rs {
		k, _, _ := stalls(r)
		same = same && slices.Equal(k, repKinds)
	}
	if same && len(repKinds) > 0 {
		out.Actions = slices.Clone(rep.Actions)
		j := 0
		for i := range out.Actions {
			if out.Actions[i].State != "applied" {
				continue
			}
			idx := j
			j++
			xs := make([]float64, 0, len(rs))
			for _, r := range rs {
				_, secs, _ := stalls(r)
				xs = append(xs, secs[idx])
			}
			out.Actions[i].StallSeconds = nil // a run without its stall: none
			if m := median(xs); !slices.ContainsFunc(xs, math.IsNaN) {
				out.Actions[i].StallSeconds = &m
			}
		}
	}
	return &out
}
