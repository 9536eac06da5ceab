package syncmodel

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		c       Config
		wantErr string // substring; empty means valid
	}{
		{Config{Model: BSP}, ""},
		{Config{Model: ASP, Pull: SoftBarrier}, ""},
		{Config{Model: SSP, Staleness: 0}, ""},
		{Config{Model: SSP, Staleness: 3, Pull: Lazy}, ""},
		{Config{Model: DSPS, Staleness: 2}, ""},
		{Config{Model: Drop, DropWaitFor: 3}, ""},
		{Config{Model: PSSP, Staleness: 3, PSSPC: 0.5}, ""},
		{Config{Model: PSSP, Staleness: 3, PSSPDynamic: true, PSSPAlpha: 1}, ""},
		{Config{Model: "bulk"}, "unknown model"},
		{Config{}, "unknown model"},
		{Config{Model: BSP, Pull: "eager"}, "unknown pull mode"},
		{Config{Model: SSP, Staleness: -1}, "negative"},
		{Config{Model: DSPS, Staleness: 0}, "dsps needs staleness"},
		{Config{Model: Drop}, "wait_for"},
		{Config{Model: PSSP, Staleness: 3, PSSPC: 1.5}, "pssp c"},
		{Config{Model: PSSP, Staleness: 3, PSSPC: math.NaN()}, "pssp c"},
		{Config{Model: PSSP, Staleness: 3, PSSPDynamic: true, PSSPAlpha: -1}, "alpha"},
		{Config{Model: PSSP, Staleness: 3, PSSPDynamic: true, PSSPAlpha: math.Inf(1)}, "alpha"},
	}
	for _, tt := range tests {
		err := tt.c.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%+v.Validate() = %v; want nil", tt.c, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%+v.Validate() = %v; want error containing %q", tt.c, err, tt.wantErr)
		}
	}
}

func TestAggregate(t *testing.T) {
	want := map[Kind]bool{BSP: true, Drop: true, ASP: false, SSP: false, DSPS: false, PSSP: false}
	for k, w := range want {
		if got := (Config{Model: k}).Aggregate(); got != w {
			t.Errorf("Config{Model: %s}.Aggregate() = %v; want %v", k, got, w)
		}
	}
}

// atVTrain returns an engine whose V_train is v: every member pushed
// iterations 0..v-1.
func atVTrain(c Config, members []int, v int64) *Engine {
	e := New(c, members)
	for i := int64(0); i < v; i++ {
		for _, w := range members {
			e.Push(w, i)
		}
	}
	return e
}

// TestPullCondition checks every model's pull condition (FluentPS Table III)
// at V_train = 4 with 3 workers.
func TestPullCondition(t *testing.T) {
	ssp3 := Config{Model: SSP, Staleness: 3}
	pssp := Config{Model: PSSP, Staleness: 3, PSSPC: 0.5}
	dyn := Config{Model: PSSP, Staleness: 3, PSSPDynamic: true, PSSPAlpha: 1}
	tests := []struct {
		c        Config
		progress int64
		u        float64
		want     bool
	}{
		// bsp: progress < V_train
		{Config{Model: BSP}, 3, 0, true},
		{Config{Model: BSP}, 4, 0, false},
		{Config{Model: BSP}, 9, 0.99, false},
		// asp: progress < V_train + ∞
		{Config{Model: ASP}, 4, 0, true},
		{Config{Model: ASP}, 1000, 0, true},
		// ssp: progress < V_train + s
		{ssp3, 6, 0, true},
		{ssp3, 7, 0, false},
		{Config{Model: SSP, Staleness: 0}, 3, 0, true}, // s = 0 is bsp
		{Config{Model: SSP, Staleness: 0}, 4, 0, false},
		// dsps starts at s
		{Config{Model: DSPS, Staleness: 2}, 5, 0, true},
		{Config{Model: DSPS, Staleness: 2}, 6, 0, false},
		// drop: progress < V_train
		{Config{Model: Drop, DropWaitFor: 2}, 3, 0, true},
		{Config{Model: Drop, DropWaitFor: 2}, 4, 0, false},
		// pssp: progress < V_train + s, or u >= P
		{pssp, 6, 0, true},
		{pssp, 7, 0.49, false},
		{pssp, 7, 0.5, true},
		{pssp, 20, 0.9, true},
		{pssp, 20, 0.1, false},
		// dynamic: k = progress - V_train; P(3,3) = 0.5, P(3,5) = 0.881
		{dyn, 7, 0.49, false},
		{dyn, 7, 0.51, true},
		{dyn, 9, 0.87, false},
		{dyn, 9, 0.89, true},
		// anything below V_train is served under every model
		{dyn, 0, 0, true},
	}
	for _, tt := range tests {
		e := atVTrain(tt.c, []int{0, 1, 2}, 4)
		if got := e.Pull(1, 0, tt.progress, tt.u); got != tt.want {
			t.Errorf("%v at V_train=4: Pull(progress=%d, u=%v) = %v; want %v", tt.c, tt.progress, tt.u, got, tt.want)
		}
	}
}

// TestPushCondition checks when V_train advances: Count[V_train] == N, or
// N_t for drop-stragglers, with late and duplicate pushes.
func TestPushCondition(t *testing.T) {
	type push struct {
		worker   int
		progress int64
	}
	tests := []struct {
		name       string
		c          Config
		pushes     []push
		wantV      int64
		wantReject []Reject // per push
	}{
		{"bsp waits for all", Config{Model: BSP},
			[]push{{0, 0}, {1, 0}}, 0, []Reject{"", ""}},
		{"bsp completes", Config{Model: BSP},
			[]push{{0, 0}, {1, 0}, {2, 0}}, 1, []Reject{"", "", ""}},
		{"ssp counts ahead", Config{Model: SSP, Staleness: 2},
			[]push{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}}, 1, []Reject{"", "", "", "", ""}},
		{"ssp catches up two", Config{Model: SSP, Staleness: 2},
			[]push{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1}}, 2, []Reject{"", "", "", "", "", ""}},
		{"asp same push condition", Config{Model: ASP},
			[]push{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {2, 0}}, 1, []Reject{"", "", "", "", ""}},
		{"pssp same push condition", Config{Model: PSSP, Staleness: 1, PSSPC: 0.5},
			[]push{{0, 0}, {1, 0}, {2, 0}}, 1, []Reject{"", "", ""}},
		{"dsps same push condition", Config{Model: DSPS, Staleness: 1},
			[]push{{0, 0}, {1, 0}}, 0, []Reject{"", ""}},
		{"drop completes at N_t", Config{Model: Drop, DropWaitFor: 2},
			[]push{{0, 0}, {2, 0}}, 1, []Reject{"", ""}},
		{"drop rejects the straggler", Config{Model: Drop, DropWaitFor: 2},
			[]push{{0, 0}, {2, 0}, {1, 0}}, 1, []Reject{"", "", Stale}},
		{"duplicate does not count", Config{Model: BSP},
			[]push{{0, 0}, {0, 0}, {1, 0}, {1, 0}}, 0, []Reject{"", Duplicate, "", Duplicate}},
		{"duplicate under drop", Config{Model: Drop, DropWaitFor: 2},
			[]push{{0, 0}, {0, 0}}, 0, []Reject{"", Duplicate}},
		{"not a member", Config{Model: ASP},
			[]push{{7, 0}}, 0, []Reject{NotMember}},
	}
	for _, tt := range tests {
		e := New(tt.c, []int{0, 1, 2})
		for i, p := range tt.pushes {
			r := e.Push(p.worker, p.progress)
			if r.Reject != tt.wantReject[i] || r.Accept != (tt.wantReject[i] == "") {
				t.Errorf("%s: push %d Push(%d, %d) = %+v; want reject %q", tt.name, i, p.worker, p.progress, r, tt.wantReject[i])
			}
		}
		if got := e.VTrain(); got != tt.wantV {
			t.Errorf("%s: VTrain() = %d; want %d", tt.name, got, tt.wantV)
		}
	}
}

func TestLatePushOutsideDrop(t *testing.T) {
	// A worker added after iteration 0 completed pushes iteration 0.
	for _, tt := range []struct {
		c          Config
		wantAccept bool
	}{
		{Config{Model: ASP}, true},
		{Config{Model: SSP, Staleness: 2}, true},
		{Config{Model: BSP}, false}, // that version's sum was already applied
	} {
		e := atVTrain(tt.c, []int{0, 1}, 1)
		e.SetWorkers([]int{0, 1, 2})
		r := e.Push(2, 0)
		if r.Accept != tt.wantAccept || r.Advanced != 0 {
			t.Errorf("%v: late Push(2, 0) = %+v; want accept %v, no advance", tt.c, r, tt.wantAccept)
		}
	}
}

func TestProbability(t *testing.T) {
	c := Config{Model: PSSP, Staleness: 3, PSSPC: 0.3}
	d := Config{Model: PSSP, Staleness: 3, PSSPDynamic: true, PSSPAlpha: 1}
	big := Config{Model: PSSP, Staleness: 3, PSSPDynamic: true, PSSPAlpha: 4}
	tests := []struct {
		c    Config
		k    int64
		want float64
	}{
		{c, 2, 0},
		{c, 3, 0.3},
		{c, 30, 0.3},
		{d, 2, 0},
		{d, 3, 0.5}, // α/2 at k = s (Theorem 2)
		{d, 4, 1 / (1 + math.Exp(-1))},
		{d, 13, 1 / (1 + math.Exp(-10))},
		{big, 5, 1}, // clamped
	}
	for _, tt := range tests {
		if got := tt.c.Probability(tt.k); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("%v.Probability(%d) = %v; want %v", tt.c, tt.k, got, tt.want)
		}
	}
}

// TestFig3 checks the claims of FluentPS Fig. 3 on the replays in
// testdata/fig3_*.txt: lazy execution pauses the fast worker once and then
// serves fresh parameters; the soft barrier pauses it at every iteration
// for one advance and serves parameters s iterations stale.
func TestFig3(t *testing.T) {
	run := func(mode PullMode) (*Engine, map[PullID]int64) {
		t.Helper()
		e := New(Config{Model: SSP, Staleness: 3, Pull: mode}, []int{0, 1, 2})
		gaps := map[PullID]int64{}
		progress := map[PullID]int64{}
		var id PullID
		next := map[int]int64{}     // worker -> progress to push next
		blocked := map[PullID]int{} // waiting pull -> worker
		step := func(w int) {
			p := next[w]
			for _, rid := range e.Push(w, p).Release {
				gaps[rid] = progress[rid] + 1 - e.VTrain()
				next[blocked[rid]]++
				delete(blocked, rid)
			}
			id++
			progress[id] = p
			if e.Pull(id, w, p, 0) {
				next[w]++
				return
			}
			blocked[id] = w
		}
		// W_2 pushes iteration i at t = 1+3i, the others every unit.
		for tick := 1; tick <= 16; tick++ {
			for _, w := range []int{0, 1} {
				if !slices.Contains(mapValues(blocked), w) {
					step(w)
				}
			}
			if (tick-1)%3 == 0 {
				step(2)
			}
		}
		return e, gaps
	}
	lazy, lazyGaps := run(Lazy)
	soft, softGaps := run(SoftBarrier)
	ls, ss := lazy.Stats(), soft.Stats()
	t.Logf("Fig. 3 replay to t=16: lazy %d DPRs (%d delayed iterations), soft barrier %d DPRs (%d delayed iterations)",
		ls.DPRs, ls.DelayedIterations, ss.DPRs, ss.DelayedIterations)
	if ls.DPRs != 2 || ls.DelayedIterations != 8 {
		t.Errorf("lazy: %d DPRs, %d delayed iterations; want 2 (one per fast worker) waiting 4 advances each", ls.DPRs, ls.DelayedIterations)
	}
	if ss.DPRs != 8 || ss.DelayedIterations != 8 {
		t.Errorf("soft barrier: %d DPRs, %d delayed iterations; want 8 waiting one advance each", ss.DPRs, ss.DelayedIterations)
	}
	for id, g := range lazyGaps {
		if g != 0 {
			t.Errorf("lazy: released pull %d lacked %d iterations; want fresh parameters", id, g)
		}
	}
	for id, g := range softGaps {
		if g != 3 {
			t.Errorf("soft barrier: released pull %d lacked %d iterations; want s = 3", id, g)
		}
	}
}

func mapValues(m map[PullID]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// sim plays workers with fixed compute times against one engine: each
// worker computes, pushes, pulls, and computes again once the pull is
// answered. Communication is free. It stops when the slowest worker has
// pushed iters iterations.
type simResult struct {
	engine   *Engine
	stats    Stats
	time     int64
	progress []int64
}

func simulate(t *testing.T, c Config, compute []int64, iters int64, draw func() float64) simResult {
	t.Helper()
	n := len(compute)
	members := make([]int, n)
	for i := range members {
		members[i] = i
	}
	e := New(c, members)
	at := make([]int64, n) // when the current iteration's compute ends; -1 while waiting
	next := make([]int64, n)
	for w := range at {
		at[w] = compute[w]
	}
	waiting := map[PullID]int{}
	var id PullID
	var now int64
	for {
		w := -1
		for i := range at {
			if at[i] >= 0 && (w < 0 || at[i] < at[w]) {
				w = i
			}
		}
		if w < 0 {
			t.Fatalf("%v: every worker waits (V_train %d)", c, e.VTrain())
		}
		now = at[w]
		p := next[w]
		for _, rid := range e.Push(w, p).Release {
			r := waiting[rid]
			delete(waiting, rid)
			next[r]++
			at[r] = now + compute[r]
		}
		if slices.Min(next) >= iters {
			break
		}
		id++
		if e.Pull(id, w, p, draw()) {
			next[w]++
			at[w] = now + compute[w]
		} else {
			waiting[id] = w
			at[w] = -1
		}
	}
	return simResult{e, e.Stats(), now, next}
}

// lcg is a tiny deterministic uniform source for the simulations.
func lcg(seed uint64) func() float64 {
	x := seed
	return func() float64 {
		x = x*6364136223846793005 + 1442695040888963407
		return float64(x>>11) / (1 << 53)
	}
}

func meanGap(s Stats) float64 {
	var n, sum int64
	for g, c := range s.Staleness {
		n += c
		sum += int64(g) * c
	}
	return float64(sum) / float64(n)
}

// TestLazyFewerDPRsThanSoftBarrier runs one slow worker (3x) among four
// under SSP(s=3): the lazy buffer delays far fewer pulls than the soft
// barrier, each for longer, and serves fresher parameters (FluentPS §IV-B3).
func TestLazyFewerDPRsThanSoftBarrier(t *testing.T) {
	compute := []int64{10, 10, 11, 30}
	res := map[PullMode]simResult{}
	for _, mode := range []PullMode{Lazy, SoftBarrier} {
		res[mode] = simulate(t, Config{Model: SSP, Staleness: 3, Pull: mode}, compute, 200, lcg(1))
		r := res[mode]
		t.Logf("ssp(s=3) %-12s DPRs=%4d delayed iterations=%4d mean gap=%.2f time=%d fast worker iterations=%d",
			mode, r.stats.DPRs, r.stats.DelayedIterations, meanGap(r.stats), r.time, r.progress[0])
	}
	lazy, soft := res[Lazy].stats, res[SoftBarrier].stats
	if lazy.DPRs >= soft.DPRs {
		t.Errorf("lazy DPRs = %d; want fewer than soft barrier's %d", lazy.DPRs, soft.DPRs)
	}
	if meanGap(lazy) >= meanGap(soft) {
		t.Errorf("lazy mean gap %.2f; want below soft barrier's %.2f", meanGap(lazy), meanGap(soft))
	}
	for _, c := range []Config{
		{Model: PSSP, Staleness: 3, PSSPC: 0.3, Pull: Lazy},
		{Model: PSSP, Staleness: 3, PSSPC: 0.3, Pull: SoftBarrier},
		{Model: PSSP, Staleness: 3, PSSPDynamic: true, PSSPAlpha: 1, Pull: Lazy},
		{Model: DSPS, Staleness: 3, Pull: Lazy},
	} {
		r := simulate(t, c, compute, 200, lcg(1))
		t.Logf("%-28v DPRs=%4d delayed iterations=%4d mean gap=%.2f", c, r.stats.DPRs, r.stats.DelayedIterations, meanGap(r.stats))
	}
}

// TestPSSPExtremes: c = 0 behaves as ASP and c = 1 as SSP with the same s,
// pull for pull, on a schedule with a straggler.
func TestPSSPExtremes(t *testing.T) {
	compute := []int64{7, 10, 13, 40}
	for _, mode := range []PullMode{Lazy, SoftBarrier} {
		for _, tt := range []struct{ pssp, same Config }{
			{Config{Model: PSSP, Staleness: 2, PSSPC: 0, Pull: mode}, Config{Model: ASP, Pull: mode}},
			{Config{Model: PSSP, Staleness: 2, PSSPC: 1, Pull: mode}, Config{Model: SSP, Staleness: 2, Pull: mode}},
		} {
			a := simulate(t, tt.pssp, compute, 100, lcg(7))
			b := simulate(t, tt.same, compute, 100, lcg(7))
			if !slices.Equal(a.stats.Staleness, b.stats.Staleness) || a.stats.DPRs != b.stats.DPRs ||
				a.stats.DelayedIterations != b.stats.DelayedIterations || a.time != b.time {
				t.Errorf("%v: %+v at t=%d; want the same as %v: %+v at t=%d", tt.pssp, a.stats, a.time, tt.same, b.stats, b.time)
			}
		}
	}
}

func TestDSPSAdapts(t *testing.T) {
	c := Config{Model: DSPS, Staleness: 2}
	// Balanced workers: no DPR in a window, so the bound shrinks toward 1.
	e := New(c, []int{0, 1})
	var id PullID
	for i := int64(0); i < 3*DSPSWindow; i++ {
		for w := range 2 {
			e.Push(w, i)
			id++
			if !e.Pull(id, w, i, 0) {
				t.Fatalf("balanced: pull %d delayed", id)
			}
		}
	}
	if got := e.Bound(); got != 1 {
		t.Errorf("balanced workers: Bound() = %d; want 1", got)
	}
	// A persistent straggler keeps the fast worker waiting: the bound grows
	// to 2s and no further, in either pull mode.
	for _, mode := range []PullMode{Lazy, SoftBarrier} {
		c.Pull = mode
		r := simulate(t, c, []int64{10, 30}, 400, lcg(1))
		if got := r.engine.Bound(); got != 4 || r.stats.DPRs == 0 {
			t.Errorf("%v with a 3x straggler: Bound() = %d after %d DPRs; want 2s = 4", c, got, r.stats.DPRs)
		}
	}
}

func TestBoundAndMembers(t *testing.T) {
	for _, tt := range []struct {
		c    Config
		want int
	}{
		{Config{Model: BSP}, 0},
		{Config{Model: Drop, DropWaitFor: 1}, 0},
		{Config{Model: ASP}, -1},
		{Config{Model: SSP, Staleness: 3}, 3},
		{Config{Model: PSSP, Staleness: 2}, 2},
		{Config{Model: DSPS, Staleness: 5}, 5},
	} {
		if got := New(tt.c, nil).Bound(); got != tt.want {
			t.Errorf("%v: Bound() = %d; want %d", tt.c, got, tt.want)
		}
	}
	e := New(Config{Model: BSP}, []int{3, 1, 2, 1})
	if got := e.Members(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("Members() = %v; want [1 2 3]", got)
	}
}

func TestEmptyBarrierNeverAdvances(t *testing.T) {
	e := New(Config{Model: ASP}, nil)
	if r := e.Push(0, 0); r.Accept || e.VTrain() != 0 {
		t.Errorf("Push on an empty barrier = %+v, V_train %d; want rejected, 0", r, e.VTrain())
	}
	e.SetWorkers(nil)
	if e.VTrain() != 0 {
		t.Errorf("SetWorkers(nil) moved V_train to %d", e.VTrain())
	}
}

func TestDropShrinksBelowNt(t *testing.T) {
	// N_t = 3 but only 2 members are left: an iteration completes with 2.
	e := New(Config{Model: Drop, DropWaitFor: 3}, []int{0, 1, 2})
	e.Push(0, 0)
	e.Push(1, 0)
	if e.VTrain() != 0 {
		t.Fatalf("V_train = %d after 2 of N_t = 3 pushes", e.VTrain())
	}
	e.SetWorkers([]int{0, 1})
	if e.VTrain() != 1 {
		t.Errorf("V_train = %d after shrinking to 2 members; want 1", e.VTrain())
	}
}

func TestStatsIsACopy(t *testing.T) {
	e := New(Config{Model: ASP}, []int{0})
	e.Pull(1, 0, 0, 0)
	s := e.Stats()
	s.Staleness[1] = 99
	if e.Stats().Staleness[1] != 1 {
		t.Errorf("Stats() shares its histogram with the engine")
	}
	if len(s.Staleness) != HistogramBuckets {
		t.Errorf("len(Staleness) = %d; want %d", len(s.Staleness), HistogramBuckets)
	}
	e.Pull(2, 0, 100, 0)
	if got := e.Stats().Staleness[HistogramBuckets-1]; got != 1 {
		t.Errorf("gap 101 landed in the last bucket %d times; want 1", got)
	}
}

func TestNewPanicsOnInvalidConfig(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("New(invalid) did not panic")
		}
	}()
	New(Config{Model: "nope"}, nil)
}

func TestConfigString(t *testing.T) {
	for _, tt := range []struct {
		c    Config
		want string
	}{
		{Config{Model: BSP}, "bsp(lazy)"},
		{Config{Model: SSP, Staleness: 3, Pull: SoftBarrier}, "ssp(s=3, soft-barrier)"},
		{Config{Model: PSSP, Staleness: 3, PSSPC: 0.5}, "pssp(s=3, c=0.5, lazy)"},
		{Config{Model: PSSP, Staleness: 3, PSSPDynamic: true, PSSPAlpha: 1}, "pssp(s=3, alpha=1, lazy)"},
		{Config{Model: Drop, DropWaitFor: 3}, "drop(wait_for=3, lazy)"},
	} {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("%#v.String() = %q; want %q", tt.c, got, tt.want)
		}
	}
}

func TestNewAtCountsFromTheGivenVersion(t *testing.T) {
	e := NewAt(Config{Model: BSP, Pull: Lazy}, []int{0, 1}, 7)
	if got := e.VTrain(); got != 7 {
		t.Fatalf("VTrain = %d; want 7", got)
	}
	if e.Pull(1, 0, 6, 0) != true {
		t.Error("a pull for progress 6 should be served at V_train 7")
	}
	if r := e.Push(0, 7); !r.Accept || r.Advanced != 0 {
		t.Errorf("Push(0, 7) = %+v; want accepted, no advance", r)
	}
	if r := e.Push(1, 7); r.Advanced != 1 || e.VTrain() != 8 {
		t.Errorf("Push(1, 7) = %+v, V_train %d; want one advance to 8", r, e.VTrain())
	}
}

// TestJoinMidJob: a worker added while the job runs owes pushes only from
// the version it joins at; the versions before complete without it, and a
// join behind V_train counts from V_train.
func TestJoinMidJob(t *testing.T) {
	for _, tt := range []struct {
		name    string
		vtrain  int64 // where the barrier is when worker 2 joins
		from    int64
		pushes  [][2]int64 // (worker, progress) after the join
		want    int64      // V_train after them
		rejects int        // pushes rejected as stale
	}{
		{"versions before the join need only the old members", 0, 2,
			[][2]int64{{0, 0}, {1, 0}, {0, 1}, {1, 1}}, 2, 0},
		{"from the join on the new member is needed", 0, 2,
			[][2]int64{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}}, 2, 0},
		{"and its push completes the version", 0, 2,
			[][2]int64{{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}, {2, 2}}, 3, 0},
		{"a join behind V_train counts from V_train", 3, 1,
			[][2]int64{{2, 1}, {2, 2}, {0, 3}, {1, 3}}, 3, 2},
		{"its push at V_train is then needed", 3, 1,
			[][2]int64{{2, 1}, {0, 3}, {1, 3}, {2, 3}}, 4, 1},
	} {
		e := NewAt(Config{Model: BSP}, []int{0, 1}, tt.vtrain)
		e.Join(2, tt.from)
		rejects := 0
		for _, p := range tt.pushes {
			if r := e.Push(int(p[0]), p[1]); r.Reject == Stale {
				rejects++
			}
		}
		if e.VTrain() != tt.want || rejects != tt.rejects {
			t.Errorf("%s: V_train %d, %d stale; want %d, %d", tt.name, e.VTrain(), rejects, tt.want, tt.rejects)
		}
		if !slices.Equal(e.Members(), []int{0, 1, 2}) {
			t.Errorf("%s: Members() = %v; want [0 1 2]", tt.name, e.Members())
		}
	}
	// Joining twice changes nothing; leaving forgets the join version.
	e := New(Config{Model: BSP}, []int{0})
	e.Join(0, 5)
	if r := e.Push(0, 0); !r.Accept || e.VTrain() != 1 {
		t.Errorf("a member's re-join held its push: %+v, V_train %d", r, e.VTrain())
	}
}
