package shard

import (
	"cmp"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustNew(t testing.TB, c Config) *Queue {
	t.Helper()
	q, err := New(c)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return q
}

func TestConfigPerEpoch(t *testing.T) {
	tests := []struct {
		c    Config
		want int64
	}{
		{Config{Samples: 1000, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 10}, 10},
		{Config{Samples: 1001, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 10}, 11},
		{Config{Samples: 999, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 10}, 10},
		{Config{Samples: 1, Epochs: 1, GlobalBatch: 256, BatchesPerShard: 100}, 1},
		// MNIST's 60,000 with the spec's example: B=256, M=10: ⌈60000/2560⌉.
		{Config{Samples: 60000, Epochs: 3, GlobalBatch: 256, BatchesPerShard: 10}, 24},
		// AntDT's default M=100 (§VII-A) on Criteo-sized data, B=512.
		{Config{Samples: 45_840_617, Epochs: 1, GlobalBatch: 512, BatchesPerShard: 100}, 896},
	}
	for _, tt := range tests {
		if got := tt.c.PerEpoch(); got != tt.want {
			t.Errorf("%+v.PerEpoch() = %d; want %d", tt.c, got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Samples: 100, Epochs: 2, GlobalBatch: 10, BatchesPerShard: 2}
	tests := []struct {
		name string
		edit func(*Config)
		want string // substring of the error; "" for none
	}{
		{"ok", func(*Config) {}, ""},
		{"no samples", func(c *Config) { c.Samples = 0 }, "samples"},
		{"negative epochs", func(c *Config) { c.Epochs = -1 }, "epochs"},
		{"no batch", func(c *Config) { c.GlobalBatch = 0 }, "global batch"},
		{"no batches per shard", func(c *Config) { c.BatchesPerShard = 0 }, "batches per shard"},
		{"overflow", func(c *Config) { c.GlobalBatch, c.BatchesPerShard = 1<<40, 1<<40 }, "overflows"},
		{"too many shards", func(c *Config) { c.Samples, c.GlobalBatch, c.BatchesPerShard = 1<<40, 1, 1 }, "exceed"},
	}
	for _, tt := range tests {
		c := ok
		tt.edit(&c)
		err := c.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate(%+v) = %v; want error containing %q", tt.name, c, err, tt.want)
		}
		if _, nerr := New(c); (nerr == nil) != (err == nil) {
			t.Errorf("%s: New(%+v) = %v; Validate said %v", tt.name, c, nerr, err)
		}
	}
}

func TestNewLayout(t *testing.T) {
	c := Config{Samples: 1005, Epochs: 3, GlobalBatch: 10, BatchesPerShard: 10, Seed: 7}
	q := mustNew(t, c)
	const k = 11
	if q.Total() != k*3 {
		t.Fatalf("Total() = %d; want %d", q.Total(), k*3)
	}
	if todo, doing, done := q.Counts(); todo != k*3 || doing != 0 || done != 0 {
		t.Errorf("Counts() = %d, %d, %d; want %d, 0, 0", todo, doing, done, k*3)
	}
	for _, s := range q.Shards() {
		e, i := int(s.ID)/k, int64(s.ID)%k
		wantLen := int64(100)
		if i == k-1 {
			wantLen = 5
		}
		if s.Epoch != e || s.Offset != i*100 || s.Length != wantLen || s.State != TODO || s.Owner != "" || s.Attempts != 0 {
			t.Errorf("shard %d = %+v; want epoch %d offset %d length %d TODO", s.ID, s, e, i*100, wantLen)
		}
	}
	// The queue hands out epoch 0 entirely before epoch 1.
	for n := range 3 * k {
		s, ok := q.Fetch("w", 0)
		if !ok || s.Epoch != n/k {
			t.Fatalf("fetch %d = %+v, %v; want a shard of epoch %d", n, s, ok, n/k)
		}
	}
	if s, ok := q.Fetch("w", 0); ok {
		t.Errorf("Fetch on an empty queue = %+v, true; want false", s)
	}
}

// step is one operation of a transition test. Shards are named by the
// order they were first fetched in the test (0 the first), so the tests do
// not depend on the shuffle.
type step struct {
	op     string // fetch, report, release, return
	worker string
	n      int // fetched shard to act on; -1 for ID -1, -2 for ID Total
	at     time.Duration

	wantErr   error // for report and return
	wantOK    bool  // for fetch
	wantN     int   // for fetch: which earlier-fetched shard comes back, -1 for a fresh one
	wantIDs   []int // for release: the fetched shards requeued, in order
	wantState State // of shard n afterwards (fetch: the fetched one)
	wantOwner string
	wantLost  string
	wantTries int
}

func TestTransitions(t *testing.T) {
	c := Config{Samples: 100, Epochs: 1, GlobalBatch: 5, BatchesPerShard: 2, Seed: 3} // K = 10
	f := func(w string) step {
		return step{op: "fetch", worker: w, wantOK: true, wantN: -1, wantState: DOING, wantOwner: w, wantTries: 1}
	}
	refetch := func(w string, n, tries int) step {
		return step{op: "fetch", worker: w, wantOK: true, wantN: n, wantState: DOING, wantOwner: w, wantTries: tries}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"fetch makes DOING", []step{f("a")}},
		{"report makes DONE", []step{f("a"),
			{op: "report", worker: "a", n: 0, at: 5, wantState: DONE, wantOwner: "a", wantTries: 1}}},
		{"duplicate report", []step{f("a"),
			{op: "report", worker: "a", n: 0, wantState: DONE, wantOwner: "a", wantTries: 1},
			{op: "report", worker: "a", n: 0, wantErr: ErrDuplicate, wantState: DONE, wantOwner: "a", wantTries: 1}}},
		{"duplicate report by another worker", []step{f("a"),
			{op: "report", worker: "a", n: 0, wantState: DONE, wantOwner: "a", wantTries: 1},
			{op: "report", worker: "b", n: 0, wantErr: ErrDuplicate, wantState: DONE, wantOwner: "a", wantTries: 1}}},
		{"unknown shard", []step{f("a"),
			{op: "report", worker: "a", n: -1, wantErr: ErrUnknownShard},
			{op: "report", worker: "a", n: -2, wantErr: ErrUnknownShard},
			{op: "return", worker: "a", n: -2, wantErr: ErrUnknownShard}}},
		{"report by a non-owner", []step{f("a"),
			{op: "report", worker: "b", n: 0, wantErr: ErrNotOwner, wantState: DOING, wantOwner: "a", wantTries: 1}}},
		{"release puts DOING back", []step{f("a"), f("a"), f("b"),
			{op: "release", worker: "a", at: 9, wantIDs: []int{0, 1}, n: 1, wantState: TODO, wantLost: "a", wantTries: 1},
			{op: "release", worker: "a", wantIDs: []int{}, n: 2, wantState: DOING, wantOwner: "b", wantTries: 1},
			refetch("c", 0, 2), refetch("c", 1, 2), f("c")}},
		{"late report after release is accepted", []step{f("a"),
			{op: "release", worker: "a", wantIDs: []int{0}, n: 0, wantState: TODO, wantLost: "a", wantTries: 1},
			{op: "report", worker: "b", n: 0, wantErr: ErrNotOwner, wantState: TODO, wantLost: "a", wantTries: 1},
			{op: "report", worker: "a", n: 0, wantState: DONE, wantOwner: "a", wantTries: 1},
			f("b")}}, // the shard left the queue: b gets a fresh one
		{"late report after re-fetch is refused", []step{f("a"),
			{op: "release", worker: "a", wantIDs: []int{0}, n: 0, wantState: TODO, wantLost: "a", wantTries: 1},
			refetch("b", 0, 2),
			{op: "report", worker: "a", n: 0, wantErr: ErrNotOwner, wantState: DOING, wantOwner: "b", wantTries: 2},
			{op: "report", worker: "b", n: 0, wantState: DONE, wantOwner: "b", wantTries: 2}}},
		{"late report after a second release is accepted from the last owner only", []step{f("a"),
			{op: "release", worker: "a", wantIDs: []int{0}, n: 0, wantState: TODO, wantLost: "a", wantTries: 1},
			refetch("b", 0, 2),
			{op: "release", worker: "b", wantIDs: []int{0}, n: 0, wantState: TODO, wantLost: "b", wantTries: 2},
			{op: "report", worker: "a", n: 0, wantErr: ErrNotOwner, wantState: TODO, wantLost: "b", wantTries: 2},
			{op: "report", worker: "b", n: 0, wantState: DONE, wantOwner: "b", wantTries: 2}}},
		{"return requeues without a late report", []step{f("a"),
			{op: "return", worker: "a", n: 0, wantState: TODO, wantTries: 1},
			{op: "report", worker: "a", n: 0, wantErr: ErrNotOwner, wantState: TODO, wantTries: 1},
			refetch("a", 0, 2)}},
		{"return by a non-owner", []step{f("a"),
			{op: "return", worker: "b", n: 0, wantErr: ErrNotOwner, wantState: DOING, wantOwner: "a", wantTries: 1}}},
		{"return of a DONE shard", []step{f("a"),
			{op: "report", worker: "a", n: 0, wantState: DONE, wantOwner: "a", wantTries: 1},
			{op: "return", worker: "a", n: 0, wantErr: ErrNotOwner, wantState: DONE, wantOwner: "a", wantTries: 1}}},
		{"requeued shards go first, in requeue order", []step{f("a"), f("a"), f("b"), f("a"),
			{op: "return", worker: "b", n: 2, wantState: TODO, wantTries: 1},
			{op: "release", worker: "a", wantIDs: []int{0, 1, 3}, n: 3, wantState: TODO, wantLost: "a", wantTries: 1},
			refetch("c", 2, 2), refetch("c", 0, 2), refetch("c", 1, 2), refetch("c", 3, 2), f("c")}},
		{"empty worker name gets nothing", []step{{op: "fetch", worker: "", wantN: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := mustNew(t, c)
			var fetched []ID
			id := func(n int) ID {
				switch n {
				case -1:
					return -1
				case -2:
					return ID(q.Total())
				}
				return fetched[n]
			}
			for i, st := range tt.steps {
				n := st.n
				switch st.op {
				case "fetch":
					s, ok := q.Fetch(st.worker, st.at)
					if ok != st.wantOK {
						t.Fatalf("step %d: Fetch(%q) = %+v, %v; want ok %v", i, st.worker, s, ok, st.wantOK)
					}
					if !ok {
						continue
					}
					n = slices.Index(fetched, s.ID)
					if n != st.wantN {
						t.Fatalf("step %d: Fetch(%q) gave fetched shard #%d; want #%d", i, st.worker, n, st.wantN)
					}
					if n < 0 {
						fetched = append(fetched, s.ID)
						n = len(fetched) - 1
					}
				case "report", "return":
					var err error
					if st.op == "report" {
						err = q.Report(st.worker, id(n), st.at)
					} else {
						err = q.Return(st.worker, id(n), st.at)
					}
					if !errors.Is(err, st.wantErr) || (err == nil) != (st.wantErr == nil) {
						t.Fatalf("step %d: %s(%q, #%d) = %v; want %v", i, st.op, st.worker, n, err, st.wantErr)
					}
					if n < 0 {
						continue
					}
				case "release":
					ids := q.Release(st.worker, st.at)
					want := []ID{}
					for _, m := range st.wantIDs {
						want = append(want, fetched[m])
					}
					if !slices.Equal(ids, want) {
						t.Fatalf("step %d: Release(%q) = %v; want %v", i, st.worker, ids, want)
					}
				}
				s, _ := q.Get(id(n))
				if s.State != st.wantState || s.Owner != st.wantOwner || s.Lost != st.wantLost || s.Attempts != st.wantTries {
					t.Fatalf("step %d (%s %q): shard #%d = %+v; want %v owner %q lost %q attempts %d",
						i, st.op, st.worker, n, s, st.wantState, st.wantOwner, st.wantLost, st.wantTries)
				}
				if st.op != "release" || len(st.wantIDs) > 0 {
					if st.wantErr == nil && s.Since != st.at {
						t.Fatalf("step %d: shard #%d since %v; want %v", i, n, s.Since, st.at)
					}
				}
				checkInvariants(t, q)
			}
		})
	}
}

// checkInvariants verifies the counts and the queue against the shards.
func checkInvariants(t testing.TB, q *Queue) {
	t.Helper()
	var todo []ID
	doing, done := 0, 0
	held := map[string]map[ID]struct{}{}
	for _, s := range q.shards {
		switch s.State {
		case TODO:
			todo = append(todo, s.ID)
		case DOING:
			doing++
			if held[s.Owner] == nil {
				held[s.Owner] = map[ID]struct{}{}
			}
			held[s.Owner][s.ID] = struct{}{}
		case DONE:
			done++
		}
	}
	slices.SortFunc(todo, func(a, b ID) int { return cmp.Compare(q.shards[a].Seq, q.shards[b].Seq) })
	gt, gd, gn := q.Counts()
	if gt != len(todo) || gd != doing || gn != done {
		t.Fatalf("Counts() = %d, %d, %d; shards say %d, %d, %d", gt, gd, gn, len(todo), doing, done)
	}
	if queue := slices.Concat(q.requeued, q.fresh); !slices.Equal(queue, todo) {
		t.Fatalf("queue = %v; TODO shards by Seq = %v", queue, todo)
	}
	if !reflect.DeepEqual(q.held, held) {
		t.Fatalf("held index = %v; shards say %v", q.held, held)
	}
	if q.Finished() != (done == q.Total()) {
		t.Fatalf("Finished() = %v with %d of %d done", q.Finished(), done, q.Total())
	}
}

func TestFetchWhenAllDoing(t *testing.T) {
	q := mustNew(t, Config{Samples: 30, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 1})
	for range 3 {
		if _, ok := q.Fetch("a", 0); !ok {
			t.Fatal("Fetch on a queue with TODO shards = false")
		}
	}
	if s, ok := q.Fetch("b", 1); ok {
		t.Fatalf("Fetch with every shard DOING = %+v, true; want false", s)
	}
	if q.Finished() {
		t.Fatal("Finished() with shards DOING = true")
	}
	if got := q.Release("a", 2); len(got) != 3 {
		t.Fatalf("Release(a) = %v; want 3 shards", got)
	}
	held := 0
	for {
		s, ok := q.Fetch("b", 3)
		if !ok {
			break
		}
		held++
		if err := q.Report("b", s.ID, 4); err != nil {
			t.Fatal(err)
		}
	}
	if held != 3 || !q.Finished() {
		t.Fatalf("after release, b trained %d shards, finished %v; want 3, true", held, q.Finished())
	}
	if got := q.DoneBy(); got["b"] != 3 || len(got) != 1 {
		t.Errorf("DoneBy() = %v; want map[b:3]", got)
	}
}

func TestHeld(t *testing.T) {
	q := mustNew(t, Config{Samples: 50, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 1, Seed: 9})
	a1, _ := q.Fetch("a", 0)
	b1, _ := q.Fetch("b", 0)
	a2, _ := q.Fetch("a", 0)
	if err := q.Report("a", a1.ID, 1); err != nil {
		t.Fatal(err)
	}
	got := q.Held("a")
	if len(got) != 1 || got[0].ID != a2.ID {
		t.Errorf("Held(a) = %v; want [%d]", got, a2.ID)
	}
	if got := q.Held("b"); len(got) != 1 || got[0].ID != b1.ID {
		t.Errorf("Held(b) = %v; want [%d]", got, b1.ID)
	}
	if got := q.Held("c"); len(got) != 0 {
		t.Errorf("Held(c) = %v; want none", got)
	}
}

func TestStateText(t *testing.T) {
	for _, s := range []State{TODO, DOING, DONE} {
		b, err := s.MarshalText()
		var back State
		if err != nil || back.UnmarshalText(b) != nil || back != s {
			t.Errorf("State %v: MarshalText = %q, %v; back %v", s, b, err, back)
		}
	}
	if _, err := State(7).MarshalText(); err == nil {
		t.Error("State(7).MarshalText() = nil error; want one")
	}
	var s State
	if err := s.UnmarshalText([]byte("DOne")); err == nil {
		t.Error(`UnmarshalText("DOne") = nil error; want one`)
	}
	if got := State(7).String(); got != "State(7)" {
		t.Errorf("State(7).String() = %q", got)
	}
}

// TestFastWorkersTakeMore runs workers of different speeds against the
// queue (AntDT Fig. 16): a worker fetches its next shard as soon as it
// reports the last, so its share follows its speed.
func TestFastWorkersTakeMore(t *testing.T) {
	q := mustNew(t, Config{Samples: 700 * 64, Epochs: 1, GlobalBatch: 64, BatchesPerShard: 1, Seed: 5})
	speed := map[string]time.Duration{"fast": 1, "mid": 2, "slow": 4} // time per shard
	free := map[string]time.Duration{"fast": 0, "mid": 0, "slow": 0}
	held := map[string]ID{}
	names := []string{"fast", "mid", "slow"}
	for _, w := range names {
		s, _ := q.Fetch(w, 0)
		held[w] = s.ID
		free[w] = speed[w]
	}
	for len(held) > 0 {
		// The worker that finishes first reports and fetches again.
		w := ""
		for _, n := range names {
			if _, ok := held[n]; ok && (w == "" || free[n] < free[w]) {
				w = n
			}
		}
		now := free[w]
		if err := q.Report(w, held[w], now); err != nil {
			t.Fatal(err)
		}
		delete(held, w)
		if s, ok := q.Fetch(w, now); ok {
			held[w] = s.ID
			free[w] = now + speed[w]
		}
	}
	got := q.DoneBy()
	// Speeds 4:2:1 of 700 shards: 400, 200, 100.
	want := map[string]int{"fast": 400, "mid": 200, "slow": 100}
	for w, n := range want {
		if d := got[w] - n; d < -2 || d > 2 {
			t.Errorf("DoneBy()[%s] = %d; want %d±2", w, got[w], n)
		}
	}
}

// TestRollback: changes that could not be persisted are undone whole —
// fetches, reports, releases and returns since the last commit — and the
// queue goes on exactly as if they had never happened; committed changes
// stay.
func TestRollback(t *testing.T) {
	c := Config{Samples: 1000, Epochs: 2, GlobalBatch: 10, BatchesPerShard: 5}
	q, ref := mustNew(t, c), mustNew(t, c)
	// Committed: w0 holds two shards, one DONE; w1's shard was released.
	for _, q := range []*Queue{q, ref} {
		a, _ := q.Fetch("w0", time.Second)
		q.Fetch("w0", time.Second)
		q.Fetch("w1", time.Second)
		if err := q.Report("w0", a.ID, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		q.Release("w1", 3*time.Second)
		q.Commit()
	}
	// Not persisted: every kind of change, then rolled back.
	x, _ := q.Fetch("w1", 4*time.Second)
	y, _ := q.Fetch("w2", 4*time.Second)
	if err := q.Report("w1", x.ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := q.Return("w2", y.ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	q.Release("w0", 6*time.Second)
	if len(q.Pending()) == 0 {
		t.Fatal("no pending changes")
	}
	q.Rollback()
	if p := q.Pending(); len(p) != 0 {
		t.Fatalf("Pending() after Rollback = %v; want none", p)
	}
	if !reflect.DeepEqual(q.Shards(), ref.Shards()) {
		t.Fatalf("Rollback left\n%v\nwant\n%v", q.Shards(), ref.Shards())
	}
	checkInvariants(t, q)
	// It goes on as the reference does, fetch for fetch.
	for i := 0; ; i++ {
		a, okA := q.Fetch("w3", 7*time.Second)
		b, okB := ref.Fetch("w3", 7*time.Second)
		if a != b || okA != okB {
			t.Fatalf("fetch %d after Rollback = %v %v; the reference's %v %v", i, a, okA, b, okB)
		}
		if !okA {
			break
		}
	}
	if !reflect.DeepEqual(q.Held("w0"), ref.Held("w0")) {
		t.Errorf("w0 holds %v after Rollback; want %v", q.Held("w0"), ref.Held("w0"))
	}
}
