package experiments

import (
	"fmt"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/manager"
	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// A row's premise is what must be true of its runs for the comparison to
// mean what the paper's does: the straggler really slowed its node, the
// baseline really paid for it, the link really was the scarce resource.
// Every row prints its premise check beside its target; a row whose
// premise does not hold does not pass, whatever its target says.

// bpt is node's mean batch processing time in res (0 when absent).
func bpt(res *manager.Result, node string) float64 {
	for _, n := range res.Nodes {
		if n.Name == node {
			return n.BPTMeanS
		}
	}
	return 0
}

// peersBPT is the mean BPT of res's workers other than node.
func peersBPT(res *manager.Result, node string) float64 {
	sum, n := 0.0, 0
	for _, x := range res.Nodes {
		if x.Role == "worker" && x.Name != node && x.BPTMeanS > 0 {
			sum += x.BPTMeanS
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// SlowWorker is the premise "node is a straggler in the baseline run": its
// mean BPT in file's run above its peers'.
func SlowWorker(file, node string) func(map[string]*manager.Result) (string, bool) {
	return func(r map[string]*manager.Result) (string, bool) {
		if m := missing(r, file); m != "" {
			return m, false
		}
		b, p := bpt(r[file], node), peersBPT(r[file], node)
		if !(b > 0 && p > 0) {
			return fmt.Sprintf("%s's BPT %.1f ms, peers' %.1f ms: not measured", node, b*1e3, p*1e3), false
		}
		return fmt.Sprintf("%s's BPT %.1f ms vs its peers' %.1f ms (%.2f×) under the baseline", node, b*1e3, p*1e3, b/p), b > p
	}
}

// injected is the spec's first straggler entry for node of kind.
func injected(file, node, kind string) (spec.Straggler, bool) {
	s, err := Spec(file)
	if err != nil {
		return spec.Straggler{}, false
	}
	for _, st := range s.Stragglers {
		if st.Node == node && st.Kind == kind {
			return st, true
		}
	}
	return spec.Straggler{}, false
}

// LinkSaturated is the premise "server's capped link is what limits file's
// run": the busier direction of its link carried at least 60 % of the cap
// on average over the training time.
func LinkSaturated(file, server string) func(map[string]*manager.Result) (string, bool) {
	return func(r map[string]*manager.Result) (string, bool) {
		if m := missing(r, file); m != "" {
			return m, false
		}
		st, ok := injected(file, server, spec.StragglerBandwidth)
		res := r[file]
		if !ok || !(st.Rate > 0) || !(res.TrainSeconds > 0) {
			return fmt.Sprintf("%s: no bandwidth cap on %s or no training time", file, server), false
		}
		var moved int64
		for _, s := range res.Servers {
			if s.Name == server {
				moved = max(s.BytesIn, s.BytesOut)
			}
		}
		x := float64(moved) / res.TrainSeconds / st.Rate
		return fmt.Sprintf("%s's link carried %.0f %% of its %.0f MiB/s cap under %s", server, 100*x, st.Rate/(1<<20), file), x >= 0.6
	}
}

// DelayBites is the premise "the delay injected into node's requests or
// iterations is a visible share of file's iteration": the run's mean
// iteration time at least sleep × intensity.
func DelayBites(file, node string) func(map[string]*manager.Result) (string, bool) {
	return func(r map[string]*manager.Result) (string, bool) {
		if m := missing(r, file); m != "" {
			return m, false
		}
		st, ok := injected(file, node, spec.StragglerCompute)
		it := iterationTime(r[file])
		if !ok || it == 0 {
			return fmt.Sprintf("%s: no compute straggler on %s or no iterations", file, node), false
		}
		d := st.Sleep.Seconds() * st.Intensity
		return fmt.Sprintf("%s's delay %.1f ms per request vs the baseline's iteration %.1f ms", node, d*1e3, it*1e3), it >= d
	}
}

// allOf joins premises: each is checked and printed.
func allOf(ps ...func(map[string]*manager.Result) (string, bool)) func(map[string]*manager.Result) (string, bool) {
	return func(r map[string]*manager.Result) (string, bool) {
		ok := true
		var text string
		for i, p := range ps {
			t, o := p(r)
			if i > 0 {
				text += "; "
			}
			text += t
			ok = ok && o
		}
		return text, ok
	}
}

// AppliedIn is the premise "res applied at least one action of a kind the
// row compares" (a change that never happened proves nothing).
func AppliedIn(file string) func(map[string]*manager.Result) (string, bool) {
	return func(r map[string]*manager.Result) (string, bool) {
		if m := missing(r, file); m != "" {
			return m, false
		}
		k := appliedKinds(r[file])
		n := 0
		for _, c := range k {
			n += c
		}
		return fmt.Sprintf("%s applied %v", file, k), n > 0
	}
}

// RecoverySensed is the premise "file's run went on long enough after
// server's slow period for the scheduler to sense the recovery": it
// trained at least one of the Monitor's long windows past the end of the
// server's slowed bandwidth (the window of the servers' profiles, which
// PSLD reads: the spec's antdt-nd window_persistent, 20 s by default).
func RecoverySensed(file, server string) func(map[string]*manager.Result) (string, bool) {
	return func(r map[string]*manager.Result) (string, bool) {
		if m := missing(r, file); m != "" {
			return m, false
		}
		s, err := Spec(file)
		if err != nil {
			return err.Error(), false
		}
		end := time.Duration(0)
		for _, st := range s.Stragglers {
			if st.Node == server && st.Kind == spec.StragglerBandwidth && st.End > end {
				end = st.End
			}
		}
		if end == 0 {
			return fmt.Sprintf("%s has no bandwidth straggler that ends", server), false
		}
		window := monitor.DefaultConfig().LPer
		if w := s.Policies[policy.NameAntDTND].Params.Duration(policy.NDWindowPersistent); w > 0 {
			window = w
		}
		t := r[file].TrainSeconds
		past := t - end.Seconds()
		return fmt.Sprintf("the run trained %.1f s, past %s's slow period (%v) by %.1f s; the long window that must see the recovery is %v",
			t, server, end, past, window), past >= window.Seconds()
	}
}
