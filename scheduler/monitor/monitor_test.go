package monitor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

const (
	ms = time.Millisecond
	s  = time.Second
)

// steady feeds node one sample per second at t = 1s..30s, with the BPT
// from bpt(t). With LTrans = 10s and LPer = 30s a snapshot at 30s holds
// the last 10 samples in the short window and all 30 in the long one.
func steady(m *Monitor, node string, bpt func(t time.Duration) time.Duration) {
	for t := 1 * s; t <= 30*s; t += s {
		m.ObserveWorker(node, WorkerSample{At: t, BPT: bpt(t), BatchSize: 32, Iteration: int64(t / s)})
	}
}

func constant(d time.Duration) func(time.Duration) time.Duration {
	return func(time.Duration) time.Duration { return d }
}

// after returns d0 before or at t0 and d1 after it.
func after(t0, d0, d1 time.Duration) func(time.Duration) time.Duration {
	return func(t time.Duration) time.Duration {
		if t > t0 {
			return d1
		}
		return d0
	}
}

func TestClassifyWorkers(t *testing.T) {
	cfg := Config{LTrans: 10 * s, LPer: 30 * s, Lambda: 1.5, MinSamples: 3}
	normal := constant(100 * ms)
	tests := []struct {
		name string
		w3   func(time.Duration) time.Duration // worker-3; workers 0–2 run at 100 ms
		want Class
	}{
		{"all equal", normal, Healthy},
		// Slow for the last 5 s: short means 100,100,100,250 → T̄ = 137.5,
		// λ·T̄ = 206.25 ≤ 250. Long: 150 vs λ·112.5 = 168.75, not persistent.
		{"transient", after(25*s, 100*ms, 400*ms), Transient},
		// Slow all along: both windows trip, persistent wins.
		{"persistent wins", constant(200 * ms), Persistent},
		// Slow for 20 s, recovered in the last 10 s: the long mean is still
		// 300 ≥ λ·150 = 225, but it is not slow now: the class follows the
		// short-window figure the console shows (it used to stay
		// persistent for L_per after recovering).
		{"persistent, recovered lately", after(20*s, 400*ms, 100*ms), Healthy},
		// Slow for the last 18 s of 30, 4×: the long mean (0.4·100+0.6·400
		// = 280 ≥ λ·145) trips, but the window's oldest 10 s were fast:
		// it has not been slow over the long term, so transient.
		{"deep but not lasting", after(12*s, 100*ms, 400*ms), Transient},
		// λ boundary in both windows: means a,a,a,b with b = λ(3a+b)/4
		// → b = 1.8a = 180 ms = 1.5 × 120 ms exactly.
		{"boundary exactly λ·mean", constant(180 * ms), Persistent},
		{"one ns under the boundary", constant(180*ms - 1), Healthy},
		// Boundary in the short window only: long mean 126.7 < λ·106.7 = 160.
		{"transient boundary", after(20*s, 100*ms, 180*ms), Transient},
		{"transient one ns under", after(20*s, 100*ms, 180*ms-1), Healthy},
		{"faster than the rest", constant(10 * ms), Healthy},
	}
	for _, tt := range tests {
		m := New(cfg)
		for i := range 3 {
			steady(m, fmt.Sprintf("worker-%d", i), normal)
		}
		steady(m, "worker-3", tt.w3)
		snap := m.Snapshot(30 * s)
		w, ok := snap.Worker("worker-3")
		if !ok || w.Class != tt.want {
			t.Errorf("%s: class of worker-3 = %v (short %v, long %v, means %v/%v); want %v",
				tt.name, w.Class, w.BPTTrans, w.BPTPer, snap.MeanBPT, snap.MeanBPTPer, tt.want)
		}
		for _, o := range snap.Workers[:3] {
			if o.Class != Healthy {
				t.Errorf("%s: class of %s = %v; want healthy", tt.name, o.Node, o.Class)
			}
		}
	}
}

func TestClassifyTooFewSamples(t *testing.T) {
	m := New(Config{LTrans: 10 * s, LPer: 30 * s, Lambda: 1.5, MinSamples: 3})
	for i := range 3 {
		steady(m, fmt.Sprintf("worker-%d", i), constant(100*ms))
	}
	// worker-3: two samples, both slow: not enough in either window. It
	// must neither be classified nor move the mean.
	m.ObserveWorker("worker-3", WorkerSample{At: 29 * s, BPT: 10 * s, BatchSize: 32})
	m.ObserveWorker("worker-3", WorkerSample{At: 30 * s, BPT: 10 * s, BatchSize: 32})
	// worker-4: slow, samples only long ago: three in the long window, none
	// in the short one, so only the persistent rule can speak.
	for _, at := range []time.Duration{5 * s, 6 * s, 7 * s} {
		m.ObserveWorker("worker-4", WorkerSample{At: at, BPT: 300 * ms, BatchSize: 32})
	}
	snap := m.Snapshot(30 * s)
	tests := []struct {
		node    string
		want    Class
		samples int
	}{
		{"worker-0", Healthy, 30},
		{"worker-3", Unknown, 2},
		{"worker-4", Persistent, 3}, // 300 ≥ 1.5 × (3·100 + 300)/4 = 225
	}
	for _, tt := range tests {
		w, _ := snap.Worker(tt.node)
		if w.Class != tt.want || w.Samples != tt.samples {
			t.Errorf("%s: class %v with %d samples; want %v with %d", tt.node, w.Class, w.Samples, tt.want, tt.samples)
		}
	}
	if snap.MeanBPT != 100*ms {
		t.Errorf("MeanBPT = %v; want 100ms (worker-3 and -4 lack short-window samples)", snap.MeanBPT)
	}
	if snap.MeanBPTPer != 150*ms {
		t.Errorf("MeanBPTPer = %v; want 150ms = (3·100 + 300)/4", snap.MeanBPTPer)
	}
	if Unknown.String() != "unknown" || Healthy.String() != "healthy" ||
		Transient.String() != "transient" || Persistent.String() != "persistent" {
		t.Errorf("Class strings = %v %v %v %v", Unknown, Healthy, Transient, Persistent)
	}
}

func TestWindowEdges(t *testing.T) {
	// Windows are (now−L, now]: a sample exactly L old is out, one a
	// nanosecond younger is in.
	m := New(Config{LTrans: 10 * s, LPer: 30 * s, MinSamples: 1})
	for _, x := range []struct{ at, bpt time.Duration }{
		{0, 1 * s},        // exactly LPer old at now = 30s: out of both
		{20 * s, 2 * s},   // exactly LTrans old: long only
		{20*s + 1, 3 * s}, // just inside the short window
		{30 * s, 4 * s},   // now
	} {
		m.ObserveWorker("w", WorkerSample{At: x.at, BPT: x.bpt, BatchSize: 1})
	}
	w, _ := m.Snapshot(30 * s).Worker("w")
	if w.SamplesTrans != 2 || w.BPTTrans != 3500*ms || w.Samples != 3 || w.BPTPer != 3*s {
		t.Errorf("windows at 30s = short %d samples mean %v, long %d mean %v; want 2, 3.5s, 3, 3s",
			w.SamplesTrans, w.BPTTrans, w.Samples, w.BPTPer)
	}
}

func TestWindowTrimming(t *testing.T) {
	m := New(Config{LTrans: 2 * s, LPer: 5 * s, MinSamples: 1})
	for i := 1; i <= 10; i++ {
		m.ObserveWorker("w", WorkerSample{At: time.Duration(i) * s, BPT: time.Duration(i) * ms, BatchSize: 1})
	}
	tests := []struct {
		now                time.Duration
		nTrans, nPer       int
		meanTrans, meanPer time.Duration
	}{
		{10 * s, 2, 5, 9500 * time.Microsecond, 8 * ms}, // (9,10] and (5,10]
		{12 * s, 0, 3, 0, 9 * ms},                       // (10,12] empty, (7,12] → 8,9,10
		{14 * s, 0, 1, 0, 10 * ms},
		{15 * s, 0, 0, 0, 0},
		{10 * s, 0, 0, 0, 0}, // going back does not resurrect expired samples
	}
	for _, tt := range tests {
		w, _ := m.Snapshot(tt.now).Worker("w")
		if w.SamplesTrans != tt.nTrans || w.Samples != tt.nPer || w.BPTTrans != tt.meanTrans || w.BPTPer != tt.meanPer {
			t.Errorf("Snapshot(%v): short %d/%v long %d/%v; want %d/%v %d/%v", tt.now,
				w.SamplesTrans, w.BPTTrans, w.Samples, w.BPTPer, tt.nTrans, tt.meanTrans, tt.nPer, tt.meanPer)
		}
		if w.Class != Unknown && w.Samples == 0 {
			t.Errorf("Snapshot(%v): empty windows gave class %v; want unknown", tt.now, w.Class)
		}
	}
	// The latest sample is remembered after it expired.
	w, _ := m.Snapshot(20 * s).Worker("w")
	if w.LastAt != 10*s || w.Iteration != 0 || w.BatchSize != 1 {
		t.Errorf("after expiry: LastAt %v, batch %d; want 10s, 1", w.LastAt, w.BatchSize)
	}
	// A late sample older than an applied cut-off is not counted.
	m.ObserveWorker("w", WorkerSample{At: 21 * s, BPT: 7 * ms, BatchSize: 1})
	m.ObserveWorker("w", WorkerSample{At: 1 * s, BPT: 1 * s, BatchSize: 1})
	w, _ = m.Snapshot(21 * s).Worker("w")
	if w.Samples != 1 || w.BPTPer != 7*ms {
		t.Errorf("late old sample: long window %d samples mean %v; want 1, 7ms", w.Samples, w.BPTPer)
	}
}

func TestMaxSamples(t *testing.T) {
	m := New(Config{LTrans: time.Hour, LPer: time.Hour, MaxSamples: 5, MinSamples: 1})
	for i := 1; i <= 100; i++ {
		m.ObserveWorker("w", WorkerSample{At: time.Duration(i) * s, BPT: time.Duration(i) * ms, BatchSize: 1})
	}
	w, _ := m.Snapshot(100 * s).Worker("w")
	if w.Samples != 5 || w.BPTPer != 98*ms {
		t.Errorf("MaxSamples 5: %d samples mean %v; want 5, 98ms (the newest five)", w.Samples, w.BPTPer)
	}
	m.SetConfig(Config{LTrans: time.Hour, LPer: time.Hour, MaxSamples: 2, MinSamples: 1})
	w, _ = m.Snapshot(100 * s).Worker("w")
	if w.Samples != 2 || w.BPTPer != 99500*time.Microsecond {
		t.Errorf("MaxSamples 2 after SetConfig: %d samples mean %v; want 2, 99.5ms", w.Samples, w.BPTPer)
	}
}

func TestSetConfigWidensWindow(t *testing.T) {
	m := New(Config{LTrans: 2 * s, LPer: 10 * s, MinSamples: 1})
	for i := 1; i <= 10; i++ {
		m.ObserveWorker("w", WorkerSample{At: time.Duration(i) * s, BPT: time.Duration(i) * ms, BatchSize: 1})
	}
	w, _ := m.Snapshot(10 * s).Worker("w")
	if w.SamplesTrans != 2 {
		t.Fatalf("short window before: %d samples; want 2", w.SamplesTrans)
	}
	m.SetConfig(Config{LTrans: 5 * s, LPer: 10 * s, MinSamples: 1})
	w, _ = m.Snapshot(10 * s).Worker("w")
	if w.SamplesTrans != 5 || w.BPTTrans != 8*ms {
		t.Errorf("short window widened to 5s: %d samples mean %v; want 5, 8ms", w.SamplesTrans, w.BPTTrans)
	}
}

// TestWindowsMatchBruteForce checks the running sums against recomputing
// every window from all samples, with samples arriving out of order and
// some arriving after their window was already cut.
func TestWindowsMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cfg := Config{LTrans: 3 * s, LPer: 8 * s, MinSamples: 1, MaxSamples: 1 << 20}
	m := New(cfg)
	type smp struct{ at, bpt time.Duration }
	var all []smp
	now := time.Duration(0)
	late := 0
	for step := range 5000 {
		// Up to 10 s behind now: out of order, and often older than a cut
		// that was already applied to the short or the long window.
		at := now - time.Duration(rng.IntN(10000))*ms
		if at <= now-cfg.LTrans {
			late++
		}
		bpt := time.Duration(1+rng.IntN(1000)) * ms
		m.ObserveWorker("w", WorkerSample{At: at, BPT: bpt, BatchSize: 1})
		all = append(all, smp{at, bpt})
		if step%7 != 0 {
			continue
		}
		now += time.Duration(rng.IntN(1500)) * ms
		w, _ := m.Snapshot(now).Worker("w")
		for k, l := range []time.Duration{cfg.LTrans, cfg.LPer} {
			var n int
			var sum time.Duration
			for _, x := range all {
				if x.at > now-l {
					n++
					sum += x.bpt
				}
			}
			var want time.Duration
			if n > 0 {
				want = sum / time.Duration(n)
			}
			gotN, gotMean := w.SamplesTrans, w.BPTTrans
			if k == 1 {
				gotN, gotMean = w.Samples, w.BPTPer
			}
			if gotN != n || gotMean != want {
				t.Fatalf("step %d, now %v, window %v: %d samples mean %v; want %d mean %v", step, now, l, gotN, gotMean, n, want)
			}
		}
	}
	if late < 1000 {
		t.Fatalf("only %d late samples; the test does not exercise them", late)
	}
}

func TestThroughput(t *testing.T) {
	m := New(Config{LTrans: 10 * s, LPer: 30 * s, MinSamples: 1})
	// 10 batches of 32 in 100 ms, then (after an ADJUST_BS) 10 of 16 in
	// 50 ms: 480 samples in 1.5 s = 320 samples/s.
	for i := 1; i <= 20; i++ {
		b, d := 32, 100*ms
		if i > 10 {
			b, d = 16, 50*ms
		}
		m.ObserveWorker("w", WorkerSample{At: time.Duration(i) * 500 * ms, BPT: d, BatchSize: b, Iteration: int64(i)})
	}
	w, _ := m.Snapshot(10 * s).Worker("w")
	if !near(w.Throughput, 320, 1e-9) || w.BatchSize != 16 || w.Iteration != 20 {
		t.Errorf("throughput %v, batch %d, iteration %d; want 320, 16, 20", w.Throughput, w.BatchSize, w.Iteration)
	}
	// Short window empty: the long window speaks.
	w, _ = m.Snapshot(25 * s).Worker("w")
	if w.SamplesTrans != 0 || !near(w.Throughput, 320, 1e-9) {
		t.Errorf("throughput from long window = %v (%d short samples); want 320", w.Throughput, w.SamplesTrans)
	}
}

func TestRejected(t *testing.T) {
	m := New(Config{})
	m.ObserveWorker("w", WorkerSample{At: s, BPT: 0, BatchSize: 1})
	m.ObserveWorker("w", WorkerSample{At: s, BPT: ms, BatchSize: -1})
	m.ObserveWorker("", WorkerSample{At: s, BPT: ms, BatchSize: 1})
	m.ObserveComm("w", CommSample{At: s, Server: "ps", Bytes: 1, Seconds: 0})
	m.ObserveComm("w", CommSample{At: s, Server: "ps", Bytes: 1, Seconds: math.NaN()})
	m.ObserveComm("w", CommSample{At: s, Server: "ps", Bytes: -1, Seconds: 1})
	m.ObserveComm("w", CommSample{At: s, Server: "", Bytes: 1, Seconds: 1})
	m.ObserveServerTime("ps", s, -1)
	snap := m.Snapshot(s)
	if snap.Rejected != 8 || len(snap.Workers) != 0 || len(snap.Servers) != 0 {
		t.Errorf("Rejected = %d with %d workers, %d servers; want 8, 0, 0", snap.Rejected, len(snap.Workers), len(snap.Servers))
	}
}

func TestConfig(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Config{}.Validate() = %v; want nil", err)
	}
	bad := []Config{
		{LTrans: -1},
		{Lambda: -1},
		{Lambda: math.NaN()},
		{ScaleThreshold: 2},
		{LTrans: time.Minute, LPer: time.Second},
		{MinSamples: 10, MaxSamples: 5},
		{ModelBytes: -1},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v.Validate() = nil; want an error", c)
		}
	}
	if got := New(Config{Lambda: 2}).Config(); got.Lambda != 2 || got.LTrans != DefaultConfig().LTrans {
		t.Errorf("New(Config{Lambda: 2}).Config() = %+v; want λ 2 and default windows", got)
	}
}

// server profiles: PS i answers in alpha[i]·bytes + beta[i] seconds.
type psProfile struct {
	name        string
	alpha, beta float64
}

func feedServers(m *Monitor, rng *rand.Rand, workers int, ps []psProfile, noise float64, from, to time.Duration) {
	for t := from; t < to; t += 100 * ms {
		for w := range workers {
			for _, p := range ps {
				b := int64(1<<20 + rng.IntN(7<<20))
				sec := p.alpha*float64(b) + p.beta
				sec *= 1 + noise*rng.NormFloat64()
				m.ObserveComm(fmt.Sprintf("worker-%d", w), CommSample{At: t, Server: p.name, Bytes: b, Seconds: sec})
			}
		}
	}
}

func TestServerProfiles(t *testing.T) {
	// Five PSs at 400 MB/s, one of them (ps-3) held to 100 MB/s. Two per
	// cent noise. With ModelBytes = 20 MB, s = 4 MB per PS.
	ps := []psProfile{
		{"ps-0", 2.5e-9, 2e-3},
		{"ps-1", 2.5e-9, 2e-3},
		{"ps-2", 2.5e-9, 2e-3},
		{"ps-3", 10e-9, 2e-3},
		{"ps-4", 2.5e-9, 2e-3},
	}
	m := New(Config{LTrans: 5 * s, LPer: 20 * s, MinSamples: 3, MaxSamples: 4096, ModelBytes: 20e6})
	rng := rand.New(rand.NewPCG(7, 8))
	feedServers(m, rng, 4, ps, 0.02, 0, 10*s)
	snap := m.Snapshot(10 * s)
	if snap.PredBytes != 4e6 || snap.Profiled != 5 {
		t.Fatalf("PredBytes %v, profiled %d; want 4e6, 5", snap.PredBytes, snap.Profiled)
	}
	for i, p := range ps {
		st := snap.Servers[i]
		if st.Node != p.name || st.Model != Linear || st.Samples != 400 ||
			!near(st.Alpha, p.alpha, 0.03*p.alpha) || !near(st.Beta, p.beta, 0.3*p.beta) {
			t.Errorf("%s: model %v α %g β %g from %d samples; want linear α %g β %g from 400",
				p.name, st.Model, st.Alpha, st.Beta, st.Samples, p.alpha, p.beta)
		}
		want := p.alpha*4e6 + p.beta
		if !near(st.PredMean, want, 0.01*want) || st.PredSEM <= 0 || st.Lower >= st.PredMean || st.Upper <= st.PredMean {
			t.Errorf("%s: Pred %v ± %v [%v, %v]; want mean ≈ %v", p.name, st.PredMean, st.PredSEM, st.Lower, st.Upper, want)
		}
		if !near(st.Speed, 4e6/st.PredMean, 1e-6) {
			t.Errorf("%s: speed %v; want %v", p.name, st.Speed, 4e6/st.PredMean)
		}
	}
	// ps-3 is out of the superior set and a persistent straggler
	// (about 3.4× the mean of the others' time: 42 ms vs 12 ms).
	if slices.Contains(snap.Superior, "ps-3") || len(snap.Superior) == 0 {
		t.Errorf("Superior = %v; want some of ps-0,1,2,4 and never ps-3", snap.Superior)
	}
	slow, _ := snap.Server("ps-3")
	if slow.Class != Persistent || slow.Superior {
		t.Errorf("ps-3: class %v superior %v; want persistent, not superior", slow.Class, slow.Superior)
	}
	if fast, _ := snap.Server("ps-0"); fast.Class != Healthy {
		t.Errorf("ps-0: class %v; want healthy", fast.Class)
	}
	// Speeds ≈ 4e6/0.012 vs 4e6/0.042 → variance ≈ 2.5.
	if !near(snap.SpeedVariance, 0.042/0.012-1, 0.2) {
		t.Errorf("SpeedVariance = %v; want ≈ %v", snap.SpeedVariance, 0.042/0.012-1)
	}
	if snap.ScaleOut {
		t.Errorf("ScaleOut with %d of 5 superior; want false", len(snap.Superior))
	}
}

func TestScaleOut(t *testing.T) {
	// Three of five PSs slowed 4×, one 2×: only ps-0 is superior, 1 < ½·5.
	ps := []psProfile{
		{"ps-0", 2.5e-9, 1e-3},
		{"ps-1", 5e-9, 1e-3},
		{"ps-2", 10e-9, 1e-3},
		{"ps-3", 10e-9, 1e-3},
		{"ps-4", 10e-9, 1e-3},
	}
	m := New(Config{MaxSamples: 4096, MinSamples: 3})
	feedServers(m, rand.New(rand.NewPCG(9, 10)), 4, ps, 0.01, 0, 5*s)
	snap := m.Snapshot(5 * s)
	if !slices.Equal(snap.Superior, []string{"ps-0"}) || !snap.ScaleOut {
		t.Errorf("Superior %v ScaleOut %v; want [ps-0] true", snap.Superior, snap.ScaleOut)
	}
	// Without ModelBytes, s is the mean sample size (about 4.5 MiB).
	if snap.PredBytes < 4e6 || snap.PredBytes > 5.5e6 {
		t.Errorf("PredBytes = %v; want the mean sample size ≈ 4.7e6", snap.PredBytes)
	}
}

func TestServerEqualSizesAndBusy(t *testing.T) {
	// Every push is the server's whole 4 MB share: no slope, proportional
	// profile, predictions at the sampled size are the sample means.
	m := New(Config{MinSamples: 3})
	for i, sec := range []float64{0.019, 0.020, 0.021} {
		at := time.Duration(i+1) * s
		m.ObserveComm("worker-0", CommSample{At: at, Server: "ps-0", Bytes: 4e6, Seconds: sec})
		m.ObserveComm("worker-0", CommSample{At: at, Server: "ps-1", Bytes: 4e6, Seconds: 2 * sec})
		m.ObserveServerTime("ps-0", at, 0.005)
	}
	snap := m.Snapshot(3 * s)
	ps0, _ := snap.Server("ps-0")
	if ps0.Model != Proportional || !near(ps0.PredMean, 0.02, 1e-12) || ps0.CommPer != 20*ms ||
		ps0.BusyPer != 5*ms || ps0.BusySamples != 3 {
		t.Errorf("ps-0: %v, Pred %v, CommPer %v, busy %v×%d; want proportional, 0.02, 20ms, 5ms×3",
			ps0.Model, ps0.PredMean, ps0.CommPer, ps0.BusyPer, ps0.BusySamples)
	}
	if !near(snap.SpeedVariance, 1, 1e-9) {
		t.Errorf("SpeedVariance = %v; want 1 (ps-1 takes twice as long)", snap.SpeedVariance)
	}
}

func TestServerTooFewSamples(t *testing.T) {
	m := New(Config{MinSamples: 3})
	m.ObserveComm("worker-0", CommSample{At: s, Server: "ps-0", Bytes: 1e6, Seconds: 0.01})
	m.ObserveComm("worker-0", CommSample{At: s, Server: "ps-0", Bytes: 2e6, Seconds: 0.02})
	snap := m.Snapshot(s)
	st, _ := snap.Server("ps-0")
	if st.Model != NoFit || st.Class != Unknown || st.PredMean != 0 || snap.Profiled != 0 || snap.ScaleOut || len(snap.Superior) != 0 {
		t.Errorf("2 samples: model %v class %v pred %v profiled %d scale-out %v superior %v; want nothing",
			st.Model, st.Class, st.PredMean, snap.Profiled, snap.ScaleOut, snap.Superior)
	}
}

func TestForget(t *testing.T) {
	m := New(Config{LTrans: 10 * s, LPer: 30 * s, Lambda: 1.5, MinSamples: 3})
	for i := range 3 {
		steady(m, fmt.Sprintf("worker-%d", i), constant(100*ms))
	}
	steady(m, "worker-3", constant(400*ms))
	for i := range 4 {
		for k := 1; k <= 5; k++ {
			m.ObserveComm(fmt.Sprintf("worker-%d", i), CommSample{At: time.Duration(k) * s, Server: "ps-0", Bytes: int64(k) << 20, Seconds: 0.01 * float64(k)})
			m.ObserveComm(fmt.Sprintf("worker-%d", i), CommSample{At: time.Duration(k) * s, Server: "ps-1", Bytes: int64(k) << 20, Seconds: 0.01 * float64(k)})
		}
	}
	snap := m.Snapshot(30 * s)
	if w, _ := snap.Worker("worker-3"); w.Class != Persistent {
		t.Fatalf("worker-3 before Forget: %v; want persistent", w.Class)
	}
	if st, _ := snap.Server("ps-0"); st.Samples != 20 {
		t.Fatalf("ps-0 before Forget: %d samples; want 20", st.Samples)
	}

	m.Forget("worker-3")
	m.Forget("ps-1")
	m.Forget("nobody")
	snap = m.Snapshot(30 * s)
	if _, ok := snap.Worker("worker-3"); ok || len(snap.Workers) != 3 {
		t.Errorf("after Forget(worker-3): %d workers, worker-3 present %v; want 3, false", len(snap.Workers), ok)
	}
	if snap.MeanBPTPer != 100*ms {
		t.Errorf("after Forget(worker-3): MeanBPTPer %v; want 100ms", snap.MeanBPTPer)
	}
	if _, ok := snap.Server("ps-1"); ok || len(snap.Servers) != 1 {
		t.Errorf("after Forget(ps-1): %d servers, ps-1 present %v; want 1, false", len(snap.Servers), ok)
	}
	if st, _ := snap.Server("ps-0"); st.Samples != 15 {
		t.Errorf("ps-0 after Forget(worker-3): %d samples; want 15 (worker-3's pushes dropped)", st.Samples)
	}
	// A node that comes back starts afresh.
	m.ObserveWorker("worker-3", WorkerSample{At: 30 * s, BPT: 100 * ms, BatchSize: 32})
	if w, _ := m.Snapshot(30 * s).Worker("worker-3"); w.Samples != 1 || w.Class != Unknown {
		t.Errorf("worker-3 back: %d samples class %v; want 1, unknown", w.Samples, w.Class)
	}
}

// TestForgetAtBound: a forgotten worker's push/pull samples are dropped
// lazily (Forget is O(1)), but never take a live sample's place in a
// server's ring at its bound, and a Forget between two snapshots drops
// them as one right after it would.
func TestForgetAtBound(t *testing.T) {
	for _, tc := range []struct {
		name        string
		snapBetween bool // a snapshot between the Forget and the later pushes
	}{
		{"pushes right after the forget", false},
		{"a snapshot between", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(Config{LTrans: 10 * s, LPer: 30 * s, MaxSamples: 10, MinSamples: 3})
			push := func(worker string, from, to int) {
				for k := from; k <= to; k++ {
					m.ObserveComm(worker, CommSample{At: time.Duration(k) * s, Server: "ps-0", Bytes: 1 << 20, Seconds: 0.01})
				}
			}
			push("worker-b", 1, 5)
			push("worker-a", 6, 10) // the ring is at its bound: 10 samples
			m.Forget("worker-a")
			if tc.snapBetween {
				if st, _ := m.Snapshot(15 * s).Server("ps-0"); st.Samples != 5 {
					t.Fatalf("after Forget(worker-a): %d samples; want 5", st.Samples)
				}
			}
			push("worker-b", 11, 15)
			if st, _ := m.Snapshot(15 * s).Server("ps-0"); st.Samples != 10 {
				t.Errorf("worker-b's 10 samples after Forget(worker-a): %d kept; want 10 (worker-a's took none's place)", st.Samples)
			}
			// worker-a comes back: its new samples count, its old ones not.
			push("worker-a", 16, 16)
			if st, _ := m.Snapshot(16 * s).Server("ps-0"); st.Samples != 10 {
				t.Errorf("worker-a back: %d samples; want 10 (the bound)", st.Samples)
			}
		})
	}
}

func TestSnapshotIsImmutable(t *testing.T) {
	m := New(Config{MinSamples: 1})
	m.ObserveWorker("w", WorkerSample{At: s, BPT: ms, BatchSize: 1})
	a := m.Snapshot(s)
	m.ObserveWorker("w", WorkerSample{At: 2 * s, BPT: 3 * ms, BatchSize: 1})
	m.ObserveWorker("v", WorkerSample{At: 2 * s, BPT: 3 * ms, BatchSize: 1})
	_ = m.Snapshot(2 * s)
	if len(a.Workers) != 1 || a.Workers[0].BPTPer != ms {
		t.Errorf("old snapshot changed: %+v", a.Workers)
	}
}

// Benchmarks at the design's scale: 5,000 workers and 100 servers.
const (
	benchWorkers = 5000
	benchServers = 100
)

func benchNames(prefix string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return names
}

func BenchmarkObserve(b *testing.B) {
	workers := benchNames("worker", benchWorkers)
	servers := benchNames("server", benchServers)
	b.Run("worker", func(b *testing.B) {
		m := New(Config{})
		i := 0
		for b.Loop() {
			w := workers[i%benchWorkers]
			m.ObserveWorker(w, WorkerSample{At: time.Duration(i/benchWorkers) * ms, BPT: 100 * ms, BatchSize: 32, Iteration: int64(i / benchWorkers)})
			i++
		}
	})
	b.Run("comm", func(b *testing.B) {
		m := New(Config{})
		i := 0
		for b.Loop() {
			m.ObserveComm(workers[i%benchWorkers], CommSample{At: time.Duration(i/benchWorkers) * ms, Server: servers[i%benchServers], Bytes: 4 << 20, Seconds: 0.01})
			i++
		}
	})
}

func BenchmarkSnapshot(b *testing.B) {
	// 20 s of telemetry: every worker reports a BPT every 100 ms (200 per
	// worker, 1M in all) and each server holds its 1,024 latest push/pull
	// samples (the default MaxSamples).
	workers := benchNames("worker", benchWorkers)
	servers := benchNames("server", benchServers)
	m := New(Config{})
	rng := rand.New(rand.NewPCG(11, 12))
	for t := 100 * ms; t <= 20*s; t += 100 * ms {
		for _, w := range workers {
			m.ObserveWorker(w, WorkerSample{At: t, BPT: time.Duration(90+rng.IntN(20)) * ms, BatchSize: 32})
		}
	}
	for k := range 1024 {
		for j, v := range servers {
			bytes := int64(1<<20 + rng.IntN(7<<20))
			m.ObserveComm(workers[(k+j)%benchWorkers], CommSample{
				At: time.Duration(k) * 10 * ms, Server: v, Bytes: bytes, Seconds: 2.5e-9*float64(bytes) + 1e-3*(1+rng.Float64()),
			})
		}
	}
	m.Snapshot(20 * s)
	b.Run("steady", func(b *testing.B) {
		for b.Loop() {
			m.Snapshot(20 * s)
		}
	})
	// One 100 ms tick: every worker reports a batch and a push to one
	// server, the oldest samples expire, and a snapshot is taken.
	b.Run("tick", func(b *testing.B) {
		now := 20 * s
		for b.Loop() {
			now += 100 * ms
			for j, w := range workers {
				m.ObserveWorker(w, WorkerSample{At: now, BPT: 100 * ms, BatchSize: 32})
				m.ObserveComm(w, CommSample{At: now, Server: servers[j%benchServers], Bytes: 4 << 20, Seconds: 0.012})
			}
			m.Snapshot(now)
		}
	})
}

// TestDemoClasses plays the demo's stragglers (examples/straggler-demo.yaml,
// windows 5 s and 20 s, λ 1.5): worker-2 slow from 5 s on for good, worker-3
// slow 8 s in every 30 s from 40 s on. Second by second, worker-3 is never
// persistent — transient in each slow spell, healthy again within the short
// window after it — while worker-2 turns persistent once its slowness has
// lasted the long window and stays so while nobody else is slower.
func TestDemoClasses(t *testing.T) {
	m := New(Config{LTrans: 5 * s, LPer: 20 * s, Lambda: 1.5, MinSamples: 3, MaxSamples: 4096})
	const normal, end = 20 * ms, 110 * s
	slow := func(node string, at time.Duration) time.Duration {
		switch {
		case node == "worker-2" && at > 5*s:
			return normal + 24*ms // 30 ms × 0.8
		case node == "worker-3" && at > 40*s && (at-40*s)%(30*s) < 8*s:
			return normal + 40*ms
		}
		return normal
	}
	next := map[string]time.Duration{}
	var seenTransient, seenPersistent2 int
	for now := s; now <= end; now += s {
		for w := range 4 {
			node := fmt.Sprintf("worker-%d", w)
			for next[node] < now {
				bpt := slow(node, next[node])
				next[node] += bpt
				m.ObserveWorker(node, WorkerSample{At: next[node], BPT: bpt, BatchSize: 16})
			}
		}
		snap := m.Snapshot(now)
		w3, _ := snap.Worker("worker-3")
		w2, _ := snap.Worker("worker-2")
		for _, w := range snap.Workers {
			if w.Class == Persistent && w.RatioTrans < 1.5 {
				t.Errorf("at %v %s is persistent beside a short-window figure of %.2f × mean: the class lags its figure", now, w.Node, w.RatioTrans)
			}
		}
		if w3.Class == Persistent {
			t.Errorf("at %v worker-3 (slow 8 s in 30) is persistent (ratios %.2f now, %.2f long, %.2f head)", now, w3.RatioTrans, w3.RatioPer, w3.RatioHead)
		}
		inSpell := now > 40*s && (now-40*s)%(30*s) < 8*s
		if w3.Class == Transient {
			seenTransient++
		}
		if !inSpell && now > 40*s && (now-40*s)%(30*s) >= 8*s+5*s+s && w3.Class != Healthy {
			t.Errorf("at %v, over 5 s after its spell, worker-3 is %v; want healthy", now, w3.Class)
		}
		// While worker-3's spell lifts the short-window mean (and for the
		// short window after it), worker-2's 44 ms is under λ × that mean:
		// relative to the others now it does not straggle. Elsewhere it is
		// persistent.
		near := now > 40*s && (now-40*s)%(30*s) < 8*s+5*s+s
		if now >= 5*s+20*s+s && !near {
			if w2.Class != Persistent {
				t.Errorf("at %v worker-2 (slow since 5 s) is %v; want persistent", now, w2.Class)
			}
			seenPersistent2++
		}
	}
	if seenTransient == 0 {
		t.Error("worker-3 was never transient")
	}
}

// TestBatchesAsEach: a worker's batches and round trips given together
// (ObserveWorkerBatches, ObserveComms) make the Monitor what they make one
// at a time, invalid samples refused alike.
func TestBatchesAsEach(t *testing.T) {
	batches := []WorkerSample{
		{At: 100 * ms, BPT: 50 * ms, BatchSize: 32, Iteration: 1},
		{At: 90 * ms, BPT: 40 * ms, BatchSize: 32, Iteration: 0}, // out of order
		{At: 150 * ms, BPT: 0, BatchSize: 32, Iteration: 2},      // refused
		{At: 200 * ms, BPT: 60 * ms, BatchSize: 32, Iteration: 3},
	}
	comms := []CommSample{
		{At: 100 * ms, Server: "server-0", Bytes: 1000, Seconds: 0.002},
		{At: 100 * ms, Server: "server-1", Bytes: 1000, Seconds: 0.004},
		{At: 110 * ms, Server: "", Bytes: 1000, Seconds: 0.004}, // refused
		{At: 120 * ms, Server: "server-0", Bytes: 2000, Seconds: 0.003},
	}
	tests := []struct {
		name   string
		worker string
	}{{"named worker", "worker-0"}, {"no name", ""}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			each, together := New(Config{}), New(Config{})
			for round := range 3 {
				shift := time.Duration(round) * time.Second
				var bs []WorkerSample
				for _, b := range batches {
					b.At += shift
					each.ObserveWorker(tt.worker, b)
					bs = append(bs, b)
				}
				var cs []CommSample
				for _, c := range comms {
					c.At += shift
					each.ObserveComm(tt.worker, c)
					cs = append(cs, c)
				}
				together.ObserveWorkerBatches(tt.worker, bs)
				together.ObserveComms(tt.worker, cs)
			}
			if a, b := each.Snapshot(3*time.Second), together.Snapshot(3*time.Second); !reflect.DeepEqual(a, b) {
				t.Errorf("one at a time:\n%+v\ntogether:\n%+v", a, b)
			}
		})
	}
}
