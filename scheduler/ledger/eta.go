package ledger

import "time"

// ETA is the seconds a job has left: the samples its unfinished shards
// hold (a shard being trained counted as half done, as the iteration
// total counts it), at the plan's samples per shard, over rate, its
// recent throughput in samples per second (manager.Throughput over the
// last window). ok is false when there is no estimate: no shards, no
// plan, or no rate yet.
func ETA(todo, doing, total int, planSamples int64, rate float64) (eta float64, ok bool) {
	if total <= 0 || planSamples <= 0 || rate <= 0 {
		return 0, false
	}
	return Left(todo, doing, total) * float64(planSamples) / rate, true
}

// Left is the share of a job's shards not trained yet, a shard being
// trained counted as half done.
func Left(todo, doing, total int) float64 {
	if total <= 0 {
		return 1
	}
	return min(max(float64(2*todo+doing)/float64(2*total), 0), 1)
}

// CheckPoints are the progress shares (of shards trained) at which the
// ETA is kept, to be compared with the time the job actually took.
var CheckPoints = []int{25, 50, 75}

// Check is the ETA the job showed when it reached Percent % of its shards
// and, once it has ended, the seconds it actually took from then.
type Check struct {
	Percent   int
	At        time.Time
	Predicted float64 // seconds
	Actual    float64 // seconds, once Done
	Done      bool
}

// Error is the check's relative error, (predicted − actual) / actual; 0
// before the job ended or when it ended at once.
func (c Check) Error() float64 {
	if !c.Done || c.Actual <= 0 {
		return 0
	}
	return (c.Predicted - c.Actual) / c.Actual
}

// ObserveETA records eta (seconds) as the prediction of every check point
// that progress (a share in [0, 1]) has reached for the first time, at
// now. A point passed without an estimate is not recorded.
func (l *Ledger) ObserveETA(now time.Time, progress, eta float64, ok bool) {
	if !l.end.IsZero() || !ok {
		return
	}
	for _, p := range CheckPoints {
		if progress*100 < float64(p) || l.hasCheck(p) {
			continue
		}
		l.checks = append(l.checks, Check{Percent: p, At: now, Predicted: eta})
	}
}

func (l *Ledger) hasCheck(p int) bool {
	for _, c := range l.checks {
		if c.Percent == p {
			return true
		}
	}
	return false
}

// Checks are the ETA checks recorded so far, in the order reached.
func (l *Ledger) Checks() []Check { return append([]Check(nil), l.checks...) }
