package syncmodel

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
)

// ref is a deliberately plain model of the engine's rules: pushes kept as a
// set of (worker, progress), counts recomputed by scanning, waiting pulls in
// one list in arrival order, released by scanning it at each step.
type ref struct {
	c       Config
	members map[int]bool
	v       int64
	pushes  map[[2]int64]bool
	last    map[int]int64
	pend    []refPull
	stats   Stats
}

type refPull struct {
	id       PullID
	w        int
	p        int64
	arrived  int64
	due      int64
	released bool
}

func newRef(c Config, workers []int) *ref {
	r := &ref{c: c, members: map[int]bool{}, pushes: map[[2]int64]bool{}, last: map[int]int64{},
		stats: Stats{Staleness: make([]int64, HistogramBuckets)}}
	for _, w := range workers {
		r.members[w] = true
	}
	return r
}

func (r *ref) admits(w int, p int64, u float64) bool {
	if !r.members[w] {
		return true
	}
	s := int64(r.c.Staleness)
	switch r.c.Model {
	case BSP, Drop:
		return p < r.v
	case ASP:
		return true
	case SSP:
		return p < r.v+s
	case PSSP:
		if p < r.v+s {
			return true
		}
		return u >= r.c.Probability(p-r.v)
	}
	panic("ref: model not modelled: " + r.c.Model)
}

func (r *ref) count(v int64) int {
	n := 0
	for w := range r.members {
		if r.pushes[[2]int64{int64(w), v}] {
			n++
		}
	}
	return n
}

func (r *ref) needed() int {
	if r.c.Model == Drop && r.c.DropWaitFor < len(r.members) {
		return r.c.DropWaitFor
	}
	return len(r.members)
}

// step advances V_train as far as it goes, releasing in order.
func (r *ref) step(out []int) []int {
	for len(r.members) > 0 && r.count(r.v) >= r.needed() {
		r.v++
		for i := range r.pend {
			if !r.pend[i].released && r.pend[i].due == r.v {
				r.pend[i].released = true
				out = append(out, i)
			}
		}
	}
	return out
}

func (r *ref) finish(idx []int) []PullID {
	var ids []PullID
	for _, i := range idx {
		p := r.pend[i]
		ids = append(ids, p.id)
		r.stats.DelayedIterations += r.v - p.arrived
		r.served(p.p)
	}
	return ids
}

func (r *ref) served(p int64) {
	r.stats.Served++
	g := p + 1 - r.v
	if g < 0 {
		g = 0
	}
	if g > HistogramBuckets-1 {
		g = HistogramBuckets - 1
	}
	r.stats.Staleness[g]++
}

func (r *ref) push(w int, p int64) PushResult {
	if !r.members[w] {
		return PushResult{Reject: NotMember}
	}
	if l, ok := r.last[w]; ok && p <= l {
		r.stats.Duplicates++
		return PushResult{Reject: Duplicate}
	}
	r.last[w] = p
	if p < r.v {
		if r.c.Model == BSP || r.c.Model == Drop {
			r.stats.Dropped++
			return PushResult{Reject: Stale}
		}
		return PushResult{Accept: true}
	}
	r.pushes[[2]int64{int64(w), p}] = true
	v0 := r.v
	rel := r.finish(r.step(nil))
	return PushResult{Accept: true, Advanced: int(r.v - v0), Release: rel}
}

func (r *ref) pull(id PullID, w int, p int64, u float64) bool {
	prev := -1
	for i, q := range r.pend {
		if q.released {
			continue
		}
		if q.id == id {
			return false
		}
		if q.w == w {
			prev = i
		}
	}
	if prev < 0 && r.admits(w, p, u) {
		r.served(p)
		return true
	}
	due := p + 1
	if r.c.Pull == SoftBarrier || due < r.v+1 {
		due = r.v + 1
	}
	if prev >= 0 && r.pend[prev].due > due {
		due = r.pend[prev].due
	}
	if prev < 0 || r.pend[prev].p != p {
		r.stats.DPRs++
	}
	r.pend = append(r.pend, refPull{id: id, w: w, p: p, arrived: r.v, due: due})
	return false
}

func (r *ref) cancel(id PullID) bool {
	for i := range r.pend {
		if r.pend[i].id == id && !r.pend[i].released {
			r.pend[i].released = true
			return true
		}
	}
	return false
}

func (r *ref) setWorkers(ws []int) []PullID {
	m := map[int]bool{}
	for _, w := range ws {
		m[w] = true
	}
	for w := range r.members {
		if !m[w] {
			delete(r.last, w)
			for k := range r.pushes {
				if k[0] == int64(w) {
					delete(r.pushes, k)
				}
			}
		}
	}
	var out []int
	for i := range r.pend {
		if !r.pend[i].released && !m[r.pend[i].w] {
			r.pend[i].released = true
			out = append(out, i)
		}
	}
	r.members = m
	return r.finish(r.step(out))
}

// TestQuickAgainstReference drives the engine and the reference with the
// same random runs of workers (pushing, pulling, retrying, duplicating
// pushes, cancelling, joining and leaving) and compares every answer.
func TestQuickAgainstReference(t *testing.T) {
	models := []Kind{BSP, ASP, SSP, Drop, PSSP}
	f := func(seed uint64, model, staleness, nt uint8, soft, dynamic bool) bool {
		c := Config{Model: models[int(model)%len(models)], Pull: Lazy}
		if soft {
			c.Pull = SoftBarrier
		}
		c.Staleness = int(staleness % 4)
		c.DropWaitFor = 1 + int(nt%4)
		c.PSSPC = float64(staleness%5) / 4
		c.PSSPDynamic, c.PSSPAlpha = dynamic, 1
		if err := compareRun(seed, c); err != nil {
			t.Logf("seed %d, %v: %v", seed, c, err)
			return false
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 300}); err != nil {
		t.Error(err)
	}
}

func compareRun(seed uint64, c Config) error {
	rng := rand.New(rand.NewPCG(seed, 99))
	workers := []int{0, 1, 2, 3}
	e, r := New(c, workers), newRef(c, workers)
	next := map[int]int64{}     // worker -> progress it pushes next
	waits := map[int]PullID{}   // worker -> a pull it waits on
	owner := map[PullID]int{}   // waiting pull -> worker
	done := map[PullID]string{} // pull -> how it ended
	slow := map[int]int{3: 4}   // worker -> acts once in this many turns
	var id PullID
	settle := func(rel []PullID, what string) error {
		for _, x := range rel {
			if how, ok := done[x]; ok {
				return fmt.Errorf("%s released pull %d, already %s", what, x, how)
			}
			w, ok := owner[x]
			if !ok {
				return fmt.Errorf("%s released pull %d, which never waited", what, x)
			}
			done[x] = "released"
			delete(owner, x)
			if waits[w] == x {
				delete(waits, w)
				next[w]++
			}
		}
		return nil
	}
	pull := func(w int, p int64) error {
		id++
		u := rng.Float64()
		a, b := e.Pull(id, w, p, u), r.pull(id, w, p, u)
		if a != b {
			return fmt.Errorf("Pull(%d, w%d, p%d, u%.2f) = %v; reference %v", id, w, p, u, a, b)
		}
		if a {
			done[id] = "served"
			next[w]++
			return nil
		}
		owner[id] = w
		waits[w] = id
		return nil
	}
	for op := 0; op < 400; op++ {
		x := rng.IntN(100)
		members := e.Members()
		switch {
		case x < 4: // leave or join
			var ws []int
			if len(members) > 1 && rng.IntN(2) == 0 {
				drop := members[rng.IntN(len(members))]
				for _, m := range members {
					if m != drop {
						ws = append(ws, m)
					}
				}
			} else {
				join := rng.IntN(6)
				ws = append(slices.Clone(members), join)
				if !slices.Contains(members, join) {
					next[join] = e.VTrain() // a joining worker starts at V_train
					delete(waits, join)
				}
			}
			a, b := e.SetWorkers(ws), r.setWorkers(ws)
			if !slices.Equal(a, b) {
				return fmt.Errorf("op %d: SetWorkers(%v) = %v; reference %v", op, ws, a, b)
			}
			if err := settle(a, "SetWorkers"); err != nil {
				return err
			}
		case x < 7 && len(owner) > 0: // a waiting requester goes away
			ids := make([]PullID, 0, len(owner))
			for k := range owner {
				ids = append(ids, k)
			}
			slices.Sort(ids)
			k := ids[rng.IntN(len(ids))]
			if a, b := e.Cancel(k), r.cancel(k); a != b || !a {
				return fmt.Errorf("op %d: Cancel(%d) = %v; reference %v", op, k, a, b)
			}
			done[k] = "cancelled"
			w := owner[k]
			delete(owner, k)
			if waits[w] == k {
				delete(waits, w)
				next[w]++ // pretend it got its parameters elsewhere
			}
		default: // a member takes a turn
			if len(members) == 0 {
				continue
			}
			w := members[rng.IntN(len(members))]
			if n := slow[w]; n > 0 && rng.IntN(n) != 0 {
				continue
			}
			if _, ok := waits[w]; ok {
				if rng.IntN(5) == 0 { // retry with a new id
					if err := pull(w, next[w]); err != nil {
						return fmt.Errorf("op %d: %v", op, err)
					}
				}
				continue
			}
			p := next[w]
			if rng.IntN(10) == 0 && p > 0 {
				p-- // a duplicate of the last push
			}
			a, b := e.Push(w, p), r.push(w, p)
			if a.Accept != b.Accept || a.Reject != b.Reject || a.Advanced != b.Advanced || !slices.Equal(a.Release, b.Release) {
				return fmt.Errorf("op %d: Push(w%d, p%d) = %+v; reference %+v", op, w, p, a, b)
			}
			if err := settle(a.Release, "Push"); err != nil {
				return err
			}
			if _, ok := waits[w]; !ok {
				if err := pull(w, next[w]); err != nil {
					return fmt.Errorf("op %d: %v", op, err)
				}
			}
		}
		if e.VTrain() != r.v {
			return fmt.Errorf("op %d: VTrain() = %d; reference %d", op, e.VTrain(), r.v)
		}
		if e.Pending() != len(owner) {
			return fmt.Errorf("op %d: Pending() = %d; %d pulls wait", op, e.Pending(), len(owner))
		}
	}
	a, b := e.Stats(), r.stats
	if a.DPRs != b.DPRs || a.DelayedIterations != b.DelayedIterations || a.Dropped != b.Dropped ||
		a.Duplicates != b.Duplicates || a.Served != b.Served || !slices.Equal(a.Staleness, b.Staleness) {
		return fmt.Errorf("Stats() = %+v; reference %+v", a, b)
	}
	return nil
}
