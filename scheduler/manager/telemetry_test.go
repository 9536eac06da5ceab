package manager

import (
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/monitor"
)

// TestTelemetryOrder: queued samples and forgets reach the Monitor in the
// order they came — a node forgotten (removed, restarted) loses the samples
// queued before, keeps those after — and nothing is seen before a snapshot
// takes the queue in.
func TestTelemetryOrder(t *testing.T) {
	const ms = time.Millisecond
	tel := newTelemetry(monitor.DefaultConfig())
	for i := 1; i <= 20; i++ {
		tel.ObserveWorker("worker-0", monitor.WorkerSample{At: time.Duration(i) * 50 * ms, BPT: 50 * ms, BatchSize: 32, Iteration: int64(i)})
		tel.ObserveWorker("worker-1", monitor.WorkerSample{At: time.Duration(i) * 50 * ms, BPT: 50 * ms, BatchSize: 32, Iteration: int64(i)})
	}
	tel.Forget("worker-1")
	tel.ObserveWorker("worker-1", monitor.WorkerSample{At: 1001 * ms, BPT: 400 * ms, BatchSize: 32, Iteration: 1})
	snap := tel.Snapshot(1002 * ms)
	w0, ok := snap.Worker("worker-0")
	if !ok || w0.Samples != 20 {
		t.Fatalf("worker-0: %+v (found %v); want its 20 samples", w0, ok)
	}
	w1, ok := snap.Worker("worker-1")
	if !ok || w1.Samples != 1 {
		t.Fatalf("worker-1: %+v (found %v); want the one sample after its forget", w1, ok)
	}
	// Nothing queued since: the same figures.
	if again, _ := tel.Snapshot(1002 * ms).Worker("worker-0"); again.Samples != 20 {
		t.Errorf("second snapshot: worker-0 has %d samples; want 20", again.Samples)
	}
}

// TestTelemetryFullQueue: a queue that reaches its bound asks for a take-in
// (full), and one that reaches twice its bound is taken in by the report
// that filled it — nothing is dropped — and reports from many goroutines
// race with snapshots without losing a sample (under -race).
func TestTelemetryFullQueue(t *testing.T) {
	tel := newTelemetry(monitor.Config{LTrans: time.Hour, LPer: time.Hour})
	const writers, each = 4, maxTelemetryQueue / 2
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := []string{"worker-0", "worker-1", "worker-2", "worker-3"}[w]
			for i := 1; i <= each; i++ {
				tel.ObserveWorker(node, monitor.WorkerSample{At: time.Duration(i) * time.Microsecond, BPT: time.Microsecond, BatchSize: 1, Iteration: int64(i)})
			}
		}()
	}
	for range 3 {
		tel.Snapshot(time.Second)
	}
	wg.Wait()
	tel.mu.Lock()
	queued := len(tel.queue)
	tel.mu.Unlock()
	if queued >= 2*maxTelemetryQueue {
		t.Errorf("queue holds %d; want it taken in before %d", queued, 2*maxTelemetryQueue)
	}
	select {
	case <-tel.full:
	default:
		t.Error("the queue filled without asking for a take-in")
	}
	// Every writer's last sample is in, and its window is as full as the
	// Monitor keeps it (it holds the latest MaxSamples).
	snap := tel.Snapshot(time.Second)
	want := min(each, tel.mon.Config().MaxSamples)
	for _, n := range []string{"worker-0", "worker-1", "worker-2", "worker-3"} {
		if w, _ := snap.Worker(n); w.Iteration != each || w.Samples != want {
			t.Errorf("%s: latest iteration %d, %d samples; want %d and %d", n, w.Iteration, w.Samples, each, want)
		}
	}
}

// TestTelemetryReport: a report's BPTs (newest last) are placed back in
// time from its arrival, one iteration each, and its pushes and pulls go
// with them: the Monitor sees what one call per sample would have shown.
func TestTelemetryReport(t *testing.T) {
	const ms = time.Millisecond
	// A short window that, at 1 s, holds the samples after 455 ms: the
	// two newest iterations, if they were placed where they ran.
	cfg := monitor.DefaultConfig()
	cfg.LTrans = 545 * ms
	whole, each := newTelemetry(cfg), newTelemetry(cfg)
	bpts := []float64{0.010, 0.020, 0.040}
	comm := []monitor.CommSample{{At: 500 * ms, Server: "server-0", Bytes: 4000, Seconds: 0.002},
		{At: 500 * ms, Server: "server-1", Bytes: 4000, Seconds: 0.008}}
	whole.ObserveReport("worker-0", 500*ms, 16, 12, bpts, comm)
	// By hand: iteration 12 ends at 500 ms (40 ms), 11 at 460 ms (20 ms),
	// 10 at 440 ms (10 ms).
	for _, s := range []monitor.WorkerSample{
		{At: 500 * ms, BPT: 40 * ms, BatchSize: 16, Iteration: 12},
		{At: 460 * ms, BPT: 20 * ms, BatchSize: 16, Iteration: 11},
		{At: 440 * ms, BPT: 10 * ms, BatchSize: 16, Iteration: 10},
	} {
		each.ObserveWorker("worker-0", s)
	}
	for _, c := range comm {
		each.ObserveComm("worker-0", c)
	}
	a, b := whole.Snapshot(time.Second), each.Snapshot(time.Second)
	wa, _ := a.Worker("worker-0")
	wb, _ := b.Worker("worker-0")
	if wa != wb || wa.Samples != 3 || wa.SamplesTrans != 2 || wa.BPTTrans != 30*ms {
		t.Errorf("worker-0 from one report %+v; sample by sample %+v (want 3 samples, the 2 newest in the short window, mean 30ms)", wa, wb)
	}
	for _, s := range []string{"server-0", "server-1"} {
		sa, oka := a.Server(s)
		sb, okb := b.Server(s)
		if !oka || !okb || sa.CommPer != sb.CommPer || sa.Samples != 1 || sb.Samples != 1 {
			t.Errorf("%s from one report %+v (%v); sample by sample %+v (%v)", s, sa, oka, sb, okb)
		}
	}
}

// TestTelemetryDrainedByTicker: a job's Monitor queue that fills between
// two ticks is taken in by the job's ticker (asked through full), not by
// the report that filled it, which runs on the job's actor.
func TestTelemetryDrainedByTicker(t *testing.T) {
	_, j := testJob(t, Config{}, "drain", 2, 1) // ticks hourly: only full wakes the ticker
	for i := 1; i <= maxTelemetryQueue; i++ {
		j.mon.ObserveWorker("worker-0", monitor.WorkerSample{At: time.Duration(i) * time.Microsecond, BPT: time.Microsecond, BatchSize: 1, Iteration: int64(i)})
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		j.mon.mu.Lock()
		queued := len(j.mon.queue)
		j.mon.mu.Unlock()
		if queued < maxTelemetryQueue {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the full queue (%d) was not taken in by the ticker", queued)
		}
	}
}
