package manager

import (
	"sync"
	"time"

	"github.com/kelpie/kelpie/scheduler/monitor"
)

// telemetry owns a job's Monitor (scheduler/monitor). The ingest path — an
// agent's report, under the manager's lock — only queues the report's
// samples; the job's tick takes the queue in and computes the Monitor's
// snapshot outside the manager's lock. A snapshot of a 5,000-node job takes
// milliseconds; reports no longer wait for it.
type telemetry struct {
	mu    sync.Mutex // guards queue and cfg
	queue []telemetryOp
	cfg   monitor.Config // the Monitor's, defaults filled in

	monMu sync.Mutex // guards mon and spare: taking the queue in, snapshots, config changes
	mon   *monitor.Monitor
	spare []telemetryOp // the queue taken in last, reused
}

// maxTelemetryQueue bounds the queue between two ticks: a report that
// finds it full takes the queue in itself (back-pressure, nothing dropped).
// At 5,000 workers each reporting 10 BPTs and 4 pushes a second it holds
// about 1.5 s of samples.
const maxTelemetryQueue = 1 << 17

// telemetryOp is one queued Monitor call, applied in order.
type telemetryOp struct {
	kind   telemetryKind
	node   string
	worker monitor.WorkerSample
	comm   monitor.CommSample
}

type telemetryKind uint8

const (
	opWorker telemetryKind = iota
	opComm
	opForget
)

func newTelemetry(cfg monitor.Config) *telemetry {
	mon := monitor.New(cfg)
	return &telemetry{mon: mon, cfg: mon.Config()}
}

// ObserveWorker queues a worker's batch.
func (t *telemetry) ObserveWorker(node string, s monitor.WorkerSample) {
	t.push(telemetryOp{kind: opWorker, node: node, worker: s})
}

// Forget queues the removal of a node's windows: samples queued before it
// are dropped with them, samples after it start afresh (a restarted node).
func (t *telemetry) Forget(node string) {
	t.push(telemetryOp{kind: opForget, node: node})
}

// ObserveReport queues a worker's report: its batches (newest last in
// bpts, placed back in time from at) and its pushes and pulls, under one
// acquisition of the queue's lock.
func (t *telemetry) ObserveReport(node string, at time.Duration, batch int, iteration int64, bpts []float64, comm []monitor.CommSample) {
	var buf [32]telemetryOp
	ops := buf[:0]
	var back time.Duration
	for i := len(bpts) - 1; i >= 0; i-- {
		b := time.Duration(bpts[i] * float64(time.Second))
		ops = append(ops, telemetryOp{kind: opWorker, node: node, worker: monitor.WorkerSample{At: at - back, BPT: b,
			BatchSize: batch, Iteration: iteration - int64(len(bpts)-1-i)}})
		back += b
	}
	for _, c := range comm {
		ops = append(ops, telemetryOp{kind: opComm, node: node, comm: c})
	}
	t.push(ops...)
}

func (t *telemetry) push(ops ...telemetryOp) {
	t.mu.Lock()
	t.queue = append(t.queue, ops...)
	full := len(t.queue) >= maxTelemetryQueue
	t.mu.Unlock()
	if full {
		t.monMu.Lock()
		t.takeIn()
		t.monMu.Unlock()
	}
}

// Config is the Monitor's configuration, defaults filled in.
func (t *telemetry) Config() monitor.Config {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg
}

// SetConfig changes the Monitor's parameters (rare: an operator's policy
// change); it waits for a snapshot under way.
func (t *telemetry) SetConfig(c monitor.Config) {
	t.monMu.Lock()
	t.mon.SetConfig(c)
	c = t.mon.Config()
	t.monMu.Unlock()
	t.mu.Lock()
	t.cfg = c
	t.mu.Unlock()
}

// Snapshot takes the queued samples in and computes the Monitor's view at
// now (on the job's clock).
func (t *telemetry) Snapshot(now time.Duration) monitor.Snapshot {
	t.monMu.Lock()
	defer t.monMu.Unlock()
	t.takeIn()
	return t.mon.Snapshot(now)
}

// takeIn applies the queue to the Monitor. Called with monMu held.
func (t *telemetry) takeIn() {
	t.mu.Lock()
	q := t.queue
	t.queue, t.spare = t.spare[:0], nil
	t.mu.Unlock()
	defer func() { t.spare = q[:0] }()
	for i := range q {
		op := &q[i]
		switch op.kind {
		case opWorker:
			t.mon.ObserveWorker(op.node, op.worker)
		case opComm:
			t.mon.ObserveComm(op.node, op.comm)
		case opForget:
			t.mon.Forget(op.node)
		}
	}
}
