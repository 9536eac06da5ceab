package shard

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
	"time"
)

// ref is a deliberately simple reference of the queue: maps and lists, no
// queue positions, no counters.
type ref struct {
	state    map[ID]State
	owner    map[ID]string
	lost     map[ID]string
	requeued []ID // TODO shards put back, served first, oldest first
	fresh    []ID // never-fetched shards in the shuffled order
	// rank orders shards by where they last stood in the queue: fresh
	// shards by their place, requeued ones before them all.
	rank  map[ID]int64
	ranks int64
}

func newRef(q *Queue) *ref {
	r := &ref{state: map[ID]State{}, owner: map[ID]string{}, lost: map[ID]string{}, rank: map[ID]int64{}, ranks: -1 << 40}
	r.fresh = slices.Clone(q.fresh) // the shuffled order is tested on its own
	for i, id := range r.fresh {
		r.state[id] = TODO
		r.rank[id] = int64(i)
	}
	return r
}

func (r *ref) fetch(w string) (ID, bool) {
	if w == "" {
		return 0, false
	}
	var id ID
	switch {
	case len(r.requeued) > 0:
		id, r.requeued = r.requeued[0], r.requeued[1:]
	case len(r.fresh) > 0:
		id, r.fresh = r.fresh[0], r.fresh[1:]
	default:
		return 0, false
	}
	r.state[id], r.owner[id], r.lost[id] = DOING, w, ""
	return id, true
}

func (r *ref) report(w string, id ID) error {
	st, ok := r.state[id]
	switch {
	case !ok:
		return ErrUnknownShard
	case st == DONE:
		return ErrDuplicate
	case st == DOING && r.owner[id] == w:
	case st == TODO && r.lost[id] == w && w != "":
		r.requeued = slices.DeleteFunc(r.requeued, func(x ID) bool { return x == id })
	default:
		return ErrNotOwner
	}
	r.state[id], r.owner[id], r.lost[id] = DONE, w, ""
	return nil
}

func (r *ref) putBack(id ID, lost string) {
	r.state[id], r.owner[id], r.lost[id] = TODO, "", lost
	r.requeued = append(r.requeued, id)
	r.rank[id] = r.ranks
	r.ranks++
}

func (r *ref) release(w string) []ID {
	out := []ID{}
	for id, st := range r.state {
		if st == DOING && r.owner[id] == w {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, func(a, b ID) int { return cmp.Compare(r.rank[a], r.rank[b]) })
	for _, id := range out {
		r.putBack(id, w)
	}
	return out
}

func (r *ref) giveBack(w string, id ID) error {
	st, ok := r.state[id]
	switch {
	case !ok:
		return ErrUnknownShard
	case st != DOING || r.owner[id] != w:
		return ErrNotOwner
	}
	r.putBack(id, "")
	return nil
}

func errKind(err error) string {
	for _, e := range []error{ErrUnknownShard, ErrNotOwner, ErrDuplicate} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return "other: " + err.Error()
	}
	return "nil"
}

var workers = []string{"w0", "w1", "w2", "w3", ""}

// interleave drives q and the reference with ops decoded from bytes
// (fetch, report, release and return, by random workers, for random and
// held shards), compares them after every op, then drains the queue and
// checks that every epoch ends with exactly K DONE shards covering its
// samples.
func interleave(t testing.TB, c Config, ops []byte) {
	q := mustNew(t, c)
	r := newRef(q)
	now := time.Duration(0)
	pick := func(i int) byte {
		if i < len(ops) {
			return ops[i]
		}
		return 0
	}
	for i := 0; i < len(ops); i += 3 {
		now++
		op, w := pick(i)%8, workers[int(pick(i+1))%len(workers)]
		anyID := ID(int(pick(i+2))%(q.Total()+2) - 1) // includes -1 and Total
		held := anyID
		if h := q.Held(w); len(h) > 0 {
			held = h[int(pick(i+2))%len(h)].ID
		}
		var desc, got, want string
		switch op {
		case 0, 1, 2:
			s, ok := q.Fetch(w, now)
			id, rok := r.fetch(w)
			desc, got, want = fmt.Sprintf("Fetch(%q)", w), fmt.Sprint(s.ID, ok), fmt.Sprint(id, rok)
			if !ok {
				got = fmt.Sprint(0, ok)
			}
		case 3, 4:
			desc = fmt.Sprintf("Report(%q, %d)", w, held)
			got, want = errKind(q.Report(w, held, now)), errKind(r.report(w, held))
		case 5:
			desc = fmt.Sprintf("Report(%q, %d)", w, anyID)
			got, want = errKind(q.Report(w, anyID, now)), errKind(r.report(w, anyID))
		case 6:
			desc = fmt.Sprintf("Release(%q)", w)
			got, want = fmt.Sprint(q.Release(w, now)), fmt.Sprint(r.release(w))
		case 7:
			id := held
			if pick(i+2)%2 == 0 {
				id = anyID
			}
			desc = fmt.Sprintf("Return(%q, %d)", w, id)
			got, want = errKind(q.Return(w, id, now)), errKind(r.giveBack(w, id))
		}
		if got != want {
			t.Fatalf("op %d: %s = %s; reference says %s", i/3, desc, got, want)
		}
		checkInvariants(t, q)
		for _, s := range q.shards {
			if s.State != r.state[s.ID] || s.Owner != r.owner[s.ID] || s.Lost != r.lost[s.ID] {
				t.Fatalf("op %d (%s): shard %d = %v %q lost %q; reference %v %q lost %q", i/3, desc,
					s.ID, s.State, s.Owner, s.Lost, r.state[s.ID], r.owner[s.ID], r.lost[s.ID])
			}
		}
	}
	// Every worker is lost; one survivor finishes the job.
	for _, w := range workers {
		q.Release(w, now)
	}
	for {
		s, ok := q.Fetch("survivor", now)
		if !ok {
			break
		}
		if err := q.Report("survivor", s.ID, now); err != nil {
			t.Fatalf("drain: %v", err)
		}
	}
	if !q.Finished() {
		todo, doing, done := q.Counts()
		t.Fatalf("drained queue not finished: %d, %d, %d", todo, doing, done)
	}
	k := c.PerEpoch()
	for e := range c.Epochs {
		done, covered := int64(0), int64(0)
		for _, s := range q.shards {
			if s.Epoch == e && s.State == DONE {
				if s.Offset != covered {
					t.Fatalf("epoch %d: shard at %d after samples up to %d", e, s.Offset, covered)
				}
				done++
				covered += s.Length
			}
		}
		if done != k || covered != c.Samples {
			t.Fatalf("epoch %d: %d DONE shards covering %d samples; want ⌈N/(B·M)⌉ = %d covering %d", e, done, covered, k, c.Samples)
		}
	}
}

func quickConfig(n uint16, b, m, e uint8, seed int64) Config {
	return Config{Samples: int64(n%300) + 1, GlobalBatch: int(b%8) + 1, BatchesPerShard: int(m%4) + 1, Epochs: int(e%3) + 1, Seed: seed}
}

func TestInterleavingsMatchReference(t *testing.T) {
	// Each case runs 100 to 600 ops, enough to requeue, re-fetch and
	// late-report the same shards several times over.
	f := func(n uint16, b, m, e uint8, seed int64, opSeed uint64, count uint16) bool {
		rng := rand.New(rand.NewPCG(opSeed, 1))
		ops := make([]byte, 3*(100+int(count)%500))
		for i := range ops {
			ops[i] = byte(rng.Uint32())
		}
		interleave(t, quickConfig(n, b, m, e, seed), ops)
		return !t.Failed()
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 120}); err != nil {
		t.Error(err)
	}
}

func FuzzInterleavings(f *testing.F) {
	f.Add(uint16(100), uint8(4), uint8(2), uint8(1), int64(1), []byte{0, 0, 0, 0, 1, 0, 6, 0, 0, 3, 1, 0, 0, 2, 0})
	f.Add(uint16(37), uint8(2), uint8(1), uint8(2), int64(9), []byte{1, 1, 1, 6, 1, 0, 5, 1, 3, 7, 2, 0, 0, 3, 0, 3, 3, 0})
	f.Fuzz(func(t *testing.T, n uint16, b, m, e uint8, seed int64, ops []byte) {
		interleave(t, quickConfig(n, b, m, e, seed), ops)
	})
}
