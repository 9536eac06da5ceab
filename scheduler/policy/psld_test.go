package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/monitor"
)

// srv is a server profile for psldSnapshot.
type srv struct {
	name        string
	alpha, beta float64
	sem         float64 // Pred_SEM at the prediction size
}

// psldSnapshot builds the server side of a snapshot the way the Monitor
// does (predictions at size s, 90 % bounds, speeds, Alg. 1's superior set,
// speed variance), directly from the given profiles.
func psldSnapshot(size float64, servers ...srv) monitor.Snapshot {
	snap := monitor.Snapshot{PredBytes: size, Config: monitor.DefaultConfig()}
	var preds []monitor.Pred
	var speeds []float64
	for _, v := range servers {
		p := monitor.Pred{Mean: v.alpha*size + v.beta, SEM: v.sem}
		snap.Servers = append(snap.Servers, monitor.ServerStat{
			Node: v.name, Model: monitor.Linear, Alpha: v.alpha, Beta: v.beta, Samples: 30,
			PredMean: p.Mean, PredSEM: p.SEM, Lower: p.Lower(), Upper: p.Upper(), Speed: size / p.Mean,
			Class: monitor.Healthy,
		})
		preds = append(preds, p)
		speeds = append(speeds, size/p.Mean)
	}
	snap.Profiled = len(servers)
	snap.SpeedVariance = monitor.SpeedVariance(speeds)
	for _, k := range monitor.SuperiorSet(preds) {
		snap.Servers[k].Superior = true
		snap.Superior = append(snap.Superior, servers[k].name)
	}
	return snap
}

// The worked example: servers a and b transfer at 100 MB/s (α = 1e-8 s/B)
// and c at 10 MB/s, all with β = 1 ms; four blocks of 4 MB.
var (
	fastA = srv{"server-a", 1e-8, 1e-3, 0.002}
	fastB = srv{"server-b", 1e-8, 1e-3, 0.002}
	slowC = srv{"server-c", 1e-7, 1e-3, 0.01}
)

// TestAssignPSLDWorkedExample follows Alg. 2 by hand with θ1/θ0 = 1, ε = 0,
// superior set {a, b} (c is never a candidate):
//
//	block 1: loads 0, 0; ω = (β_a + β_b)/2 = 0.001; S_assign = 4e6.
//	         cost_a = 0.041/0.001 + 4e6/4e6 = 42 = cost_b → tie, the later
//	         server wins (≤ in line 9): b.
//	block 2: loads 0, 4e6; ω = (0.001 + 0.041)/2 = 0.021; S_assign = 8e6.
//	         cost_a = 0.041/0.021 + 0.5 = 2.45, cost_b = 0.081/0.021 + 1 = 4.86: a.
//	block 3: loads 4e6, 4e6; ω = 0.041; S_assign = 12e6. cost_a = cost_b
//	         = 0.081/0.041 + 8/12 = 2.64: tie, b.
//	block 4: loads 4e6, 8e6; ω = 0.061; S_assign = 16e6.
//	         cost_a = 0.081/0.061 + 0.5 = 1.83, cost_b = 0.121/0.061 + 0.75 = 2.73: a.
//
// Result [b, a, b, a]: 8 MB on each fast server, predicted 0.081 s each.
func TestAssignPSLDWorkedExample(t *testing.T) {
	blocks := []int64{4e6, 4e6, 4e6, 4e6}
	profiles := []Profile{{fastA.alpha, fastA.beta}, {fastB.alpha, fastB.beta}, {slowC.alpha, slowC.beta}}
	got := AssignPSLD(blocks, profiles, []int{0, 1}, 1, 0, nil)
	if want := []int{1, 0, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("AssignPSLD(4 × 4 MB, superior {a, b}) = %v; want %v", got, want)
	}
	// A pure communication cost (θ1 = 0) still spreads the blocks, since
	// Pred_mean grows with the bytes on a server.
	if got := AssignPSLD(blocks, profiles, []int{0, 1}, 0, 0, nil); !slices.Equal(got, []int{1, 0, 1, 0}) {
		t.Errorf("AssignPSLD(θ1/θ0 = 0) = %v; want [1 0 1 0]", got)
	}
	// Without a superior set every server is a candidate; c costs ten
	// times as much per byte and gets nothing.
	if got := AssignPSLD(blocks, profiles, nil, 1, 0, nil); slices.Contains(got, 2) {
		t.Errorf("AssignPSLD(no superior set) = %v; want nothing on the slow server 2", got)
	}
	if got := AssignPSLD(blocks, nil, nil, 1, 0, nil); !slices.Equal(got, []int{-1, -1, -1, -1}) {
		t.Errorf("AssignPSLD(no servers) = %v; want all −1", got)
	}
}

func TestAssignPSLDEpsilon(t *testing.T) {
	blocks := make([]int64, 300)
	for i := range blocks {
		blocks[i] = 4e6
	}
	profiles := []Profile{{fastA.alpha, fastA.beta}, {fastB.alpha, fastB.beta}, {slowC.alpha, slowC.beta}}
	sup := []int{0, 1}

	// ε = 0: no randomness at all; the rng is not even read.
	a := AssignPSLD(blocks, profiles, sup, 1, 0, nil)
	b := AssignPSLD(blocks, profiles, sup, 1, 0, rand.New(rand.NewPCG(1, 1)))
	c := AssignPSLD(blocks, profiles, sup, 1, 0, rand.New(rand.NewPCG(7, 7)))
	if !slices.Equal(a, b) || !slices.Equal(a, c) || slices.Contains(a, 2) {
		t.Errorf("AssignPSLD(ε = 0) differs between seeds or uses the slow server: %v / %v / %v", a[:8], b[:8], c[:8])
	}

	// ε = 1: every block explores, uniformly over all three servers.
	count := func(assign []int) [3]int {
		var n [3]int
		for _, r := range assign {
			n[r]++
		}
		return n
	}
	e1 := AssignPSLD(blocks, profiles, sup, 1, 1, rand.New(rand.NewPCG(1, 1)))
	e2 := AssignPSLD(blocks, profiles, sup, 1, 1, rand.New(rand.NewPCG(2, 2)))
	if n := count(e1); n[2] < 60 || slices.Equal(e1, e2) {
		t.Errorf("AssignPSLD(ε = 1): counts %v (want ~100 on the slow server), same for two seeds: %v", n, slices.Equal(e1, e2))
	}

	// ε = 0.1: about 10 % explore, a third of those to the slow server.
	e := AssignPSLD(blocks, profiles, sup, 1, 0.1, rand.New(rand.NewPCG(3, 3)))
	if n := count(e); n[2] == 0 || n[2] > 30 {
		t.Errorf("AssignPSLD(ε = 0.1): counts %v; want a few (≈10) on the slow server", n)
	}
}

func TestProportional(t *testing.T) {
	tests := []struct {
		blocks []int64
		speeds []float64
		want   []int
	}{
		// Speeds 2:1. Block by block, least (load + 1)/speed, ties low:
		// 0.5|1 → 0; 1|1 → 0; 1.5|1 → 1; 1.5|2 → 0; 2|2 → 0; 2.5|2 → 1.
		{[]int64{1, 1, 1, 1, 1, 1}, []float64{2, 1}, []int{0, 0, 1, 0, 0, 1}},
		{[]int64{1, 1, 1}, []float64{0, 1, 0}, []int{1, 1, 1}},
		{[]int64{1, 1}, []float64{0, 0}, []int{0, 1}},
	}
	for _, tt := range tests {
		if got := Proportional(tt.blocks, tt.speeds); !slices.Equal(got, tt.want) {
			t.Errorf("Proportional(%v, %v) = %v; want %v", tt.blocks, tt.speeds, got, tt.want)
		}
	}
}

func psldJob(servers []string, blocksOn ...string) Job {
	j := Job{Name: "ps", Servers: servers}
	for i, s := range blocksOn {
		j.Blocks = append(j.Blocks, BlockInfo{ID: i, Bytes: 4e6, Server: s})
	}
	return j
}

// TestPSLDWorkedExample runs the whole policy on the worked example:
// Alg. 1 keeps {a, b} (c's lower bound 0.401 − 1.645·0.01 = 0.385 is above
// the threshold 0.041 + 1.645·0.002 = 0.0443), the speed variance is
// 0.401/0.041 − 1 = 8.78 > 1, and from round-robin (a, b, c, a: c predicted
// 0.401 s for its 4 MB) Alg. 2–3 move to [b, a, b, a] (0.081 s each):
// three blocks move, because of the tie-break of line 9.
// c is left without blocks, so the reassignment is proposed as c's
// REMOVE_SERVER carrying it: the blocks move and c leaves in one change.
// |superior| = 2 ≥ 0.5 × 3: no scale-out.
func TestPSLDWorkedExample(t *testing.T) {
	snap := psldSnapshot(4e6, fastA, fastB, slowC)
	servers := []string{"server-a", "server-b", "server-c"}
	job := psldJob(servers, "server-a", "server-b", "server-c", "server-a")
	p := DefaultPSLD()
	p.Epsilon = 0
	acts := p.Propose(snap, job, nil)
	if got, want := plan(acts), []string{"REMOVE_SERVER server-c"}; !slices.Equal(got, want) {
		t.Fatalf("Propose = %q; want %q", got, want)
	}
	r := acts[0]
	if !slices.Equal(r.Assignment, []int{1, 0, 1, 0}) {
		t.Errorf("assignment %v; want [1 0 1 0]", r.Assignment)
	}
	if r.Key != "psld/REMOVE_SERVER/server-c" || !near(r.Evidence["leaving_pred_s"], 0.401) ||
		!strings.Contains(r.Reason, "server-c holds none of them afterwards and leaves the job in the same change") {
		t.Errorf("key %q, evidence %v, reason %q; want c's REMOVE_SERVER, c predicted 0.401 s", r.Key, r.Evidence, r.Reason)
	}
	ev := r.Evidence
	if !near(ev["pred_max_before_s"], 0.401) || !near(ev["pred_max_after_s"], 0.081) || ev["moved_blocks"] != 3 || ev["superior"] != 2 {
		t.Errorf("evidence %v; want before 0.401, after 0.081, 3 moved, superior 2", ev)
	}
	if !near(r.PredictedBPT.Seconds(), 0.081) {
		t.Errorf("predicted %v; want 81ms", r.PredictedBPT)
	}
	for _, want := range []string{"PS speed variance 8.78 > 1", "superior set {server-a, server-b}: 2 of 3", "moves 3 of 4 blocks", "slowest server: server-c 401ms → server-a 81ms"} {
		if !strings.Contains(r.Reason, want) {
			t.Errorf("reason %q; want it to contain %q", r.Reason, want)
		}
	}

	// With the paper's ε = 0.1 an exploring draw may put a block on c; the
	// plan then predicts no gain and is dropped. Every plan made (c's
	// REMOVE_SERVER, or a REASSIGN when exploring left c a block) must cut
	// the slowest server's time by 5 %, and most seeds make one.
	made := 0
	for seed := range uint64(20) {
		acts := DefaultPSLD().Propose(snap, job, rand.New(rand.NewPCG(seed, seed)))
		if len(acts) == 0 {
			continue
		}
		made++
		if ev := acts[0].Evidence; len(acts[0].Assignment) != 4 || ev["pred_max_after_s"] > 0.95*ev["pred_max_before_s"] {
			t.Errorf("Propose(ε = 0.1, seed %d) = %q with evidence %v; want a new assignment with a 5 %% gain", seed, plan(acts), ev)
		}
	}
	if made < 10 {
		t.Errorf("Propose(ε = 0.1) made a plan for %d of 20 seeds; want most", made)
	}

	// Had c been emptied by a REASSIGN of its own (an operator's, or one
	// that left it a block an exploring draw then took away): a and b are
	// balanced, so there is no issue and no REASSIGN; c, empty and not
	// compared any more, leaves the job.
	job = psldJob(servers, "server-b", "server-a", "server-b", "server-a")
	acts = p.Propose(snap, job, nil)
	if got, want := plan(acts), []string{"REMOVE_SERVER server-c"}; !slices.Equal(got, want) {
		t.Fatalf("Propose after the REASSIGN = %q; want %q", got, want)
	}
	if !strings.Contains(acts[0].Reason, "holds no block since a REASSIGN") || acts[0].Key != "psld/REMOVE_SERVER/server-c" {
		t.Errorf("REMOVE_SERVER reason %q key %q", acts[0].Reason, acts[0].Key)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestPSLDVarianceThreshold(t *testing.T) {
	// Speeds 2 and 1 bytes/s at s = 1: variance exactly 1, not above it.
	a := srv{"server-a", 0.25, 0.25, 0.01}
	b := srv{"server-b", 0.5, 0.5, 0.01}
	snap := psldSnapshot(1, a, b)
	if snap.SpeedVariance != 1 {
		t.Fatalf("speed variance %v; want 1", snap.SpeedVariance)
	}
	job := psldJob([]string{"server-a", "server-b"}, "server-a", "server-b", "server-b")
	p := PSLD{VarianceThreshold: 1, ScaleThreshold: 0.5}
	if acts := p.Propose(snap, job, nil); len(acts) != 0 {
		t.Errorf("Propose(variance 1, threshold 1) = %q; want none (the check is strict)", plan(acts))
	}
	p.VarianceThreshold = 0.99
	if acts := p.Propose(snap, job, nil); len(acts) == 0 {
		t.Errorf("Propose(variance 1, threshold 0.99) = none; want a plan")
	}
}

// TestPSLDScaleOut checks Alg. 1 lines 11–12 on both sides of the strict <:
// with 4 profiled servers and ScaleThreshold 1/2 a superior set of 2 is not
// below 2, one of 1 is; with 3/4, 2 < 3 is.
func TestPSLDScaleOut(t *testing.T) {
	fast := func(name string) srv { return srv{name, 1e-8, 1e-3, 0.002} }
	slow := func(name string) srv { return srv{name, 1e-7, 1e-3, 0.002} }
	two := psldSnapshot(4e6, fast("s0"), fast("s1"), slow("s2"), slow("s3"))
	one := psldSnapshot(4e6, fast("s0"), slow("s1"), slow("s2"), slow("s3"))
	if len(two.Superior) != 2 || len(one.Superior) != 1 {
		t.Fatalf("superior sets %v and %v; want 2 and 1 servers", two.Superior, one.Superior)
	}
	job := psldJob([]string{"s0", "s1", "s2", "s3"})
	tests := []struct {
		snap      monitor.Snapshot
		threshold float64
		want      bool
	}{
		{two, 0.5, false}, // 2 < 0.5·4 = 2 is false
		{one, 0.5, true},  // 1 < 2
		{two, 0.75, true}, // 2 < 3
		{one, 0.25, false},
		{two, 0, false},
	}
	for _, tt := range tests {
		p := PSLD{VarianceThreshold: 1, ScaleThreshold: tt.threshold}
		acts := p.Propose(tt.snap, job, nil)
		got := slices.ContainsFunc(acts, func(a Action) bool { return a.Kind == KindAddServer })
		if got != tt.want {
			t.Errorf("Propose(|superior| %d of 4, ScaleThreshold %v): ADD_SERVER %v; want %v (plan %q)",
				len(tt.snap.Superior), tt.threshold, got, tt.want, plan(acts))
		}
	}
}

func BenchmarkAssignPSLD(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const nBlocks, nServers = 10000, 1000
	blocks := make([]int64, nBlocks)
	for i := range blocks {
		blocks[i] = 4 << 20
	}
	profiles := make([]Profile, nServers)
	sup := make([]int, nServers) // the worst case: every server superior
	for i := range profiles {
		profiles[i] = Profile{Alpha: (1 + r.Float64()) * 1e-8, Beta: 1e-3 * r.Float64()}
		sup[i] = i
	}
	b.ReportAllocs()
	for b.Loop() {
		AssignPSLD(blocks, profiles, sup, 1, 0.1, r)
	}
}

func ExampleAssignPSLD() {
	blocks := []int64{4e6, 4e6, 4e6, 4e6}
	profiles := []Profile{
		{Alpha: 1e-8, Beta: 1e-3}, // 100 MB/s
		{Alpha: 1e-8, Beta: 1e-3}, // 100 MB/s
		{Alpha: 1e-7, Beta: 1e-3}, // 10 MB/s: not in the superior set
	}
	fmt.Println(AssignPSLD(blocks, profiles, []int{0, 1}, 1, 0, nil))
	// Output: [1 0 1 0]
}

// place returns Job.Servers indices of the servers the blocks are on.
func place(j Job) []int {
	out := make([]int, len(j.Blocks))
	for k, b := range j.Blocks {
		out[k] = slices.Index(j.Servers, b.Server)
	}
	return out
}

// reassignOf is the proposal that carries a new assignment: a REASSIGN, or
// the REMOVE_SERVER of a server it empties (emptying).
func reassignOf(acts []Action) (Action, bool) {
	for _, a := range acts {
		if a.Kind == KindReassign || a.Kind == KindRemoveServer && strings.Contains(a.Reason, "in the same change") {
			return a, true
		}
	}
	return Action{}, false
}

// TestPSLDEmptyServers checks how servers without blocks are treated. A
// server that holds nothing still answers an empty exchange every
// iteration; fitted to those, its profile is its latency at any size
// (α = 0), which Alg. 1 would rank first and alone. It is not compared:
// either it is new (only empty exchanges in the window) and Alg. 2 takes
// it with the superior set's mean profile, or it was emptied by a
// REASSIGN (its window still shows bytes) and it leaves the job, with the
// blocks staying where they are.
func TestPSLDEmptyServers(t *testing.T) {
	a, b := srv{"server-a", 1e-8, 1e-3, 0.002}, srv{"server-b", 1e-8, 1e-3, 0.002}
	servers := []string{"server-a", "server-b", "server-c"}
	six := []string{"server-a", "server-b", "server-a", "server-b", "server-a", "server-b"}
	tests := []struct {
		name string
		c    srv
		kind monitor.FitKind
		want []string
	}{
		{"new server", srv{"server-c", 0, 1e-3, 1e-4}, monitor.Proportional, []string{"REASSIGN"}},
		{"emptied server", srv{"server-c", 1e-7, 1e-3, 0.01}, monitor.Linear, []string{"REMOVE_SERVER server-c"}},
	}
	for _, tt := range tests {
		snap := psldSnapshot(4e6, a, b, tt.c)
		snap.Servers[2].Model = tt.kind
		if tt.kind == monitor.Proportional && (len(snap.Superior) != 1 || snap.Superior[0] != "server-c") {
			t.Fatalf("%s: the Monitor's superior set %v; want {server-c} alone (the case this guards against)", tt.name, snap.Superior)
		}
		job := psldJob(servers, six...)
		p := DefaultPSLD()
		p.Epsilon = 0
		acts := p.Propose(snap, job, nil)
		if got := plan(acts); !slices.Equal(got, tt.want) {
			t.Fatalf("%s: Propose = %q; want %q", tt.name, got, tt.want)
		}
		switch tt.want[0] {
		case "REASSIGN":
			// All three alike now: two blocks each, 0.121 s → 0.081 s.
			n := [3]int{}
			for _, r := range acts[0].Assignment {
				n[r]++
			}
			ev := acts[0].Evidence
			if n != [3]int{2, 2, 2} || !near(ev["pred_max_before_s"], 0.121) || !near(ev["pred_max_after_s"], 0.081) ||
				ev["superior"] != 3 || ev["superior_alg1"] != 2 || ev["profiled"] != 2 {
				t.Errorf("%s: REASSIGN %v (counts %v), evidence %v; want 2 blocks each, 0.121 → 0.081 s, superior 3 (2 by Alg. 1)",
					tt.name, acts[0].Assignment, n, ev)
			}
			for _, want := range []string{"server-c holds no block and never carried load: new", "(2 by Alg. 1, 1 new)"} {
				if !strings.Contains(acts[0].Reason, want) {
					t.Errorf("%s: reason %q; want it to contain %q", tt.name, acts[0].Reason, want)
				}
			}
		default:
			if got, want := acts[0].Assignment, place(job); !slices.Equal(got, want) {
				t.Errorf("%s: REMOVE_SERVER assignment %v; want the current placement %v", tt.name, got, want)
			}
		}
	}
}

// TestPSLDResponseTime: two servers of the same speed, one holding three
// blocks and one holding one. The speeds do not differ, the response times
// do (0.121 s against 0.041 s, a variance of 1.95): the distribution is the
// straggler issue, and the REASSIGN evens it out.
func TestPSLDResponseTime(t *testing.T) {
	a, b := srv{"server-a", 1e-8, 1e-3, 0.002}, srv{"server-b", 1e-8, 1e-3, 0.002}
	servers := []string{"server-a", "server-b"}
	tests := []struct {
		threshold float64
		commA     time.Duration
		want      []string
	}{
		{1, 121 * time.Millisecond, []string{"REASSIGN"}},
		{2, 121 * time.Millisecond, nil}, // 1.95 does not exceed 2
		{1, 82 * time.Millisecond, nil},  // 1 does not exceed 1
	}
	for _, tt := range tests {
		snap := psldSnapshot(4e6, a, b)
		snap.Servers[0].CommPer, snap.Servers[1].CommPer = tt.commA, 41*time.Millisecond
		job := psldJob(servers, "server-a", "server-a", "server-a", "server-b")
		acts := PSLD{VarianceThreshold: tt.threshold, ScaleThreshold: 0.5, Theta1OverTheta0: 1}.Propose(snap, job, nil)
		if got := plan(acts); !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("Propose(comm %v vs 41ms, threshold %v) = %q; want %q", tt.commA, tt.threshold, got, tt.want)
			continue
		}
		if len(acts) == 0 {
			continue
		}
		r := acts[0]
		n := [2]int{}
		for _, s := range r.Assignment {
			n[s]++
		}
		if n != [2]int{2, 2} || r.Evidence["speed_variance"] != 0 || !strings.Contains(r.Reason, "PS response-time variance 1.95 > 1") {
			t.Errorf("REASSIGN %v (counts %v), speed variance %v, reason %q; want 2 and 2, variance 0, the response-time check",
				r.Assignment, n, r.Evidence["speed_variance"], r.Reason)
		}
	}
}

// TestPSLDSuperiorWidened: with narrow bounds Alg. 1 keeps only a, though
// b is 1.5 times slower and no straggler (the median speed, b's, is within
// the threshold of the best); b joins, c (ten times slower) does not, and
// leaves with the change that empties it.
func TestPSLDSuperiorWidened(t *testing.T) {
	a := srv{"server-a", 1e-8, 1e-3, 1e-4}
	b := srv{"server-b", 1.5e-8, 1e-3, 1e-4}
	c := srv{"server-c", 1e-7, 1e-3, 1e-4}
	snap := psldSnapshot(4e6, a, b, c)
	if len(snap.Superior) != 1 {
		t.Fatalf("Alg. 1 kept %v; want server-a alone", snap.Superior)
	}
	servers := []string{"server-a", "server-b", "server-c"}
	job := psldJob(servers, "server-a", "server-b", "server-c", "server-a", "server-b", "server-c")
	p := DefaultPSLD()
	p.Epsilon = 0
	r, ok := reassignOf(p.Propose(snap, job, nil))
	if !ok {
		t.Fatal("Propose made no REASSIGN")
	}
	n := [3]int{}
	for _, s := range r.Assignment {
		n[s]++
	}
	if ev := r.Evidence; ev["superior"] != 2 || ev["superior_alg1"] != 1 || n[0] == 0 || n[1] == 0 || n[2] != 0 || n[0] < n[1] {
		t.Errorf("REASSIGN %v (counts %v), evidence %v; want superior {a, b} (1 by Alg. 1), blocks on both, more on a, none on c",
			r.Assignment, n, r.Evidence)
	}
	if r.Kind != KindRemoveServer || r.Target != "server-c" {
		t.Errorf("%s %s; want c's REMOVE_SERVER carrying the assignment", r.Kind, r.Target)
	}
	if !strings.Contains(r.Reason, "superior set {server-a, server-b}: 2 of 3 profiled servers (1 by Alg. 1, 1 within the threshold of the typical speed)") {
		t.Errorf("reason %q", r.Reason)
	}
}

func TestReferenceSpeed(t *testing.T) {
	tests := []struct {
		speeds []float64
		want   float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{2, 1}, 1.5},
		{[]float64{10, 10, 1, 1}, 5.5}, // 10 − 5.5 ≤ 5.5: the median
		{[]float64{10, 1, 1}, 10},      // 10 − 1 > 1: most are slow, the best
		{[]float64{4, 2, 2}, 2},        // 4 − 2 = 2 ≤ 1·2: on the boundary, the median
	}
	for _, tt := range tests {
		if got := referenceSpeed(tt.speeds, 1); got != tt.want {
			t.Errorf("referenceSpeed(%v, 1) = %v; want %v", tt.speeds, got, tt.want)
		}
	}
}

// TestPSLDStrawman runs the worked example with the strawman: speeds
// 97.6, 97.6 and 9.98 MB/s at 4 MB; block by block, least (load + 4 MB) /
// speed, ties to the lower index: a, b, a, b (c's 0.401 s never wins).
// The strawman neither removes the server it leaves empty nor adds one,
// and gives nothing to a server it has not compared.
func TestPSLDStrawman(t *testing.T) {
	servers := []string{"server-a", "server-b", "server-c"}
	p := PSLD{Strawman: true, VarianceThreshold: 1, ScaleThreshold: 1, Epsilon: 0.1}
	snap := psldSnapshot(4e6, fastA, fastB, slowC)
	job := psldJob(servers, "server-a", "server-b", "server-c", "server-a")
	acts := p.Propose(snap, job, rand.New(rand.NewPCG(1, 1)))
	if got := plan(acts); !slices.Equal(got, []string{"REASSIGN"}) {
		t.Fatalf("Propose(strawman) = %q; want one REASSIGN", got)
	}
	r := acts[0]
	if !slices.Equal(r.Assignment, []int{0, 1, 0, 1}) || r.Evidence["strawman"] != 1 || !strings.Contains(r.Reason, "strawman: blocks in proportion") {
		t.Errorf("REASSIGN %v, evidence %v, reason %q; want [0 1 0 1] by the strawman", r.Assignment, r.Evidence, r.Reason)
	}
	if want := Proportional([]int64{4e6, 4e6, 4e6, 4e6}, []float64{4e6 / 0.041, 4e6 / 0.041, 4e6 / 0.401}); !slices.Equal(r.Assignment, want) {
		t.Errorf("REASSIGN %v; want Proportional's %v", r.Assignment, want)
	}
	// Applied: c is empty, a and b balanced: nothing (no scale-in).
	job = psldJob(servers, "server-a", "server-b", "server-a", "server-b")
	if acts := p.Propose(snap, job, nil); len(acts) != 0 {
		t.Errorf("Propose(strawman) after the REASSIGN = %q; want none", plan(acts))
	}
	// A new server (empty exchanges only) is not compared, so the
	// strawman gives it nothing; a and b are balanced, so no issue.
	snap = psldSnapshot(4e6, fastA, fastB, srv{"server-c", 0, 1e-3, 1e-4})
	snap.Servers[2].Model = monitor.Proportional
	if acts := p.Propose(snap, job, nil); len(acts) != 0 {
		t.Errorf("Propose(strawman, new server) = %q; want none", plan(acts))
	}
}
