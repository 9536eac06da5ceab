// Package cause names why a straggler is slow: from each node's time split
// (a worker's compute, data loading, push, pull and wait per iteration; a
// server's link, queueing and handling per request) it finds the phase
// that exceeds the job's median of that phase by the most seconds, and
// says by how much ("worker-2: compute 3.1× median"). It is pure: the
// manager feeds it what the reports said and shows what it returns.
package cause

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Kind is a cause: a phase of a node's time.
type Kind string

// The kinds (the console's NodeCause.kind).
const (
	Compute Kind = "compute" // a worker's gradient (its device or host)
	Data    Kind = "data"    // a worker's batch preparation
	Push    Kind = "push"    // a worker's gradients on the wire
	Pull    Kind = "pull"    // a worker's parameters on the wire
	Wait    Kind = "wait"    // a worker held by the pull condition
	Link    Kind = "link"    // a server's link: its round trips less its own handling
	Server  Kind = "server"  // a server's own queueing and handling
)

// Cause is the dominant cause of one node's slowness.
type Cause struct {
	Kind    Kind
	Ratio   float64 // Seconds / Median
	Seconds float64 // the node's time in that phase (per iteration or per request)
	Median  float64 // the job's median of it
	Detail  string  // "compute 3.1× median"
}

// Phases is a worker's time per iteration in each phase (seconds).
type Phases struct {
	Compute, Data, Push, Pull, Wait float64
}

func (p Phases) of(k Kind) float64 {
	switch k {
	case Compute:
		return p.Compute
	case Data:
		return p.Data
	case Push:
		return p.Push
	case Pull:
		return p.Pull
	case Wait:
		return p.Wait
	}
	return 0
}

// workerKinds are the phases a worker's cause is chosen from, in the order
// ties go.
var workerKinds = []Kind{Compute, Data, Push, Pull, Wait}

// Own is a server's own time per request (seconds) and the workers' mean
// round trip to it (less the pull condition's hold).
type Own struct {
	RoundTrip    float64
	Queue, Apply float64
	// SlowFor and Workers: how many of the workers that talk to it find
	// it slower than their median server (1.5× and more), of how many.
	SlowFor, Workers int
}

// link is the part of the round trip that is neither queueing nor
// handling: the wire both ways.
func (o Own) link() float64 { return max(o.RoundTrip-o.Queue-o.Apply, 0) }

func (o Own) server() float64 { return o.Queue + o.Apply }

// minMedian keeps a ratio finite when the job's median of a phase is
// (nearly) zero: a microsecond.
const minMedian = 1e-6

// Workers returns the dominant cause of each worker against the others:
// for every phase the median over the other workers, and for each worker
// the phase it exceeds that median by the most seconds. A worker exceeding
// no median, or alone (no others to compare with), has none. The node's
// own time is left out of the median it is compared with: with two
// servers a median that held the slow one would halve its ratio.
func Workers(ws map[string]Phases) map[string]Cause {
	if len(ws) < 2 {
		return nil
	}
	sorted := map[Kind][]float64{}
	for _, k := range workerKinds {
		xs := make([]float64, 0, len(ws))
		for _, p := range ws {
			xs = append(xs, p.of(k))
		}
		sort.Float64s(xs)
		sorted[k] = xs
	}
	out := map[string]Cause{}
	for name, p := range ws {
		best, excess, median := Kind(""), 0.0, 0.0
		for _, k := range workerKinds {
			m := medianWithout(sorted[k], p.of(k))
			if e := p.of(k) - m; e > excess {
				best, excess, median = k, e, m
			}
		}
		if best != "" {
			out[name] = cause(best, p.of(best), median, "")
		}
	}
	return out
}

// Servers returns the dominant cause of each server against the others:
// its link (the round trips its workers measure, less its own queueing
// and handling) or itself (queueing and handling), whichever exceeds the
// other servers' median by more.
func Servers(ss map[string]Own) map[string]Cause {
	if len(ss) < 2 {
		return nil
	}
	var links, owns []float64
	for _, o := range ss {
		links, owns = append(links, o.link()), append(owns, o.server())
	}
	sort.Float64s(links)
	sort.Float64s(owns)
	out := map[string]Cause{}
	for name, o := range ss {
		ml, ms := medianWithout(links, o.link()), medianWithout(owns, o.server())
		el, es := o.link()-ml, o.server()-ms
		switch {
		case el > 0 && el >= es:
			out[name] = cause(Link, o.link(), ml, reach(o))
		case es > 0:
			out[name] = cause(Server, o.server(), ms, reach(o))
		}
	}
	return out
}

// medianWithout is the median of sorted (ascending) with one occurrence
// of x left out, in O(log n).
func medianWithout(sorted []float64, x float64) float64 {
	p := sort.SearchFloat64s(sorted, x)
	n := len(sorted) - 1
	at := func(i int) float64 {
		if i >= p {
			i++
		}
		return sorted[i]
	}
	switch {
	case n <= 0:
		return math.NaN()
	case n%2 == 1:
		return at(n / 2)
	}
	return (at(n/2-1) + at(n/2)) / 2
}

// reach says which workers find the server slow.
func reach(o Own) string {
	switch {
	case o.Workers > 1 && o.SlowFor == o.Workers:
		return "pull wait on every worker"
	case o.SlowFor > 0:
		return fmt.Sprintf("slow for %d of %d workers", o.SlowFor, o.Workers)
	}
	return ""
}

func cause(k Kind, x, median float64, more string) Cause {
	r := x / max(median, minMedian)
	d := fmt.Sprintf("%s %s× median", k, ratio(r))
	if more != "" {
		d += " — " + more
	}
	return Cause{Kind: k, Ratio: r, Seconds: x, Median: median, Detail: d}
}

// ratio prints a ratio with two significant digits (3.1, 12, 140).
func ratio(r float64) string {
	switch {
	case r < 10:
		return fmt.Sprintf("%.1f", r)
	default:
		return fmt.Sprintf("%.0f", r)
	}
}

// Median is the median of xs (the mean of the middle two for an even
// count); NaN for none. xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// SlowFor counts, for server, the workers whose round trip to it is at
// least SlowFactor times their median round trip over the servers they
// talk to, of the workers that talk to it and to another server.
// rt is each worker's mean round trip per server.
func SlowFor(rt map[string]map[string]float64, server string) (slow, of int) {
	for _, per := range rt {
		x, ok := per[server]
		if !ok || len(per) < 2 {
			continue
		}
		var others []float64
		for s, y := range per {
			if s != server {
				others = append(others, y)
			}
		}
		of++
		if x >= SlowFactor*Median(others) {
			slow++
		}
	}
	return slow, of
}

// Slowness is what SlowFor counts for one server.
type Slowness struct{ Slow, Of int }

// SlowForEach is SlowFor of every server, in one pass over the workers:
// O(workers × servers a worker talks to), where calling SlowFor for each
// server is O(servers × workers) — a million map reads per view at 20,000
// workers and 50 servers.
// Each worker's round trips are one entry per server (Recent.MeanTrips).
func SlowForEach(rt map[string][]ServerMean) map[string]Slowness {
	out := map[string]Slowness{}
	var others []float64
	for _, per := range rt {
		if len(per) < 2 {
			continue
		}
		for i, x := range per {
			others = others[:0]
			for k, y := range per {
				if k != i {
					others = append(others, y.Seconds)
				}
			}
			c := out[x.Server]
			c.Of++
			if x.Seconds >= SlowFactor*Median(others) {
				c.Slow++
			}
			out[x.Server] = c
		}
	}
	return out
}

// SlowFactor is how much slower than a worker's other servers a server
// must be for that worker to count it slow.
const SlowFactor = 1.5

// Describe is node's cause as a line for people: "worker-2: compute 3.1×
// median".
func Describe(node string, c Cause) string {
	return strings.TrimSpace(node + ": " + c.Detail)
}
