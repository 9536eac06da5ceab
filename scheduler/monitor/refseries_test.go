package monitor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The series as it was before samples were packed (24-byte samples, no
// escapes): the reference TestPackedSeries compares with.

// refWindow is one trailing refWindow over a refSeries: the samples from index
// start (absolute into refSeries.buf) to the end, with their running sums.
type refWindow struct {
	start int
	cut   int64 // the latest cut-off applied: samples at or before it are out
	n     int
	bpt   int64 // Σ BPT in ns: integer, so adding and removing never drifts
	batch int64 // Σ batch size
}

func (w *refWindow) add(s wsample) { w.n++; w.bpt += s.bpt; w.batch += int64(s.batch) }
func (w *refWindow) sub(s wsample) { w.n--; w.bpt -= s.bpt; w.batch -= int64(s.batch) }

// refSeries is one worker's samples ordered by At (buf[head:] is live) with
// a short and a long trailing refWindow (and the long one's head) whose sums are kept up to date as
// samples arrive and expire, so a snapshot costs O(1) per worker plus the
// samples that expired since the last one.
type refSeries struct {
	buf      []wsample
	head     int
	win      [nwin]refWindow
	last     wsample // the sample with the latest At ever observed
	lastIter int64   // its iteration
	seen     bool
}

func newRefSeries() refSeries {
	var q refSeries
	for i := range q.win {
		q.win[i].cut = math.MinInt64
	}
	return q
}

// insert adds s in At order (agents report in order, so this is almost
// always an append) and drops the oldest samples beyond max.
func (q *refSeries) insert(s wsample, iter int64, max int) {
	if !q.seen || s.at >= q.last.at {
		q.last, q.lastIter, q.seen = s, iter, true
	}
	p := len(q.buf)
	for p > q.head && q.buf[p-1].at > s.at {
		p--
	}
	q.buf = append(q.buf, wsample{})
	copy(q.buf[p+1:], q.buf[p:])
	q.buf[p] = s
	for i := range q.win {
		w := &q.win[i]
		if s.at <= w.cut {
			// Older than a cut-off already applied: the refWindow does not
			// hold it. Every sample from the refWindow's start on is newer,
			// so s went in at or before the start, which moves up by one.
			w.start++
		} else {
			w.add(s)
		}
	}
	for len(q.buf)-q.head > max {
		q.dropOldest()
	}
	q.compact()
}

func (q *refSeries) dropOldest() {
	old := q.buf[q.head]
	for i := range q.win {
		w := &q.win[i]
		if w.start == q.head {
			w.sub(old)
			w.start++
		}
	}
	q.head++
}

// trim expires samples at or before now−L for each refWindow (windows are
// (now−L, now]) and frees what no refWindow holds.
func (q *refSeries) trim(now int64, l [nwin]int64) {
	for i := range q.win {
		w := &q.win[i]
		cut := max(w.cut, now-l[i])
		w.cut = cut
		for w.start < len(q.buf) && q.buf[w.start].at <= cut {
			w.sub(q.buf[w.start])
			w.start++
		}
	}
	q.head = min(q.win[trans].start, q.win[per].start, q.win[mid].start)
	q.fit()
}

// fit moves the live samples to the front and gives back an array much
// larger than they need (one that grew while no snapshot trimmed it): a
// snapshot's trim, once per tick, keeps a refSeries near its live samples —
// a refWindow's worth, where compact alone let it reach twice that and its
// array twice again (at 20,000 workers, most of the Monitor's memory).
func (q *refSeries) fit() {
	if q.head > 0 {
		n := copy(q.buf, q.buf[q.head:])
		q.buf = q.buf[:n]
		for i := range q.win {
			q.win[i].start -= q.head
		}
		q.head = 0
	}
	if n := len(q.buf); cap(q.buf) > 64 && cap(q.buf) > 2*n {
		q.buf = append(make([]wsample, 0, n+n/4+8), q.buf...)
	}
}

// compact moves the live samples to the front once the dead prefix is
// large, keeping memory proportional to the live samples at O(1)
// amortized cost.
func (q *refSeries) compact() {
	if q.head < 32 || q.head < len(q.buf)/2 {
		return
	}
	n := copy(q.buf, q.buf[q.head:])
	q.buf = q.buf[:n]
	for i := range q.win {
		q.win[i].start -= q.head
	}
	q.head = 0
}

// reset recomputes both windows over every live sample; used when the
// refWindow lengths change. The next trim cuts them to size again.
func (q *refSeries) reset(max int) {
	for len(q.buf)-q.head > max {
		q.head++
	}
	for i := range q.win {
		q.win[i] = refWindow{start: q.head, cut: math.MinInt64}
		for _, s := range q.buf[q.head:] {
			q.win[i].add(s)
		}
	}
	q.compact()
}

// TestPackedSeries: a series of packed samples keeps the same windows
// (counts, sums, starts), the same latest sample and the same samples as
// the series of plain ones it replaced, through out-of-order samples,
// samples too large to pack (escaped), the bound on samples, trims and
// resets.
func TestPackedSeries(t *testing.T) {
	for _, c := range []struct {
		name   string
		huge   int // every huge-th sample does not fit a word (0: none)
		max    int
		shaken int // every shaken-th sample arrives out of order (0: none)
	}{
		{"plain", 0, 1024, 0},
		{"out of order", 0, 1024, 7},
		{"some escaped", 5, 1024, 0},
		{"all escaped, bounded", 1, 50, 3},
		{"escaped, out of order, bounded", 3, 64, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(c.huge*100+c.max)))
			q, ref := newSeries(), newRefSeries()
			l := [nwin]int64{5e9, 20e9, 15e9}
			at := int64(0)
			for i := 1; i <= 5000; i++ {
				at += int64(rng.IntN(200e6))
				s := wsample{at: at, bpt: int64(1 + rng.IntN(100e6)), batch: int32(rng.IntN(4096))}
				if c.shaken > 0 && i%c.shaken == 0 {
					s.at -= int64(rng.IntN(3e9))
				}
				if c.huge > 0 && i%c.huge == 0 {
					if i%2 == 0 {
						s.bpt = bptEscape + int64(rng.IntN(1e12))
					} else {
						s.batch = math.MaxInt32 - int32(rng.IntN(1000))
					}
				}
				q.insert(s, int64(i), c.max)
				ref.insert(s, int64(i), c.max)
				switch {
				case i%97 == 0:
					q.reset(c.max)
					ref.reset(c.max)
				case i%10 == 0:
					q.trim(at, l)
					ref.trim(at, l)
				}
				if err := sameSeries(&q, &ref); err != "" {
					t.Fatalf("after sample %d: %s", i, err)
				}
			}
			if c.huge > 0 && len(q.wide) == 0 {
				t.Error("no sample was escaped")
			}
		})
	}
}

func sameSeries(q *series, ref *refSeries) string {
	if q.last != ref.last || q.lastIter != ref.lastIter || q.seen != ref.seen {
		return fmt.Sprintf("latest %v %d, want %v %d", q.last, q.lastIter, ref.last, ref.lastIter)
	}
	if len(q.buf)-q.head != len(ref.buf)-ref.head {
		return fmt.Sprintf("%d live samples, want %d", len(q.buf)-q.head, len(ref.buf)-ref.head)
	}
	for k := range len(q.buf) - q.head {
		if got, want := q.sample(q.head+k), ref.buf[ref.head+k]; got != want {
			return fmt.Sprintf("live sample %d = %v, want %v", k, got, want)
		}
	}
	for i := range q.win {
		w, r := q.win[i], ref.win[i]
		if w.start-q.head != r.start-ref.head || w.cut != r.cut || w.n != r.n || w.bpt != r.bpt || w.batch != r.batch {
			return fmt.Sprintf("window %d = %+v (head %d), want %+v (head %d)", i, w, q.head, r, ref.head)
		}
	}
	return ""
}
