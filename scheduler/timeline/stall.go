package timeline

import (
	"slices"
	"time"
)

// Mark is a worker's completion of an iteration: how many iterations it
// had completed then (Iteration) and when (At).
type Mark struct {
	Iteration int64
	At        time.Time
}

// Marks is a bounded record of one worker's marks, in the order they
// arrived: when full, the oldest go. It keeps times as Unix nanoseconds,
// so the records of thousands of workers hold no pointers for the
// collector to scan. Not safe for concurrent use.
type Marks struct {
	buf   []keptMark
	start int // index of the oldest mark once the buffer has wrapped
	cap   int
}

// keptMark is a Mark as kept.
type keptMark struct{ iteration, at int64 }

// NewMarks returns a record that keeps the last capacity marks (at least
// one).
func NewMarks(capacity int) *Marks { return &Marks{cap: max(capacity, 1)} }

// AddReport places a worker's report on its iteration timeline and
// records the marks it gives: the report arrived at (which is when its
// last iteration completed, give or take the report's trip), says the
// worker had completed iteration iterations, and carries the wall time of
// each of its last iterations, oldest first (a worker's iterations run
// back to back, so each one's time — its BPT plus the time its pulls were
// held, bpt[i] + wait[i] — is the gap since the completion before it). A
// missing or negative wait or BPT counts as zero.
func (m *Marks) AddReport(at time.Time, iteration int64, bpt, wait []float64) {
	if len(bpt) == 0 {
		return
	}
	gap := func(i int) int64 {
		d := max(bpt[i], 0)
		if i < len(wait) {
			d += max(wait[i], 0)
		}
		return int64(time.Duration(d * float64(time.Second)))
	}
	// The oldest iteration completed the sum of the later ones' gaps
	// before at; each later one a gap after the one before it.
	t := at.UnixNano()
	for i := 1; i < len(bpt); i++ {
		t -= gap(i)
	}
	first := iteration - int64(len(bpt)-1)
	for i := range bpt {
		if i > 0 {
			t += gap(i)
		}
		m.put(keptMark{first + int64(i), t})
	}
}

func (m *Marks) put(x keptMark) {
	if len(m.buf) < m.cap {
		m.buf = append(m.buf, x)
		return
	}
	m.buf[m.start] = x
	m.start = (m.start + 1) % m.cap
}

// All returns a copy of the marks kept, oldest first.
func (m *Marks) All() []Mark {
	out := make([]Mark, 0, len(m.buf))
	for _, part := range [][]keptMark{m.buf[m.start:], m.buf[:m.start]} {
		for _, x := range part {
			out = append(out, Mark{Iteration: x.iteration, At: time.Unix(0, x.at)})
		}
	}
	return out
}

// Window is the time a change was under way: from its creation to its
// application.
type Window struct {
	From, To time.Time
}

// Stall is how long one worker stopped making progress around a change
// under way from `from` to `to`, read off its iteration timeline (marks in
// the order they arrived): the longest gap between consecutive iteration
// completions that overlaps [from, to], less the time the iterations it
// spans take normally (the median gap between consecutive iterations over
// the whole record, times the iterations the gap spans, at least one). A
// gap spans more than one iteration when a restarted worker resumes past
// iterations its old process completed without reporting them (they are
// credited at the median); a restarted worker that recomputes its last
// iteration spans one. Whatever stopped the worker — waiting for blocks in
// transit, a checkpoint, a process relaunch — counts the same way.
//
// ok is false when the record does not cover the change: no gap overlaps
// it, or there are too few marks to know a normal iteration.
func Stall(marks []Mark, from, to time.Time) (stall time.Duration, ok bool) {
	s, covered := Stalls(marks, []Window{{from, to}})
	return s[0], covered[0]
}

// Stalls is Stall for several changes (windows in the order the changes
// were made), each gap charged to one of them: the first whose window
// holds the gap's end (the change the worker waited for: back-to-back
// restarts each get their own gap, a change made while another's restart
// went on is not charged with it), else the first it overlaps (a hot
// change's long iteration ends just after the change settled).
func Stalls(marks []Mark, windows []Window) (stall []time.Duration, ok []bool) {
	stall, ok = make([]time.Duration, len(windows)), make([]bool, len(windows))
	median, known := medianStep(marks)
	if !known {
		return stall, ok
	}
	for i := 1; i < len(marks); i++ {
		a, b := marks[i-1], marks[i]
		w := slices.IndexFunc(windows, func(w Window) bool { return !b.At.Before(w.From) && !b.At.After(w.To) })
		if w < 0 {
			w = slices.IndexFunc(windows, func(w Window) bool { return !b.At.Before(w.From) && !a.At.After(w.To) })
		}
		if w < 0 {
			continue
		}
		span := max(b.Iteration-a.Iteration, 1)
		excess := max(b.At.Sub(a.At)-time.Duration(span)*median, 0)
		stall[w], ok[w] = max(stall[w], excess), true
	}
	return stall, ok
}

// MinSteps is how many single-iteration gaps a record needs before Stall
// trusts its median.
const MinSteps = 3

// medianStep is the median gap between completions of consecutive
// iterations.
func medianStep(marks []Mark) (time.Duration, bool) {
	var steps []time.Duration
	for i := 1; i < len(marks); i++ {
		if marks[i].Iteration == marks[i-1].Iteration+1 {
			steps = append(steps, max(marks[i].At.Sub(marks[i-1].At), 0))
		}
	}
	if len(steps) < MinSteps {
		return 0, false
	}
	slices.Sort(steps)
	n := len(steps)
	if n%2 == 1 {
		return steps[n/2], true
	}
	return (steps[n/2-1] + steps[n/2]) / 2, true
}

// JobStalls is Stalls over the job's workers (their records by name):
// for each change the longest of theirs, since a job paused until its last
// worker went on. A change's ok is false when no worker's record covers
// it.
func JobStalls(workers map[string][]Mark, windows []Window) (stall []time.Duration, ok []bool) {
	stall, ok = make([]time.Duration, len(windows)), make([]bool, len(windows))
	for _, ms := range workers {
		s, covered := Stalls(ms, windows)
		for i := range windows {
			if covered[i] {
				stall[i], ok[i] = max(stall[i], s[i]), true
			}
		}
	}
	return stall, ok
}
