package shard

import (
	"slices"
	"testing"
)

// fetchOrder is the IDs in the order the queue hands them out.
func fetchOrder(t testing.TB, c Config) []ID {
	q := mustNew(t, c)
	var out []ID
	for {
		s, ok := q.Fetch("w", 0)
		if !ok {
			return out
		}
		out = append(out, s.ID)
	}
}

func TestShuffleBetweenShards(t *testing.T) {
	c := Config{Samples: 5000, Epochs: 2, GlobalBatch: 10, BatchesPerShard: 10, Seed: 11} // K = 50
	a, b := fetchOrder(t, c), fetchOrder(t, c)
	if !slices.Equal(a, b) {
		t.Fatalf("two queues of seed %d hand out shards in different orders:\n%v\n%v", c.Seed, a, b)
	}
	for e := range 2 {
		epoch := slices.Clone(a[e*50 : (e+1)*50])
		if slices.IsSorted(epoch) {
			t.Errorf("epoch %d is handed out in offset order; want shuffled", e)
		}
		slices.Sort(epoch)
		for i, id := range epoch {
			if id != ID(e*50+i) {
				t.Fatalf("epoch %d hands out %v; want a permutation of its 50 shards", e, epoch)
			}
		}
	}
	same := 0
	for i := range 50 {
		if a[i]+50 == a[50+i] {
			same++
		}
	}
	if same > 10 {
		t.Errorf("epochs 0 and 1 share %d of 50 places; want different orders", same)
	}
	c.Seed = 12
	if other := fetchOrder(t, c); slices.Equal(a, other) {
		t.Errorf("seeds 11 and 12 give the same order")
	}
}

// TestShuffleUniform checks that each shard is equally likely at each place
// of the queue over many seeds.
func TestShuffleUniform(t *testing.T) {
	const k, trials = 4, 4000
	var count [k][k]int
	for seed := range int64(trials) {
		for place, id := range fetchOrder(t, Config{Samples: k, Epochs: 1, GlobalBatch: 1, BatchesPerShard: 1, Seed: seed}) {
			count[id][place]++
		}
	}
	// Expect 1000 each; the standard deviation is about 27.
	for id := range k {
		for place := range k {
			if n := count[id][place]; n < 880 || n > 1120 {
				t.Errorf("shard %d at place %d in %d of %d seeds; want about %d", id, place, n, trials, trials/k)
			}
		}
	}
}

func TestOrderWithinShard(t *testing.T) {
	c := Config{Samples: 1050, Epochs: 2, GlobalBatch: 25, BatchesPerShard: 4, Seed: 3} // K = 11, last 50
	q := mustNew(t, c)
	for _, s := range q.Shards() {
		got := q.Order(s)
		if !slices.Equal(got, c.Order(s)) {
			t.Fatalf("Order(%d) is not deterministic", s.ID)
		}
		if int64(len(got)) != s.Length {
			t.Fatalf("Order(%d) has %d samples; want %d", s.ID, len(got), s.Length)
		}
		sorted := slices.Clone(got)
		slices.Sort(sorted)
		for i, p := range sorted {
			if p != s.Offset+int64(i) {
				t.Fatalf("Order(%d) = %v; want a permutation of [%d, %d)", s.ID, got, s.Offset, s.Offset+s.Length)
			}
		}
		if slices.Equal(got, sorted) {
			t.Errorf("Order(%d) is in offset order; want shuffled", s.ID)
		}
	}
	// The same range reads differently in the next epoch and under another seed.
	s0, _ := q.Get(2)
	s1, _ := q.Get(13)
	if s0.Offset != s1.Offset || slices.Equal(q.Order(s0), q.Order(s1)) {
		t.Errorf("shards 2 and 13 (same range, epochs 0 and 1) read in the same order")
	}
	c.Seed = 4
	if slices.Equal(q.Order(s0), c.Order(s0)) {
		t.Errorf("seeds 3 and 4 read shard 2 in the same order")
	}
	if got := c.Order(Shard{}); got != nil {
		t.Errorf("Order of an empty shard = %v; want nil", got)
	}
}

// TestShufflePinned pins the shuffles, so that a change to them, which
// would make a restarted scheduler and its workers disagree on an order,
// is a deliberate one.
func TestShufflePinned(t *testing.T) {
	c := Config{Samples: 80, Epochs: 1, GlobalBatch: 2, BatchesPerShard: 5, Seed: 1} // K = 8
	if got, want := fetchOrder(t, c), []ID{4, 0, 6, 1, 3, 7, 2, 5}; !slices.Equal(got, want) {
		t.Errorf("queue order of seed 1 = %v; want %v", got, want)
	}
	s, _ := mustNew(t, c).Get(3)
	if got, want := c.Order(s), []int64{34, 33, 38, 35, 39, 37, 36, 31, 30, 32}; !slices.Equal(got, want) {
		t.Errorf("Order(shard 3) = %v; want %v", got, want)
	}
}
