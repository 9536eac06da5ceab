package manager

import (
	"math"
	"sync"
	"time"
)

// ThroughputWindow is the span over which a running job's throughput is
// measured: the samples its workers trained over about the last 10 s of
// wall-clock time (less at the start of a job).
const ThroughputWindow = 10 * time.Second

// Throughput is the one definition of a job's throughput, whatever shows
// it: the console's header and jobs list, `kelpie job list/describe` and
// their JSON, `kelpie job history`, /metrics, `kelpie run --json`
// (throughput_samples_per_s), the realized effect of an action and the
// baseline of AntDT's predictions. It is the samples the job's workers
// trained (coordinator.Job.WorkerSamples: every worker's reported count,
// restarts included) between two counts, divided by the wall-clock seconds
// between them: waiting for the others at a barrier, pulls held by the
// servers and pauses all count as time. (The Monitor's per-worker
// v_i = B_i / T_i leaves the waiting out: summed over workers it
// overstated a BSP job's throughput by up to 10×.) It is 0 when the span
// is empty or the count went back.
func Throughput(samples0 int64, t0 time.Time, samples1 int64, t1 time.Time) float64 {
	if t0.IsZero() || !t1.After(t0) || samples1 < samples0 {
		return 0
	}
	return float64(samples1-samples0) / t1.Sub(t0).Seconds()
}

// throughputMeter keeps a running job's sample counts over the last
// ThroughputWindow (one per tick) and gives its throughput over them.
type throughputMeter struct {
	mu sync.Mutex
	// pts are the counts, oldest first: those within the window and the
	// last one before it.
	pts []samplesAt
	// done counts the samples trained since the first count; it never
	// goes back (a count that did is taken as the new base).
	done, last int64
	seeded     bool
}

type samplesAt struct {
	t       time.Time
	samples int64
}

// observe records that the job's workers had trained total samples at now.
func (w *throughputMeter) observe(now time.Time, total int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seeded && total > w.last {
		w.done += total - w.last
	}
	w.last, w.seeded = total, true
	if n := len(w.pts); n > 0 && !now.After(w.pts[n-1].t) {
		w.pts[n-1].samples = w.done // the same instant (or a clock step back)
		return
	}
	w.pts = append(w.pts, samplesAt{now, w.done})
	from := now.Add(-ThroughputWindow)
	i := 0
	for i+1 < len(w.pts) && !w.pts[i+1].t.After(from) {
		i++
	}
	if i > 0 {
		w.pts = append(w.pts[:0], w.pts[i:]...)
	}
}

// rate is the throughput over the window (Throughput from its oldest
// count to its newest); 0 before two counts.
func (w *throughputMeter) rate() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pts) < 2 {
		return 0
	}
	a, b := w.pts[0], w.pts[len(w.pts)-1]
	return Throughput(a.samples, a.t, b.samples, b.t)
}

// throughput is the job's throughput as its views show it: over the last
// ThroughputWindow while it runs; once it has ended, over its whole run
// (its result's, when it has one: kelpie run --json's
// throughput_samples_per_s), from started to ended.
func (j *jobState) throughput(over bool, res *Result, started, ended time.Time) float64 {
	switch {
	case !over:
		return j.thr.rate()
	case res != nil:
		return res.Throughput
	}
	return Throughput(0, started, j.coord.WorkerSamples(), ended)
}

// progressTotal estimates the iteration count a running job will end at:
// the iteration it is at plus what its unfinished shards hold (a shard
// being trained counted as half done), at the plan's iterations per shard;
// never below the plan's count (plan) nor at or below the counter (a
// running job is never shown finished), and never below an earlier
// estimate (prev: totals shown do not go down). Shards trained twice (a
// crashed worker's, at-least-once) or workers running ahead without a
// barrier make a job take more iterations than the plan's count; the
// estimate grows with them, before the counter reaches it.
func progressTotal(prev, plan, iteration int64, todo, doing, total int) int64 {
	est := max(prev, plan, iteration+1)
	if total > 0 && plan > 0 {
		left := float64(2*todo+doing) / float64(2*total) * float64(plan) // iterations the unfinished shards hold
		est = max(est, iteration+int64(math.Ceil(left)))
	}
	return est
}

// iterationTotal is the iteration total a view shows: progressTotal while
// the job runs (kept in j.iterTotal, so that it never goes down); once the
// job has ended, the iteration it ended at when it completed (its progress
// is 100 %), else the last estimate (how far it got).
func (j *jobState) iterationTotal(over bool, state string, iteration int64, todo, doing, total int) int64 {
	plan := j.coord.Plan().Iterations()
	if over {
		if state == StateCompleted {
			return iteration
		}
		return max(j.iterTotal.Load(), plan, iteration)
	}
	for {
		prev := j.iterTotal.Load()
		est := progressTotal(prev, plan, iteration, todo, doing, total)
		if est == prev || j.iterTotal.CompareAndSwap(prev, est) {
			return est
		}
	}
}
