package manager

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/timeline"
)

// TestThroughputIsSamplesPerWallSecond: a job whose workers each train ten
// iterations of 16 samples a second, each iteration taking them 2 ms of
// their own time (the rest waiting for the others), trains 640 samples a
// second; the Monitor's Σ B_i/T_i would say 32,000. Every figure — the
// views, the frames of its timeline, the policies' baseline — says 640.
func TestThroughputIsSamplesPerWallSecond(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	fast := map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.002, "worker-3": 0.002}
	for range 15 {
		report(fast)
	}
	const want = 4 * 10 * 16.0
	near := func(x float64) bool { return math.Abs(x-want) < want*1e-9 }
	var sum float64
	for _, w := range j.snap.Workers {
		sum += w.Throughput
	}
	if sum < 10*want {
		t.Fatalf("the Monitor's Σ B_i/T_i is %v: the test no longer tells the two figures apart", sum)
	}
	for _, detail := range []bool{false, true} {
		names := []string(nil)
		if detail {
			names = []string{"hist"}
		}
		v := m.View(names, 10)
		if len(v) != 1 || !near(v[0].Throughput) {
			t.Errorf("view (detail %v) throughput %v; want %v samples/s", detail, v[0].GetThroughput(), want)
		}
	}
	pauseActor(j)
	frames := timeline.Protos(j.hist.rec.Frames())
	pj := j.policyJob()
	resumeActor(j)
	if !near(pj.Throughput) {
		t.Errorf("policies' throughput %v; want %v", pj.Throughput, want)
	}
	if len(frames) < 5 {
		t.Fatalf("%d frames", len(frames))
	}
	for _, f := range frames[2:] {
		if !near(f.GetThroughput()) || !near(f.GetSamplesPerS()) {
			t.Errorf("frame at %v: throughput %v, samples/s %v; want %v", f.GetTime().AsTime(), f.GetThroughput(), f.GetSamplesPerS(), want)
		}
	}
	// Training stops: the figure falls to 0 within the window.
	for range 11 {
		report(nil)
	}
	if v := m.View(nil, 10); v[0].Throughput != 0 {
		t.Errorf("throughput %v 11 s after training stopped; want 0", v[0].Throughput)
	}
}

// TestThroughputMeter: the window keeps one count before its start, takes
// a count that went back as a new base, and is 0 before two counts.
func TestThroughputMeter(t *testing.T) {
	var w throughputMeter
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if w.rate() != 0 {
		t.Fatal("rate before any count")
	}
	w.observe(t0, 1000)
	if w.rate() != 0 {
		t.Fatal("rate after one count")
	}
	for i := 1; i <= 30; i++ {
		w.observe(t0.Add(time.Duration(i)*time.Second), 1000+int64(i)*100)
	}
	if r := w.rate(); r != 100 {
		t.Errorf("rate %v; want 100", r)
	}
	if len(w.pts) != 11 {
		t.Errorf("%d counts kept; want 11 (10 s at one a second, and the one at its start)", len(w.pts))
	}
	w.observe(t0.Add(31*time.Second), 500) // went back (a ledger reset): a new base
	w.observe(t0.Add(32*time.Second), 700)
	if r := w.rate(); math.Abs(r-(800+200)/10.0) > 1e-9 { // 22 s → 30 s, then 200 past the new base
		t.Errorf("rate %v after a count went back; want %v", r, (800+200)/10.0)
	}
	if Throughput(0, time.Time{}, 10, t0) != 0 || Throughput(10, t0, 5, t0.Add(time.Second)) != 0 || Throughput(0, t0, 5, t0) != 0 {
		t.Error("Throughput of an empty span or a count that went back is not 0")
	}
}

// TestProgressTotal: while a job runs its iteration total never goes
// down, is never reached by the counter and grows with the shards still to
// train once the counter nears or passes the plan's count (9,375 planned;
// the demo's job went on to 9,921 and showed "9880/9880 99 %" with a shard
// still being trained).
func TestProgressTotal(t *testing.T) {
	const plan, shards = 9375, 100
	type step struct {
		iteration         int64
		todo, doing, done int
	}
	steps := []step{{0, 100, 0, 0}, {100, 97, 3, 0}, {4000, 55, 3, 42}, {9000, 3, 3, 94}, {9375, 0, 2, 98},
		{9700, 0, 1, 99}, {9880, 0, 1, 99}, {9921, 0, 1, 99}, {9921, 0, 0, 100}}
	var prev int64
	for _, s := range steps {
		got := progressTotal(prev, plan, s.iteration, s.todo, s.doing, shards)
		switch {
		case got < prev:
			t.Errorf("at %d: total %d went down from %d", s.iteration, got, prev)
		case got <= s.iteration:
			t.Errorf("at %d (%d shards doing): total %d; a running job must not look finished", s.iteration, s.doing, got)
		case got < plan:
			t.Errorf("at %d: total %d below the plan's %d", s.iteration, got, plan)
		}
		prev = got
	}
	if prev > 10_100 {
		t.Errorf("total %d; the estimate overshoots a job that ended at 9,921", prev)
	}
	// Without shards (plan slices), the plan until the counter passes it.
	if got := progressTotal(0, 235, 200, 0, 0, 0); got != 235 {
		t.Errorf("plain plan at 200/235: %d", got)
	}
	if got := progressTotal(235, 235, 240, 0, 0, 0); got != 241 {
		t.Errorf("counter past the plan: total %d; want 241 (never reached while running)", got)
	}
}

// TestCompletedJobHistory: the last frame of a completed job's timeline
// says completed (`job history` of a completed job never did: the frame
// was recorded before the state changed), its nodes done; the view shows
// the iteration the job ended at as its total, and its throughput is the
// result's.
func TestCompletedJobHistory(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	fast := map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.002, "worker-3": 0.002}
	for range 5 {
		report(fast)
	}
	clk.add(500 * time.Millisecond)
	m.complete(j)
	res, err := m.History("hist", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	frames := res.GetFrames()
	if len(frames) == 0 {
		t.Fatal("no frames")
	}
	last := frames[len(frames)-1]
	if last.GetState() != StateCompleted {
		t.Errorf("last frame %q; want completed", last.GetState())
	}
	for _, n := range last.GetNodes() {
		if n.GetState() == "running" || n.GetState() == "starting" {
			t.Errorf("%s %s in the completed job's last frame", n.GetName(), n.GetState())
		}
	}
	v := m.View([]string{"hist"}, 10)[0]
	if v.State != StateCompleted || v.Iterations != v.Iteration || v.Iteration != 50 {
		t.Errorf("completed view: %s, iteration %d of %d; want completed, 50 of 50", v.State, v.Iteration, v.Iterations)
	}
	if j.res == nil || v.Throughput != j.res.Throughput {
		t.Errorf("completed view's throughput %v; want the result's %v", v.Throughput, j.res.Throughput)
	}
}
