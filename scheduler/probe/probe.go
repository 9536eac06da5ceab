// Package probe judges a node probe (kelpie job probe): every role of a
// job ran the same fixed compute kernel and every worker made round trips
// to each server; from those figures it says whether the probed node, its
// link or a server is slow, against the job's other nodes. It is pure: the
// manager collects the answers through the agents and shows what Judge
// returns.
package probe

import (
	"fmt"
	"slices"
	"strings"
)

// Slow is how many times the others' median a figure must reach to stand
// out.
const Slow = 2.0

// Verdicts.
const (
	VerdictNode    = "node"    // the node's compute kernel is slow
	VerdictLink    = "link"    // the node's round trips to every server are slow
	VerdictServer  = "server"  // one server is slow for every worker
	VerdictNone    = "none"    // nothing stands out
	VerdictUnknown = "unknown" // too few answers to compare
)

// Node is one node's answer.
type Node struct {
	Name, Role string
	KernelS    float64 // 0: no answer
	Trips      []Trip  // a worker's, one per server
	Err        string
}

// Trip is a worker's round trips to one server.
type Trip struct {
	Server string
	RTT    float64 // median round trip, seconds (0: none)
	Own    float64 // the server's own share of it
	Err    string
}

// Result is the verdict and each figure's ratio to the others' median.
type Result struct {
	Verdict string
	Subject string  // the node or server the verdict names
	Cause   string  // compute | link | server
	Ratio   float64 // the subject's figure over the others' median
	Detail  string
	// KernelRatio is each node's kernel over the median of the others'.
	KernelRatio map[string]float64
	// TripRatio is each worker's round trip to a server over the median of
	// the other workers' to the same server: [worker][server].
	TripRatio map[string]map[string]float64
}

// Judge says what the probe of target found among nodes.
func Judge(target string, nodes []Node) Result {
	r := Result{KernelRatio: map[string]float64{}, TripRatio: map[string]map[string]float64{}}
	var me *Node
	for i := range nodes {
		if nodes[i].Name == target {
			me = &nodes[i]
		}
	}
	// Kernel: each node against the median of the others'.
	for _, n := range nodes {
		if n.KernelS <= 0 {
			continue
		}
		var others []float64
		for _, o := range nodes {
			if o.Name != n.Name && o.KernelS > 0 {
				others = append(others, o.KernelS)
			}
		}
		if m := median(others); m > 0 {
			r.KernelRatio[n.Name] = n.KernelS / m
		}
	}
	// Round trips: each worker's to a server against the other workers'.
	rtt := map[string]map[string]Trip{} // [server][worker]
	for _, n := range nodes {
		for _, t := range n.Trips {
			if t.RTT > 0 {
				if rtt[t.Server] == nil {
					rtt[t.Server] = map[string]Trip{}
				}
				rtt[t.Server][n.Name] = t
			}
		}
	}
	for s, by := range rtt {
		for w, t := range by {
			var others []float64
			for o, ot := range by {
				if o != w {
					others = append(others, ot.RTT)
				}
			}
			if m := median(others); m > 0 {
				if r.TripRatio[w] == nil {
					r.TripRatio[w] = map[string]float64{}
				}
				r.TripRatio[w][s] = t.RTT / m
			}
		}
	}
	// Servers: the workers' median round trip to each against the other
	// servers'.
	serverRTT, serverOwn := map[string]float64{}, map[string]float64{}
	for s, by := range rtt {
		var rs, os []float64
		for _, t := range by {
			rs, os = append(rs, t.RTT), append(os, t.Own)
		}
		serverRTT[s], serverOwn[s] = median(rs), median(os)
	}
	serverRatio := map[string]float64{}
	for s, v := range serverRTT {
		var others []float64
		for o, ov := range serverRTT {
			if o != s {
				others = append(others, ov)
			}
		}
		if m := median(others); m > 0 {
			serverRatio[s] = v / m
		}
	}

	switch {
	case me == nil:
		r.Verdict, r.Detail = VerdictUnknown, fmt.Sprintf("%s: not a node of the job", target)
		return r
	case me.KernelS <= 0:
		r.Verdict, r.Detail = VerdictUnknown, fmt.Sprintf("%s: no answer (%s)", target, orNone(me.Err))
		return r
	}
	if k, ok := r.KernelRatio[target]; ok && k >= Slow {
		r.Verdict, r.Subject, r.Cause, r.Ratio = VerdictNode, target, "compute", k
		r.Detail = fmt.Sprintf("%s: the node is slow — kernel %.1f× the median of the job's other nodes", target, k)
		return r
	}
	if me.Role != "server" {
		if l := median(values(r.TripRatio[target])); len(r.TripRatio[target]) > 0 && l >= Slow && allAtLeast(r.TripRatio[target], Slow) {
			r.Verdict, r.Subject, r.Cause, r.Ratio = VerdictLink, target, "link", l
			r.Detail = fmt.Sprintf("%s: its link is slow — round trips %.1f× the other workers' to every server", target, l)
			return r
		}
	}
	// A server slow for every worker: the probed server itself, or for a
	// worker the slowest server it reaches.
	worst, wr := "", 0.0
	for _, s := range sortedKeys(serverRatio) {
		if me.Role == "server" && s != target {
			continue
		}
		if v := serverRatio[s]; v >= Slow && v > wr && everyWorkerSlow(rtt[s], serverRTT, s) {
			worst, wr = s, v
		}
	}
	if worst != "" {
		r.Verdict, r.Subject, r.Ratio = VerdictServer, worst, wr
		share := 0.0
		if serverRTT[worst] > 0 {
			share = serverOwn[worst] / serverRTT[worst]
		}
		if share >= 0.5 {
			r.Cause = "server"
			r.Detail = fmt.Sprintf("%s is slow — round trips to it %.1f× the other servers' for every worker; its own handling holds %.0f%% of them", worst, wr, 100*share)
		} else {
			r.Cause = "link"
			r.Detail = fmt.Sprintf("%s's link is slow — round trips to it %.1f× the other servers' for every worker; its own handling holds %.0f%% of them", worst, wr, 100*share)
		}
		return r
	}
	k, hasK := r.KernelRatio[target]
	if !hasK && len(r.TripRatio[target]) == 0 && len(serverRatio) == 0 {
		r.Verdict, r.Detail = VerdictUnknown, fmt.Sprintf("%s: no other node answered to compare with", target)
		return r
	}
	r.Verdict = VerdictNone
	parts := []string{}
	if hasK {
		parts = append(parts, fmt.Sprintf("kernel %.1f×", k))
	}
	if t := r.TripRatio[target]; len(t) > 0 {
		parts = append(parts, fmt.Sprintf("round trips %.1f×", median(values(t))))
	}
	if me.Role == "server" {
		if v, ok := serverRatio[target]; ok {
			parts = append(parts, fmt.Sprintf("round trips to it %.1f×", v))
		}
	}
	r.Detail = fmt.Sprintf("%s: nothing stands out (%s the others' median)", target, strings.Join(parts, ", "))
	return r
}

// everyWorkerSlow says whether every worker's round trip to s is at least
// Slow times the median of the other servers' round trips: a server slow
// for all, not one worker's link.
func everyWorkerSlow(by map[string]Trip, serverRTT map[string]float64, s string) bool {
	var others []float64
	for o, v := range serverRTT {
		if o != s {
			others = append(others, v)
		}
	}
	m := median(others)
	if m <= 0 || len(by) == 0 {
		return false
	}
	for _, t := range by {
		if t.RTT < Slow*m {
			return false
		}
	}
	return true
}

func allAtLeast(m map[string]float64, v float64) bool {
	for _, x := range m {
		if x < v {
			return false
		}
	}
	return true
}

func values(m map[string]float64) []float64 {
	out := make([]float64, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func sortedKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// median of xs (0 when empty).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
