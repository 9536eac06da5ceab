package experiments

import (
	"math"
	"testing"

	"github.com/kelpie/kelpie/scheduler/manager"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// rowSpecs is every run a row's Judge reads.
func rowSpecs(e Experiment) []string {
	if e.Runner == nil {
		return e.Specs
	}
	var out []string
	for _, a := range epsArrivals {
		out = append(out, "eps/"+a.file, "fifo/"+a.file)
	}
	return out
}

// TestSpecsParse: every spec a row runs is embedded and valid.
func TestSpecsParse(t *testing.T) {
	files := map[string]bool{}
	for _, e := range All() {
		for _, f := range e.Specs {
			files[f] = true
		}
	}
	for _, a := range epsArrivals {
		files[a.file] = true
	}
	for f := range files {
		if _, err := Spec(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestEveryJudgeCanFail: no row passes on runs it did not get, or on runs
// that measured nothing (zero JCT, throughput, bytes, iterations, DPRs,
// no actions): each target is a figure to reach, not a run that finished.
func TestEveryJudgeCanFail(t *testing.T) {
	names := map[string]bool{}
	for _, e := range All() {
		if names[e.Name] {
			t.Errorf("two rows named %q", e.Name)
		}
		names[e.Name] = true
		if e.Target == "" || e.Paper == "" || e.Group == "" {
			t.Errorf("%s: target %q, paper %q, group %q: every row needs all three", e.Name, e.Target, e.Paper, e.Group)
		}
		if ours, ok := e.Judge(map[string]*manager.Result{}); ok {
			t.Errorf("%s: holds with no runs at all (%q)", e.Name, ours)
		}
		zero := map[string]*manager.Result{}
		for _, f := range rowSpecs(e) {
			zero[f] = &manager.Result{}
		}
		if ours, ok := e.Judge(zero); ok {
			t.Errorf("%s: holds on runs that measured nothing (%q)", e.Name, ours)
		}
	}
}

// judgeCase is a row's Judge on crafted results, and whether it must hold.
type judgeCase struct {
	name string
	r    map[string]*manager.Result
	want bool
}

func checkJudge(t *testing.T, e Experiment, cases []judgeCase) {
	t.Helper()
	for _, c := range cases {
		ours, ok := e.Judge(c.r)
		if ok != c.want {
			t.Errorf("%s: %s: Judge = %q, %v; want %v", e.Name, c.name, ours, ok, c.want)
		}
	}
}

func jcts(bsp, nd string, b, n float64) map[string]*manager.Result {
	return map[string]*manager.Result{bsp: {JCTSeconds: b}, nd: {JCTSeconds: n}}
}

// TestAntDTWorkerTargets: each intensity's target is half the cut of
// Table III's ratio (interpolated at 0.2 and 0.4; 0.8 keeps its stricter
// 0.6), and fails a hundredth above it.
func TestAntDTWorkerTargets(t *testing.T) {
	want := map[string]float64{"0.1": 0.93, "0.2": 0.91, "0.4": 0.85, "0.8": 0.6}
	for _, x := range antdtIntensities {
		e := antdtWorker(x, map[string]float64{"0.8": 0.6}[x])
		bsp, nd := e.Specs[0], e.Specs[1]
		limit := want[x]
		checkJudge(t, e, []judgeCase{
			{"at the target", jcts(bsp, nd, 10, 10*limit), true},
			{"a hundredth above it", jcts(bsp, nd, 10, 10*(limit+0.01)), false},
			{"no gain", jcts(bsp, nd, 10, 10), false},
			{"AntDT-ND measured no time", jcts(bsp, nd, 10, 0), false},
		})
	}
	if r, interp := antdtPaperRatio(0.2); interp != true || math.Abs(r-(3745.0/4312+3790.0/4832)/2) > 1e-9 {
		t.Errorf("antdtPaperRatio(0.2) = %v, %v; want the mean of 0.1's and 0.3's, interpolated", r, interp)
	}
}

func TestAntDTShape(t *testing.T) {
	r := func(lo, hi float64) map[string]*manager.Result {
		out := jcts("antdt-worker-0.1-bsp.yaml", "antdt-worker-0.1-antdt-nd.yaml", 10, 10*lo)
		for k, v := range jcts("antdt-worker-0.8-bsp.yaml", "antdt-worker-0.8-antdt-nd.yaml", 20, 20*hi) {
			out[k] = v
		}
		return out
	}
	checkJudge(t, AntDTShape, []judgeCase{
		{"the paper's shape", r(0.87, 0.49), true},
		{"flat", r(0.7, 0.65), false},
		{"the cut shrinks", r(0.5, 0.8), false},
	})
}

func withActions(jct float64, kinds ...string) *manager.Result {
	res := &manager.Result{JCTSeconds: jct}
	for _, k := range kinds {
		res.Actions = append(res.Actions, manager.ActionResult{Kind: k, State: "applied"})
	}
	return res
}

// TestAntDTCPURows: the host row needs the JCT; the follows row needs the
// JCT and an applied ADJUST_BS (a restart cannot be what helped).
func TestAntDTCPURows(t *testing.T) {
	bsp := &manager.Result{JCTSeconds: 10}
	checkJudge(t, AntDTHost, []judgeCase{
		{"restart cured it", map[string]*manager.Result{"antdt-cpu-bsp.yaml": bsp, "antdt-cpu-antdt-nd.yaml": withActions(6, kindAdjustBS, kindKillRestart)}, true},
		{"too little gain", map[string]*manager.Result{"antdt-cpu-bsp.yaml": bsp, "antdt-cpu-antdt-nd.yaml": withActions(8, kindKillRestart)}, false},
	})
	checkJudge(t, AntDTFollows, []judgeCase{
		{"batch sizes carried it", map[string]*manager.Result{"antdt-cpu-bsp.yaml": bsp, "antdt-cpu-follows-antdt-nd.yaml": withActions(7, kindAdjustBS, kindKillRestart)}, true},
		{"fast, but no ADJUST_BS applied", map[string]*manager.Result{"antdt-cpu-bsp.yaml": bsp, "antdt-cpu-follows-antdt-nd.yaml": withActions(7, kindKillRestart)}, false},
		{"ADJUST_BS that did too little", map[string]*manager.Result{"antdt-cpu-bsp.yaml": bsp, "antdt-cpu-follows-antdt-nd.yaml": withActions(8.5, kindAdjustBS)}, false},
	})
}

func TestPSLDTargets(t *testing.T) {
	tp := func(files []string, v ...float64) map[string]*manager.Result {
		out := map[string]*manager.Result{}
		for i, f := range files {
			out[f] = &manager.Result{Throughput: v[i]}
		}
		return out
	}
	checkJudge(t, PSLDBandwidth, []judgeCase{
		{"2×", tp(PSLDBandwidth.Specs, 1000, 2000), true},
		{"1.7×", tp(PSLDBandwidth.Specs, 1000, 1700), false},
	})
	// none, static, PSLD
	checkJudge(t, PSLDCompute, []judgeCase{
		{"the slowness bites, PSLD wins 1.3×", tp(PSLDCompute.Specs, 2000, 1000, 1300), true},
		{"PSLD wins 1.2×", tp(PSLDCompute.Specs, 2000, 1000, 1200), false},
		{"the slowness does not bite", tp(PSLDCompute.Specs, 1200, 1000, 1400), false},
		{"static trained nothing", tp(PSLDCompute.Specs, 2000, 0, 1400), false},
	})
	// static, strawman, PSLD
	checkJudge(t, PSLDSeveral, []judgeCase{
		{"beats both", tp(PSLDSeveral.Specs, 1000, 1800, 2000), true},
		{"well below the strawman", tp(PSLDSeveral.Specs, 1000, 2500, 2000), false},
		{"not enough over static", tp(PSLDSeveral.Specs, 1000, 1000, 1400), false},
	})
	share := func(x float64, blocks int) map[string]*manager.Result {
		out := tp(PSLDTransient.Specs, 1000, 1000*x)
		out["psld-transient-explore.yaml"].Servers = []manager.ServerResult{{Name: "server-0", Blocks: 100 - blocks}, {Name: "server-1", Blocks: blocks}}
		return out
	}
	checkJudge(t, PSLDTransient, []judgeCase{
		{"faster, load back", share(1.2, 40), true},
		{"faster, load not back", share(1.2, 10), false},
		{"load back, not faster", share(1.05, 40), false},
	})
}

// TestRATCrossRackJudge shows the RAT row can fail: it holds on the shape
// the plans predict and fails when RAT crosses too much, when ring is far
// above RAT, when accuracy drifts, and when nothing was counted.
func TestRATCrossRackJudge(t *testing.T) {
	res := func(ps, ring, rat int64, accRAT float64) map[string]*manager.Result {
		return map[string]*manager.Result{
			"rat-ps.yaml":   {BytesCrossRegion: ps, Accuracy: 0.95},
			"rat-ring.yaml": {BytesCrossRegion: ring, Accuracy: 0.95},
			"rat-rat.yaml":  {BytesCrossRegion: rat, Accuracy: accRAT},
		}
	}
	checkJudge(t, RATCrossRack, []judgeCase{
		{"the plans' shape", res(800, 350, 200, 0.951), true},
		{"rat crosses half of ps", res(800, 500, 400, 0.95), false},
		{"rat a byte over a quarter of ps", res(800, 350, 201, 0.95), false},
		{"ring below rat", res(800, 150, 200, 0.95), false},
		{"ring far above rat", res(800, 700, 200, 0.95), false},
		{"rat's accuracy drifts a point", res(800, 350, 200, 0.94), false},
		{"nothing counted", res(0, 0, 0, 0.95), false},
	})
}

// shaped crafts the shaped cluster's runs: iteration times in ms (100
// iterations each) and cross-rack bytes, without pauses and with.
func shaped(ms map[string][2]float64, bytes map[string]int64) map[string]*manager.Result {
	out := map[string]*manager.Result{}
	for _, m := range ratModes {
		out[shapedSpec(m, false)] = &manager.Result{Iterations: 100, TrainSeconds: ms[m][0] / 10, BytesCrossRegion: bytes[m]}
		out[shapedSpec(m, true)] = &manager.Result{Iterations: 100, TrainSeconds: ms[m][1] / 10, BytesCrossRegion: bytes[m]}
		out[calmSpec(m)] = out[shapedSpec(m, false)] // the pausing row's baseline, alike here
	}
	return out
}

func TestRATShapedJudge(t *testing.T) {
	b := map[string]int64{"ps": 800, "ring": 350, "rat": 200}
	checkJudge(t, RATShaped, []judgeCase{
		{"RAT fastest, PS slowest", shaped(map[string][2]float64{"ps": {80, 0}, "ring": {30, 0}, "rat": {25, 0}}, b), true},
		{"RAT not half of PS", shaped(map[string][2]float64{"ps": {40, 0}, "ring": {30, 0}, "rat": {25, 0}}, b), false},
		{"ring as fast as RAT", shaped(map[string][2]float64{"ps": {80, 0}, "ring": {25, 0}, "rat": {25, 0}}, b), true},
		{"ring 4 % faster than RAT", shaped(map[string][2]float64{"ps": {80, 0}, "ring": {24, 0}, "rat": {25, 0}}, b), false},
		{"RAT crosses a quarter of PS and 2 %", shaped(map[string][2]float64{"ps": {80, 0}, "ring": {30, 0}, "rat": {25, 0}},
			map[string]int64{"ps": 800, "ring": 350, "rat": 204}), true},
		{"RAT crosses too much", shaped(map[string][2]float64{"ps": {80, 0}, "ring": {30, 0}, "rat": {25, 0}},
			map[string]int64{"ps": 800, "ring": 350, "rat": 205}), false},
	})
}

func TestRATPausingJudge(t *testing.T) {
	b := map[string]int64{"ps": 800, "ring": 350, "rat": 200}
	checkJudge(t, RATPausing, []judgeCase{
		// slowdowns PS 1.5, ring 10, RAT 2
		{"Fig. 5's shape", shaped(map[string][2]float64{"ps": {80, 120}, "ring": {30, 300}, "rat": {25, 50}}, b), true},
		// ring 3 < 2 × RAT 2
		{"ring barely worse", shaped(map[string][2]float64{"ps": {80, 120}, "ring": {30, 90}, "rat": {25, 50}}, b), false},
		// RAT 4 > 1.5 × PS 1.5
		{"RAT far worse than PS", shaped(map[string][2]float64{"ps": {80, 120}, "ring": {30, 300}, "rat": {25, 100}}, b), false},
	})
}

func TestSyncLazyJudge(t *testing.T) {
	d := func(sb, lz, s4, ps int64) map[string]*manager.Result {
		return map[string]*manager.Result{"sync-soft-barrier.yaml": {DPRs: sb}, "sync-lazy.yaml": {DPRs: lz},
			"sync-ssp4-lazy.yaml": {DPRs: s4}, "sync-pssp.yaml": {DPRs: ps}}
	}
	checkJudge(t, SyncLazy, []judgeCase{
		{"lazy cuts DPRs, PSSP cuts SSP s'=4's", d(1000, 100, 80, 50), true},
		{"lazy cuts too few", d(1000, 400, 80, 50), false},
		{"the soft barrier delayed nothing", d(0, 0, 80, 50), false},
		{"PSSP no better than SSP s'=4", d(1000, 100, 80, 80), false},
		{"PSSP cuts a little", d(1000, 100, 80, 75), false},
		{"SSP s'=4 delayed nothing", d(1000, 100, 0, 0), false},
	})
}

func stalled(kinds []string, secs ...float64) *manager.Result {
	res := &manager.Result{}
	for i, k := range kinds {
		a := manager.ActionResult{Kind: k, State: "applied"}
		if !math.IsNaN(secs[i]) {
			a.StallSeconds = &secs[i]
		}
		res.Actions = append(res.Actions, a)
	}
	return res
}

// TestElasticStallJudges: the hot change's stall against the restart's,
// both from the workers' timelines, change by change.
func TestElasticStallJudges(t *testing.T) {
	one := []string{"DEL_SERVER"}
	pair := func(h, c *manager.Result) map[string]*manager.Result {
		return map[string]*manager.Result{"elastic-remove-hot.yaml": h, "elastic-remove-checkpoint-restart.yaml": c}
	}
	checkJudge(t, ElasticRemove, []judgeCase{
		{"hot a tenth of restart", pair(stalled(one, 0.2), stalled(one, 2)), true},
		{"hot half of restart", pair(stalled(one, 1), stalled(one, 2)), false},
		{"restart's stall not measured", pair(stalled(one, 0.2), stalled(one, math.NaN())), false},
		{"no change applied", pair(stalled(nil), stalled(nil)), false},
	})
	three := []string{"ADD_SERVER", "DEL_SERVER", "REASSIGN"}
	pair40 := func(h, c *manager.Result) map[string]*manager.Result {
		return map[string]*manager.Result{"elastic-40mb-hot.yaml": h, "elastic-40mb-checkpoint-restart.yaml": c}
	}
	checkJudge(t, Elastic40MB, []judgeCase{
		{"each hot change small", pair40(stalled(three, 0.1, 0.2, 0.1), stalled(three, 3, 3, 3)), true},
		{"one hot change over half a second", pair40(stalled(three, 0.1, 0.6, 0.1), stalled(three, 10, 10, 10)), false},
		{"one hot change over a tenth of its restart", pair40(stalled(three, 0.1, 0.4, 0.1), stalled(three, 3, 3, 3)), false},
		{"a change missing on one side", pair40(stalled(three[:2], 0.1, 0.1), stalled(three, 3, 3, 3)), false},
		{"different changes", pair40(stalled([]string{"ADD_SERVER", "REASSIGN", "DEL_SERVER"}, 0.1, 0.1, 0.1), stalled(three, 3, 3, 3)), false},
	})
}

func TestArrivalsJudge(t *testing.T) {
	r := func(eps, fifo float64) map[string]*manager.Result {
		out := map[string]*manager.Result{}
		for _, a := range epsArrivals {
			out["eps/"+a.file] = &manager.Result{JCTSeconds: eps, Actions: []manager.ActionResult{{Policy: policy.NameEPS, State: "applied"}}}
			out["fifo/"+a.file] = &manager.Result{JCTSeconds: fifo}
		}
		return out
	}
	e := epsExperiment()
	checkJudge(t, e, []judgeCase{
		{"EPS 0.8×", r(8, 10), true},
		{"EPS 0.95×: some gain, not the paper's", r(9.5, 10), false},
	})
}

// TestGroupsSelectRows: every group of the Makefile's experiments-GROUP
// targets picks at least one row.
func TestGroupsSelectRows(t *testing.T) {
	for _, g := range []string{"antdt", "psld", "rat", "sync", "elastic", "eps"} {
		n := 0
		for _, e := range All() {
			if e.Group == g {
				n++
			}
		}
		if n == 0 {
			t.Errorf("group %s has no rows", g)
		}
		for _, e := range All() {
			if Selected(e, g) != (e.Group == g) {
				t.Errorf("--only %s: row %q (group %s) selected %v", g, e.Name, e.Group, Selected(e, g))
			}
		}
	}
	// Not a group: a part of a name ("sleeps" holds "eps").
	if e := antdtWorker("0.1", 0); !Selected(e, "sleeps 40 ms") || Selected(e, "eps") {
		t.Errorf("--only by name: %q selected by %q: %v, by %q: %v", e.Name, "sleeps 40 ms", Selected(e, "sleeps 40 ms"), "eps", Selected(e, "eps"))
	}
}

// TestEveryRowHasAPremise: every row checks its premise, and no premise
// holds on runs it did not get.
func TestEveryRowHasAPremise(t *testing.T) {
	for _, e := range All() {
		if e.Premise == nil {
			t.Errorf("%s: no premise check", e.Name)
			continue
		}
		if text, ok := e.Premise(map[string]*manager.Result{}); ok {
			t.Errorf("%s: premise holds with no runs at all (%q)", e.Name, text)
		}
		if e.Values == nil {
			t.Errorf("%s: no figures for the spread", e.Name)
		} else if vs := e.Values([]map[string]*manager.Result{{}, {}}); len(vs) == 0 {
			t.Errorf("%s: Values gave nothing", e.Name)
		}
	}
}

func TestPremises(t *testing.T) {
	nodes := func(w2 float64) *manager.Result {
		return &manager.Result{Nodes: []manager.NodeResult{{Name: "worker-0", Role: "worker", BPTMeanS: 0.01},
			{Name: "worker-1", Role: "worker", BPTMeanS: 0.01}, {Name: "worker-2", Role: "worker", BPTMeanS: w2}}}
	}
	slow := SlowWorker("antdt-cpu-bsp.yaml", "worker-2")
	if _, ok := slow(map[string]*manager.Result{"antdt-cpu-bsp.yaml": nodes(0.05)}); !ok {
		t.Error("SlowWorker: a worker 5× its peers is not slow")
	}
	if _, ok := slow(map[string]*manager.Result{"antdt-cpu-bsp.yaml": nodes(0.01)}); ok {
		t.Error("SlowWorker: a worker as fast as its peers is slow")
	}
	link := LinkSaturated("psld-bandwidth-static.yaml", "server-1")
	st, _ := injected("psld-bandwidth-static.yaml", "server-1", "bandwidth")
	moved := func(frac float64) map[string]*manager.Result {
		return map[string]*manager.Result{"psld-bandwidth-static.yaml": {TrainSeconds: 10,
			Servers: []manager.ServerResult{{Name: "server-1", BytesIn: int64(frac * 10 * st.Rate)}}}}
	}
	if _, ok := link(moved(0.9)); !ok {
		t.Error("LinkSaturated: 90 % of the cap is not saturated")
	}
	if text, ok := link(moved(0.3)); ok {
		t.Errorf("LinkSaturated: 30 %% of the cap is saturated (%s)", text)
	}
	e := epsExperiment()
	long := func(j float64) map[string]*manager.Result {
		return map[string]*manager.Result{"fifo/eps-long.yaml": {JCTSeconds: j}}
	}
	if _, ok := e.Premise(long(12)); !ok {
		t.Error("EPS premise: a long job of 12 s does not outlast the arrivals")
	}
	if _, ok := e.Premise(long(8)); ok {
		t.Error("EPS premise: a long job of 8 s outlasts the last arrival at 9 s")
	}
}

// TestUplinkScarce: the RAT row's premise holds when the runs' cross-rack
// bytes at the uplink rate fill most of their iterations, and fails when
// the iterations are mostly something else.
func TestUplinkScarce(t *testing.T) {
	s, err := Spec(shapedSpec("ring", false))
	if err != nil {
		t.Fatal(err)
	}
	rate := s.Cluster.Links.Uplink
	// 100 iterations; per iteration the uplink needs bytes/2/rate each way.
	res := func(iterMS float64, bytesPerIter float64) *manager.Result {
		return &manager.Result{Iterations: 100, TrainSeconds: iterMS / 10, BytesCrossRegion: int64(100 * bytesPerIter)}
	}
	perIter := 2 * rate * 0.1 // 100 ms of uplink each way
	p := UplinkScarce(shapedSpec("ring", false), shapedSpec("rat", false))
	if text, ok := p(map[string]*manager.Result{shapedSpec("ring", false): res(120, perIter), shapedSpec("rat", false): res(80, perIter*0.6)}); !ok {
		t.Errorf("uplink-bound runs: premise fails (%s)", text)
	}
	if text, ok := p(map[string]*manager.Result{shapedSpec("ring", false): res(400, perIter), shapedSpec("rat", false): res(80, perIter*0.6)}); ok {
		t.Errorf("ring's iteration 4× its uplink time: premise holds (%s)", text)
	}
}

// TestRestartsElsewhere: the AntDT rows' premise holds only when AntDT-ND
// restarted the straggler and every restart moved it to another host.
func TestRestartsElsewhere(t *testing.T) {
	const file = "antdt-worker-0.4-antdt-nd.yaml"
	restart := func(node, to, from string) manager.ActionResult {
		return manager.ActionResult{Kind: kindKillRestart, Node: node, State: "applied", Host: to, FromHost: from}
	}
	run := func(actions ...manager.ActionResult) map[string]*manager.Result {
		return map[string]*manager.Result{file: {Actions: actions}}
	}
	p := RestartsElsewhere(file, "worker-2")
	for _, c := range []struct {
		name string
		r    map[string]*manager.Result
		want bool
	}{
		{"moved to the spare host", run(restart("worker-2", "spare-0", "worker-2")), true},
		{"moved twice", run(restart("worker-2", "spare-0", "worker-2"), restart("worker-2", "worker-2", "spare-0")), true},
		{"restarted in place", run(restart("worker-2", "", "")), false},
		{"moved once, then in place", run(restart("worker-2", "spare-0", "worker-2"), restart("worker-2", "", "")), false},
		{"a server relaunched on its own host", run(restart("worker-2", "worker-2", "worker-2")), false},
		{"only another node moved", run(restart("worker-1", "spare-0", "worker-1")), false},
		{"a failed restart", run(manager.ActionResult{Kind: kindKillRestart, Node: "worker-2", State: "failed", Host: "spare-0", FromHost: "worker-2"}), false},
		{"no run", map[string]*manager.Result{}, false},
	} {
		if text, ok := p(c.r); ok != c.want {
			t.Errorf("%s: RestartsElsewhere = %v (%s); want %v", c.name, ok, text, c.want)
		}
	}
}

// TestRecoverySensed: the transient row's premise reads the long window
// from the spec (4 s in psld-transient-explore.yaml, server-1 slow until
// 8 s): a run that trained 11.9 s could not sense the recovery, one of
// 12.1 s could.
func TestRecoverySensed(t *testing.T) {
	premise := RecoverySensed("psld-transient-explore.yaml", "server-1")
	for _, c := range []struct {
		train float64
		want  bool
	}{{11.9, false}, {12.1, true}, {30, true}} {
		text, ok := premise(map[string]*manager.Result{"psld-transient-explore.yaml": {TrainSeconds: c.train, Throughput: 1}})
		if ok != c.want {
			t.Errorf("trained %.1f s: premise %t, want %t (%s)", c.train, ok, c.want, text)
		}
	}
	if _, ok := RecoverySensed("psld-transient-explore.yaml", "server-0")(map[string]*manager.Result{"psld-transient-explore.yaml": {TrainSeconds: 30, Throughput: 1}}); ok {
		t.Error("server-0 is never slowed: no recovery to sense, the premise cannot hold")
	}
}
