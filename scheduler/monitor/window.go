package monitor

import "math"

// wsample is one worker sample, times in nanoseconds. Its iteration is
// kept for the latest sample only (series.lastIter), the one a snapshot
// reads.
type wsample struct {
	at, bpt int64
	batch   int32
}

// psample is a wsample as a series keeps it: 16 bytes rather than 24 (a
// 20,000-worker job keeps some 5 million). The BPT and batch size share
// one word, bpt<<batchBits | batch; a sample whose BPT (18 minutes or
// more) or batch size (16.7 million or more) does not fit has
// bptEscape there and its batch bits index series.wide, which holds it
// exactly.
type psample struct {
	at int64
	bb uint64
}

const (
	batchBits = 24
	bptEscape = 1<<(64-batchBits) - 1
	maxWide   = 1 << batchBits // escape indices
)

// pack is s as a series keeps it, its figures appended to wide when they
// do not fit in a word.
func pack(s wsample, wide *[]wsample) psample {
	if s.bpt >= 0 && s.bpt < bptEscape && s.batch >= 0 && s.batch < 1<<batchBits {
		return psample{at: s.at, bb: uint64(s.bpt)<<batchBits | uint64(s.batch)}
	}
	*wide = append(*wide, s)
	return psample{at: s.at, bb: bptEscape<<batchBits | uint64(len(*wide)-1)}
}

// sample is the i-th sample of buf (absolute index).
func (q *series) sample(i int) wsample {
	p := q.buf[i]
	bpt := p.bb >> batchBits
	if bpt == bptEscape {
		return q.wide[p.bb&(1<<batchBits-1)]
	}
	return wsample{at: p.at, bpt: int64(bpt), batch: int32(p.bb & (1<<batchBits - 1))}
}

// window is one trailing window over a series: the samples from index
// start (absolute into series.buf) to the end, with their running sums.
type window struct {
	start int
	cut   int64 // the latest cut-off applied: samples at or before it are out
	n     int
	bpt   int64 // Σ BPT in ns: integer, so adding and removing never drifts
	batch int64 // Σ batch size
}

func (w *window) add(s wsample) { w.n++; w.bpt += s.bpt; w.batch += int64(s.batch) }
func (w *window) sub(s wsample) { w.n--; w.bpt -= s.bpt; w.batch -= int64(s.batch) }

// Window indices.
const (
	trans = 0 // the short window, L_trans
	per   = 1 // the long window, L_per
	// mid is the long window without its oldest L_trans (length
	// L_per − L_trans): per − mid is the long window's head, the oldest
	// stretch, which tells a slowness that lasted the whole long window
	// from one that only began or ended inside it.
	mid = 2
)

// nwin is the number of windows a series keeps.
const nwin = 3

// series is one worker's samples ordered by At (buf[head:] is live) with
// a short and a long trailing window (and the long one's head) whose sums are kept up to date as
// samples arrive and expire, so a snapshot costs O(1) per worker plus the
// samples that expired since the last one.
type series struct {
	buf      []psample
	wide     []wsample // samples that do not fit a psample's word, by escape index
	head     int
	win      [nwin]window
	last     wsample // the sample with the latest At ever observed
	lastIter int64   // its iteration
	seen     bool
}

func newSeries() series {
	var q series
	for i := range q.win {
		q.win[i].cut = math.MinInt64
	}
	return q
}

// insert adds s in At order (agents report in order, so this is almost
// always an append) and drops the oldest samples beyond max.
func (q *series) insert(s wsample, iter int64, max int) {
	if !q.seen || s.at >= q.last.at {
		q.last, q.lastIter, q.seen = s, iter, true
	}
	p := len(q.buf)
	for p > q.head && q.buf[p-1].at > s.at {
		p--
	}
	for len(q.wide) >= maxWide-1 { // escape indices run out: free the dead ones
		q.fitWide()
		if len(q.wide) >= maxWide-1 {
			q.dropOldest()
			if p < q.head {
				p = q.head
			}
		}
	}
	q.buf = append(q.buf, psample{})
	copy(q.buf[p+1:], q.buf[p:])
	q.buf[p] = pack(s, &q.wide)
	for i := range q.win {
		w := &q.win[i]
		if s.at <= w.cut {
			// Older than a cut-off already applied: the window does not
			// hold it. Every sample from the window's start on is newer,
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

func (q *series) dropOldest() {
	old := q.sample(q.head)
	for i := range q.win {
		w := &q.win[i]
		if w.start == q.head {
			w.sub(old)
			w.start++
		}
	}
	q.head++
}

// trim expires samples at or before now−L for each window (windows are
// (now−L, now]) and frees what no window holds.
func (q *series) trim(now int64, l [nwin]int64) {
	for i := range q.win {
		w := &q.win[i]
		cut := max(w.cut, now-l[i])
		w.cut = cut
		for w.start < len(q.buf) && q.buf[w.start].at <= cut {
			w.sub(q.sample(w.start))
			w.start++
		}
	}
	q.head = min(q.win[trans].start, q.win[per].start, q.win[mid].start)
	q.fit()
}

// fit moves the live samples to the front and gives back an array much
// larger than they need (one that grew while no snapshot trimmed it): a
// snapshot's trim, once per tick, keeps a series near its live samples —
// a window's worth, where compact alone let it reach twice that and its
// array twice again (at 20,000 workers, most of the Monitor's memory).
func (q *series) fit() {
	if q.head > 0 {
		n := copy(q.buf, q.buf[q.head:])
		q.buf = q.buf[:n]
		for i := range q.win {
			q.win[i].start -= q.head
		}
		q.head = 0
	}
	if n := len(q.buf); cap(q.buf) > 64 && cap(q.buf) > 2*n {
		q.buf = append(make([]psample, 0, n+n/4+8), q.buf...)
	}
	if len(q.wide) > 0 {
		q.fitWide()
	}
}

// fitWide keeps only the wide samples that live samples refer to.
func (q *series) fitWide() {
	var wide []wsample
	for i := q.head; i < len(q.buf); i++ {
		if p := &q.buf[i]; p.bb>>batchBits == bptEscape {
			wide = append(wide, q.wide[p.bb&(1<<batchBits-1)])
			p.bb = bptEscape<<batchBits | uint64(len(wide)-1)
		}
	}
	q.wide = wide
}

// compact moves the live samples to the front once the dead prefix is
// large, keeping memory proportional to the live samples at O(1)
// amortized cost.
func (q *series) compact() {
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
// window lengths change. The next trim cuts them to size again.
func (q *series) reset(max int) {
	for len(q.buf)-q.head > max {
		q.head++
	}
	for i := range q.win {
		q.win[i] = window{start: q.head, cut: math.MinInt64}
		for k := q.head; k < len(q.buf); k++ {
			q.win[i].add(q.sample(k))
		}
	}
	q.compact()
}

// ring is a first-in first-out buffer of at most max items; buf[head:] is
// live. Server samples come from every worker interleaved, so they are kept
// in arrival order and filtered by time when a snapshot reads them anyway.
type ring[T any] struct {
	buf  []T
	head int
}

func (r *ring[T]) push(v T, max int) {
	r.buf = append(r.buf, v)
	if len(r.buf)-r.head > max {
		r.head += len(r.buf) - r.head - max
	}
	if r.head >= 32 && r.head >= len(r.buf)/2 {
		n := copy(r.buf, r.buf[r.head:])
		clear(r.buf[n:])
		r.buf = r.buf[:n]
		r.head = 0
	}
}

func (r *ring[T]) live() []T { return r.buf[r.head:] }

// keep drops every live item for which ok is false, preserving order.
func (r *ring[T]) keep(ok func(T) bool) {
	n := 0
	for _, v := range r.buf[r.head:] {
		if ok(v) {
			r.buf[n] = v
			n++
		}
	}
	clear(r.buf[n:])
	r.buf = r.buf[:n]
	r.head = 0
}
