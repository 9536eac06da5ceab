package shard

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// sameQueue reports how a and b differ in state (not in pending Changes).
func sameQueue(a, b *Queue) string {
	switch {
	case a.cfg != b.cfg || a.k != b.k:
		return "config"
	case !reflect.DeepEqual(a.shards, b.shards):
		for i := range a.shards {
			if a.shards[i] != b.shards[i] {
				return fmt.Sprintf("shard %+v vs %+v", a.shards[i], b.shards[i])
			}
		}
		return "shards"
	case !slices.Equal(a.requeued, b.requeued) || !slices.Equal(a.fresh, b.fresh):
		return "queue order"
	case a.doing != b.doing || a.done != b.done:
		return "counts"
	case a.front != b.front:
		return "requeue position"
	case !reflect.DeepEqual(a.held, b.held):
		return "held index"
	}
	return ""
}

// busyQueue is a queue with shards in every state, requeued, returned and
// late-reported ones among them.
func busyQueue(t testing.TB) *Queue {
	q := mustNew(t, Config{Samples: 1234, Epochs: 3, GlobalBatch: 16, BatchesPerShard: 4, Seed: -42})
	now := time.Duration(0)
	tick := func() time.Duration { now += time.Millisecond; return now }
	for i := range 40 {
		w := []string{"worker-0", "worker-1", "worker-2"}[i%3]
		s, _ := q.Fetch(w, tick())
		if i%4 != 0 {
			if err := q.Report(w, s.ID, tick()); err != nil {
				t.Fatal(err)
			}
		}
	}
	lost := q.Release("worker-1", tick())
	if err := q.Report("worker-1", lost[0], tick()); err != nil { // late
		t.Fatal(err)
	}
	held := q.Held("worker-2")
	if err := q.Return("worker-2", held[0].ID, tick()); err != nil {
		t.Fatal(err)
	}
	q.Fetch("worker-3", tick())
	return q
}

func TestMarshalRestore(t *testing.T) {
	finished := mustNew(t, Config{Samples: 100, Epochs: 2, GlobalBatch: 10, BatchesPerShard: 1, Seed: 1})
	for {
		s, ok := finished.Fetch("w", 1)
		if !ok {
			break
		}
		finished.Report("w", s.ID, 2)
	}
	tests := []struct {
		name string
		q    *Queue
	}{
		{"fresh", mustNew(t, Config{Samples: 1000, Epochs: 2, GlobalBatch: 32, BatchesPerShard: 2, Seed: 5})},
		{"busy", busyQueue(t)},
		{"finished", finished},
	}
	for _, tt := range tests {
		b, err := tt.q.MarshalBinary()
		if err != nil {
			t.Fatalf("%s: MarshalBinary: %v", tt.name, err)
		}
		got, err := Restore(b)
		if err != nil {
			t.Fatalf("%s: Restore(MarshalBinary()): %v", tt.name, err)
		}
		if d := sameQueue(got, tt.q); d != "" {
			t.Errorf("%s: Restore(MarshalBinary()) differs in %s", tt.name, d)
		}
		// And they go on the same way.
		for i := range 10 {
			w := []string{"worker-1", "worker-3"}[i%2]
			s1, ok1 := tt.q.Fetch(w, 99)
			s2, ok2 := got.Fetch(w, 99)
			if s1 != s2 || ok1 != ok2 {
				t.Fatalf("%s: fetch %d after restore = %+v, %v; original %+v, %v", tt.name, i, s2, ok2, s1, ok1)
			}
		}
		if !reflect.DeepEqual(tt.q.Release("worker-3", 100), got.Release("worker-3", 100)) {
			t.Errorf("%s: Release after restore differs", tt.name)
		}
	}
}

func TestSnapshotSize(t *testing.T) {
	q := mustNew(t, Config{Samples: 60000, Epochs: 3, GlobalBatch: 256, BatchesPerShard: 10, Seed: 1})
	b, _ := q.MarshalBinary()
	if len(b) > 32 {
		t.Errorf("snapshot of a fresh queue is %d bytes; want a header only (≤ 32)", len(b))
	}
}

func TestChangesApply(t *testing.T) {
	q := busyQueue(t)
	snap, _ := q.MarshalBinary()
	q.Changes() // everything so far is in the snapshot

	// More work after the snapshot, persisted as per-shard records in
	// batches, some shards changed in several batches.
	var log [][]byte
	persist := func() {
		for _, s := range q.Changes() {
			b, err := s.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, b)
		}
	}
	for i := range 30 {
		w := []string{"worker-0", "worker-2", "worker-4"}[i%3]
		s, ok := q.Fetch(w, time.Duration(i+100))
		if ok && i%5 != 0 {
			q.Report(w, s.ID, time.Duration(i+101))
		}
		if i%7 == 0 {
			persist()
		}
	}
	q.Release("worker-4", 200)
	persist()
	if got := q.Changes(); got != nil {
		t.Fatalf("Changes() after draining = %v; want nil", got)
	}

	back, err := Restore(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range log { // replay in order: the latest record of a shard wins
		var s Shard
		if err := s.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if err := back.Apply(s); err != nil {
			t.Fatalf("Apply(%+v): %v", s, err)
		}
	}
	if d := sameQueue(back, q); d != "" {
		t.Errorf("snapshot + changes differs from the live queue in %s", d)
	}
	if got := back.Changes(); got != nil {
		t.Errorf("Changes() after Apply = %v; want nil (recovered state is already durable)", got)
	}
}

func TestChangesReportsEachShardOnce(t *testing.T) {
	q := mustNew(t, Config{Samples: 100, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 1})
	a, _ := q.Fetch("a", 1)
	q.Report("a", a.ID, 2)
	b, _ := q.Fetch("b", 3)
	got := q.Changes()
	want := []Shard{a, b}
	want[0].State, want[0].Since = DONE, 2
	slices.SortFunc(want, func(x, y Shard) int { return int(x.ID - y.ID) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Changes() = %+v; want %+v", got, want)
	}
}

func TestRestoreRejects(t *testing.T) {
	q := busyQueue(t)
	good, _ := q.MarshalBinary()
	otherCfg, _ := mustNew(t, Config{Samples: 1234, Epochs: 3, GlobalBatch: 16, BatchesPerShard: 5, Seed: -42}).MarshalBinary()
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "bad header"},
		{"bad magic", append([]byte("KSQ\x02"), good[4:]...), "bad header"},
		{"truncated", good[:len(good)-3], "truncated"},
		{"trailing bytes", append(slices.Clone(good), 0), "trailing"},
		{"invalid config", []byte("KSQ\x01\x00\x01\x01\x01\x00\x00"), "samples must be positive"},
		// The busy queue's records under a config with other shard sizes.
		{"records of another config", append(slices.Clone(otherCfg[:len(otherCfg)-1]), good[len(otherCfg)-1:]...), "config says"},
	}
	for _, tt := range tests {
		if _, err := Restore(tt.b); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Restore(%s) = %v; want error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestApplyRejects(t *testing.T) {
	q := mustNew(t, Config{Samples: 100, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 1, Seed: 2})
	s, _ := q.Get(3)
	other, _ := q.Get(4)
	tests := []struct {
		name string
		edit func(*Shard)
		want string
	}{
		{"unknown", func(r *Shard) { r.ID = 10 }, "unknown shard"},
		{"wrong offset", func(r *Shard) { r.Offset = 7 }, "config says"},
		{"bad state", func(r *Shard) { r.State = 5 }, "invalid state"},
		{"TODO with owner", func(r *Shard) { r.Owner = "a" }, "with owner"},
		{"DOING without owner", func(r *Shard) { r.State, r.Attempts = DOING, 1 }, "without owner"},
		{"DONE never fetched", func(r *Shard) { r.State, r.Owner = DONE, "a" }, "after 0 attempts"},
		{"DONE and lost", func(r *Shard) { r.State, r.Owner, r.Attempts, r.Lost = DONE, "a", 1, "b" }, "lost"},
		{"same place as another", func(r *Shard) { r.Seq = other.Seq }, "both have queue position"},
		{"place beyond the queue", func(r *Shard) { r.Seq = 10 }, "beyond"},
	}
	before, _ := q.MarshalBinary()
	for _, tt := range tests {
		r := s
		tt.edit(&r)
		if err := q.Apply(r); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Apply(%s: %+v) = %v; want error containing %q", tt.name, r, err, tt.want)
		}
		if after, _ := q.MarshalBinary(); !slices.Equal(before, after) {
			t.Fatalf("Apply(%s) changed the queue although it failed", tt.name)
		}
	}
}

func TestRecordRejects(t *testing.T) {
	s, _ := mustNew(t, Config{Samples: 10, Epochs: 1, GlobalBatch: 1, BatchesPerShard: 1}).Get(1)
	s.Owner = strings.Repeat("x", maxName+1)
	long, _ := s.MarshalBinary()
	var r Shard
	for name, b := range map[string][]byte{"empty": nil, "long name": long, "snapshot magic": []byte("KSQ\x01")} {
		if err := r.UnmarshalBinary(b); err == nil {
			t.Errorf("UnmarshalBinary(%s) = nil; want an error", name)
		}
	}
}

func FuzzRestore(f *testing.F) {
	good, _ := busyQueue(f).MarshalBinary()
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte("KSQ\x01\x02\x01\x01\x01\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := Restore(b)
		if err != nil {
			return
		}
		checkInvariants(t, q)
		again, err := q.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		q2, err := Restore(again)
		if err != nil {
			t.Fatalf("Restore(MarshalBinary(Restore(b))): %v", err)
		}
		if d := sameQueue(q, q2); d != "" {
			t.Fatalf("second round trip differs in %s", d)
		}
	})
}
