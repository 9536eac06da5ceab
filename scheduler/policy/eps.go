package policy

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// EPS's heuristic multi-job scheduler (EPS §4, Alg. 1) decides how many
// workers and servers each job of a cluster gets. It works on job sizes,
// not on one job's snapshot, and returns size changes (Delta) that the job
// manager turns into ADD_/REMOVE_WORKER and ADD_/REMOVE_SERVER steps.
//
// One difference from the paper: EPS divides one pool of containers
// between workers and servers in the ratio the job asks for (Alg. 1 lines
// 2–4, 30–31); kelpie's capacity already comes as worker slots and server
// slots, so the free slots of each kind are used as they are.

// Capacity is how many workers and servers the cluster can run at once.
type Capacity struct{ Workers, Servers int }

// JobState is one job as the multi-job scheduler sees it.
type JobState struct {
	Name             string
	Workers, Servers int // running now (for an incoming job: requested)
	// MinWorkers and MinServers are the least the job may shrink to; EPS
	// never goes below one of each (Alg. 1 lines 13–16).
	MinWorkers, MinServers int
	// MaxWorkers and MaxServers stop growth (zero: no limit). Set them to
	// the current size after a back-off so the job stops probing.
	MaxWorkers, MaxServers int
	// Removable says the job may give up nodes to an incoming job.
	Removable bool
	// EarlyFeedback says the job has not yet given its early feedback (its
	// first results, on which the user decides to keep or kill it): it is
	// protected from shrinking and is not grown (§4.1 rule 1, §4.2).
	EarlyFeedback bool
	// Throughput is the job's training speed now; PrevThroughput the speed
	// before LastGrowth was applied.
	Throughput, PrevThroughput float64
	// LastGrowth is what the previous GrowRunning gave the job (zero when
	// it was not grown, or the growth has been judged since).
	LastGrowth Delta
	Submitted  time.Duration // tie-break: earlier jobs first
}

// Delta is a change in a job's size: negative counts remove nodes.
type Delta struct {
	Workers, Servers int
	Reason           string
}

// IsZero reports whether d changes nothing.
func (d Delta) IsZero() bool { return d.Workers == 0 && d.Servers == 0 }

// AdmitIncoming is EPS's incoming-job scheduling (Alg. 1 lines 1–27). When
// the free slots cannot hold the incoming job, nodes are taken from
// removable jobs — past their early-feedback phase and with more than one
// worker (server) — sorted by size, largest first, one node per job per
// round (round-robin) until the job fits. shrink holds the (negative)
// Delta of each job that gives nodes up; ok is false, with nothing shrunk,
// when the job cannot fit even so. reason says what was decided and why.
func AdmitIncoming(c Capacity, running []JobState, incoming JobState) (shrink map[string]Delta, ok bool, reason string) {
	usedW, usedS := 0, 0
	for _, j := range running {
		usedW += j.Workers
		usedS += j.Servers
	}
	freeW, freeS := max(c.Workers-usedW, 0), max(c.Servers-usedS, 0)
	needW, needS := incoming.Workers-freeW, incoming.Servers-freeS
	asked := fmt.Sprintf("%s asks for %s and %s; %s and %s free",
		incoming.Name, plural(incoming.Workers, "worker"), plural(incoming.Servers, "server"),
		plural(freeW, "worker"), plural(freeS, "server"))
	if needW <= 0 && needS <= 0 {
		return map[string]Delta{}, true, asked + ": it fits"
	}
	if incoming.Workers > c.Workers || incoming.Servers > c.Servers {
		return nil, false, fmt.Sprintf("%s; the cluster has only %s and %s", asked,
			plural(c.Workers, "worker"), plural(c.Servers, "server"))
	}

	var protected []string
	for _, j := range running {
		if j.EarlyFeedback {
			protected = append(protected, j.Name)
		}
	}
	workers := take(running, needW,
		func(j JobState) int { return j.Workers },
		func(j JobState) int { return max(j.MinWorkers, 1) })
	servers := take(running, needS,
		func(j JobState) int { return j.Servers },
		func(j JobState) int { return max(j.MinServers, 1) })
	note := ""
	if len(protected) > 0 {
		note = "; " + list(protected) + " protected in early feedback"
	}
	if workers == nil || servers == nil {
		short := "workers"
		if workers != nil {
			short = "servers"
		}
		return nil, false, fmt.Sprintf("%s; removable jobs cannot give up enough %s%s", asked, short, note)
	}
	shrink = make(map[string]Delta)
	for name, n := range workers {
		d := shrink[name]
		d.Workers = -n
		shrink[name] = d
	}
	for name, n := range servers {
		d := shrink[name]
		d.Servers = -n
		shrink[name] = d
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(shrink)) {
		d := shrink[name]
		var what []string
		if d.Workers < 0 {
			what = append(what, plural(-d.Workers, "worker"))
		}
		if d.Servers < 0 {
			what = append(what, plural(-d.Servers, "server"))
		}
		gives := strings.Join(what, " and ")
		d.Reason = fmt.Sprintf("gives %s to incoming job %s (EPS incoming-job scheduling)", gives, incoming.Name)
		shrink[name] = d
		parts = append(parts, name+" by "+gives)
	}
	return shrink, true, fmt.Sprintf("%s: shrink %s (round-robin over removable jobs, largest first)%s",
		asked, strings.Join(parts, ", "), note)
}

// take decides how many nodes of one kind each removable job gives up to
// free need of them (Alg. 1 lines 8–26): the jobs past early feedback with
// more than their floor, largest first, one node each per round. It
// returns nil when they cannot give enough, and an empty map when need ≤ 0.
func take(running []JobState, need int, size, floor func(JobState) int) map[string]int {
	out := map[string]int{}
	if need <= 0 {
		return out
	}
	var l []JobState
	for _, j := range running {
		if j.Removable && !j.EarlyFeedback && size(j) > floor(j) {
			l = append(l, j)
		}
	}
	slices.SortStableFunc(l, func(a, b JobState) int {
		return cmp.Or(cmp.Compare(size(b), size(a)), cmp.Compare(a.Submitted, b.Submitted), strings.Compare(a.Name, b.Name))
	})
	count := 0
	for len(l) > 0 {
		kept := l[:0]
		for _, j := range l {
			out[j.Name]++
			count++
			if count == need {
				return out
			}
			if size(j)-out[j.Name] > floor(j) {
				kept = append(kept, j)
			}
		}
		l = kept
	}
	return nil
}

// GrowRunning is EPS's running-job scheduling (Alg. 1 lines 29–40). First
// every job whose throughput dropped below PrevThroughput after its last
// growth gives that growth back (the added nodes cost more in
// communication than they bring, §4.2). Then the free slots go to the jobs
// in their training phase (past early feedback), smallest first, at most
// one worker and one server per job per call so that each growth can be
// judged before the next. A job that backs off is not grown in the same
// call, nor beyond MaxWorkers/MaxServers.
func GrowRunning(c Capacity, running []JobState) map[string]Delta {
	out := map[string]Delta{}
	usedW, usedS := 0, 0
	backing := map[string]bool{}
	for _, j := range running {
		usedW += j.Workers
		usedS += j.Servers
		g := j.LastGrowth
		if (g.Workers > 0 || g.Servers > 0) && j.PrevThroughput > 0 && j.Throughput < j.PrevThroughput {
			backing[j.Name] = true
			out[j.Name] = Delta{
				Workers: -max(g.Workers, 0),
				Servers: -max(g.Servers, 0),
				Reason: fmt.Sprintf("throughput %s < %s samples/s before the last growth: remove the added %s (EPS back-off)",
					num(j.Throughput), num(j.PrevThroughput), added(g)),
			}
		}
	}
	freeW, freeS := max(c.Workers-usedW, 0), max(c.Servers-usedS, 0)
	grow := func(free int, size, limit func(JobState) int, set func(*Delta)) {
		var l []JobState
		for _, j := range running {
			if !j.EarlyFeedback && !backing[j.Name] && (limit(j) <= 0 || size(j) < limit(j)) {
				l = append(l, j)
			}
		}
		slices.SortStableFunc(l, func(a, b JobState) int {
			return cmp.Or(cmp.Compare(size(a), size(b)), cmp.Compare(a.Submitted, b.Submitted), strings.Compare(a.Name, b.Name))
		})
		for _, j := range l {
			if free == 0 {
				return
			}
			d := out[j.Name]
			set(&d)
			out[j.Name] = d
			free--
		}
	}
	grow(freeW, func(j JobState) int { return j.Workers }, func(j JobState) int { return j.MaxWorkers },
		func(d *Delta) { d.Workers++ })
	grow(freeS, func(j JobState) int { return j.Servers }, func(j JobState) int { return j.MaxServers },
		func(d *Delta) { d.Servers++ })
	for name, d := range out {
		if backing[name] {
			continue
		}
		d.Reason = fmt.Sprintf("%s and %s free: add %s (EPS running-job scheduling, smallest jobs first, one per round)",
			plural(freeW, "worker slot"), plural(freeS, "server slot"), added(d))
		out[name] = d
	}
	return out
}

// added describes the positive part of a growth: "1 worker and 1 server".
func added(d Delta) string {
	var what []string
	if d.Workers > 0 {
		what = append(what, plural(d.Workers, "worker"))
	}
	if d.Servers > 0 {
		what = append(what, plural(d.Servers, "server"))
	}
	return strings.Join(what, " and ")
}
