// Package hang decides when a job has hung and who it waits for. It is
// pure: each tick the caller hands it what the job's nodes last said and
// the time, and it answers with a verdict.
//
// A job is hung when its progress (the samples its workers trained) has
// not moved for longer than a bound derived from its own pace:
// max(Min, Factor × its median iteration time), by default
// max(30 s, 20 × median), the median over its workers of their recent
// iteration times. A job that never made progress is not judged (it is
// starting). The verdict names the nodes the job waits for — the workers
// whose push the servers' barrier waits for, as the servers holding
// pulls say (ServerStats.behind and held_pulls) — and the servers holding
// them. Without such a server (allreduce, ASP), the workers behind the
// furthest worker's iteration or, when every worker is at the same
// iteration, those not heard from since progress stopped; the servers
// then are those whose trained version (V_train) is behind the furthest
// worker's iteration.
package hang

import (
	"slices"
	"time"
)

// Default bound: max(DefaultMin, DefaultFactor × median iteration time).
const (
	DefaultMin    = 30 * time.Second
	DefaultFactor = 20
)

// Config sets the bound. Zero fields take the defaults.
type Config struct {
	Min    time.Duration
	Factor float64
}

// Bound is how long a job whose iterations take median may go without
// progress before it is hung.
func (c Config) Bound(median time.Duration) time.Duration {
	lo, k := c.Min, c.Factor
	if lo <= 0 {
		lo = DefaultMin
	}
	if k <= 0 {
		k = DefaultFactor
	}
	return max(lo, time.Duration(k*float64(median)))
}

// Node is what the job's nodes last said.
type Node struct {
	Name      string
	Server    bool
	Live      bool      // running (not done, stopped, lost or removed)
	Iteration int64     // workers: iterations completed
	Heard     time.Time // workers: their last progress report
	Version   int64     // servers: V_train, the version trained through
	// Servers: the workers that have not pushed the version V_train waits
	// for, and how many pulls it holds meanwhile.
	Behind []string
	Held   int64
	Iter   time.Duration // workers: recent iteration time
}

// Observation is the job at one tick.
type Observation struct {
	Now      time.Time
	Progress int64 // samples trained, over all workers
	Nodes    []Node
}

// Verdict is whether the job is hung and whom it waits for.
type Verdict struct {
	Hung     bool
	Since    time.Time     // when progress stopped (its last move)
	Bound    time.Duration // the bound it was judged by
	Missing  []string      // workers that have not reached the barrier/version
	Holding  []string      // servers holding pushes waiting for them
	Detected time.Time     // when it was first found hung
}

// Detector follows one job's progress.
type Detector struct {
	Config
	last     int64
	moved    time.Time // when progress last moved (zero: never)
	detected time.Time
}

// Observe takes in the job at o.Now and returns the verdict.
func (d *Detector) Observe(o Observation) Verdict {
	if o.Progress != d.last || d.moved.IsZero() && o.Progress > 0 {
		if o.Progress > d.last || d.moved.IsZero() {
			d.moved = o.Now
		}
		d.last = o.Progress
		d.detected = time.Time{}
	}
	v := Verdict{Bound: d.Bound(Median(o.Nodes)), Since: d.moved}
	if d.moved.IsZero() || o.Now.Sub(d.moved) <= v.Bound {
		d.detected = time.Time{}
		return v
	}
	if d.detected.IsZero() {
		d.detected = o.Now
	}
	v.Hung, v.Detected = true, d.detected
	v.Missing, v.Holding = Waiting(o.Nodes, d.moved)
	return v
}

// Median is the median of the live workers' iteration times (0 for none).
func Median(nodes []Node) time.Duration {
	var its []time.Duration
	for _, n := range nodes {
		if !n.Server && n.Live && n.Iter > 0 {
			its = append(its, n.Iter)
		}
	}
	if len(its) == 0 {
		return 0
	}
	slices.Sort(its)
	if len(its)%2 == 1 {
		return its[len(its)/2]
	}
	return (its[len(its)/2-1] + its[len(its)/2]) / 2
}

// Waiting names the live workers the job waits for and the servers
// holding pushes for them (see the package doc), each sorted by name.
// stopped is when progress stopped.
func Waiting(nodes []Node, stopped time.Time) (missing, holding []string) {
	// The servers say best: they hold the others' pulls for the workers
	// that have not pushed the version they wait for.
	seen := map[string]bool{}
	for _, n := range nodes {
		if !n.Server || !n.Live || n.Held == 0 || len(n.Behind) == 0 {
			continue
		}
		holding = append(holding, n.Name)
		for _, w := range n.Behind {
			if !seen[w] {
				seen[w] = true
				missing = append(missing, w)
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		slices.Sort(holding)
		return missing, holding
	}
	holding = nil
	front := int64(-1)
	for _, n := range nodes {
		if !n.Server && n.Live {
			front = max(front, n.Iteration)
		}
	}
	if front < 0 {
		return nil, nil
	}
	for _, n := range nodes {
		if !n.Server && n.Live && n.Iteration < front {
			missing = append(missing, n.Name)
		}
	}
	if len(missing) == 0 {
		for _, n := range nodes {
			if !n.Server && n.Live && !n.Heard.After(stopped) {
				missing = append(missing, n.Name)
			}
		}
	}
	for _, n := range nodes {
		if n.Server && n.Live && n.Version < front {
			holding = append(holding, n.Name)
		}
	}
	slices.Sort(missing)
	slices.Sort(holding)
	return missing, holding
}

// Excuse tells the detector that progress is not expected at now (the job
// is starting, recovering or paused): the bound counts from now again.
func (d *Detector) Excuse(now time.Time) {
	if !d.moved.IsZero() {
		d.moved = now
	}
	d.detected = time.Time{}
}
