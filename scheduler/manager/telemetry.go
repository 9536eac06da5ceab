package manager

import (
	"sync"
	"time"

	"github.com/kelpie/kelpie/scheduler/monitor"
)

// telemetry owns a job's Monitor (scheduler/monitor). The ingest path — an
// agent's report, on the job's actor — only queues the report's
// samples; the job's tick takes the queue in and computes the Monitor's
// snapshot off the actor. A snapshot of a 5,000-node job takes
// milliseconds; reports no longer wait for it.
type telemetry struct {
	mu    sync.Mutex // guards queue, ids, names and cfg
	queue []telemetryOp
	// ids number the nodes the queue names (names[id]); ops hold numbers,
	// not strings, so the queue has no pointers for the collector to scan
	// (a 5,000-node job queues ~70,000 samples a second). names only grow
	// and its entries never change: takeIn reads the ones it took in
	// without the lock.
	ids   map[string]int32
	names []string
	cfg   monitor.Config // the Monitor's, defaults filled in

	monMu   sync.Mutex // guards mon, spare, batches and comms: taking the queue in, snapshots, config changes
	mon     *monitor.Monitor
	spare   []telemetryOp          // the queue taken in last, reused
	batches []monitor.WorkerSample // scratch of takeIn
	comms   []monitor.CommSample   // scratch of takeIn
	// full signals (one slot, never blocking) that the queue reached
	// maxTelemetryQueue: the job's ticker takes it in (Drain).
	full chan struct{}
}

// maxTelemetryQueue bounds the queue between two ticks: a report that
// fills it asks the job's ticker to take it in (full), off the job's actor,
// which goes on queueing; a report that finds it twice as full (the ticker
// is behind) takes it in itself (back-pressure, nothing dropped). At 5,000
// workers each reporting 10 BPTs and 4 pushes a second it holds about
// 1.5 s of samples; at 20,000, under half a second, and a take-in on the
// actor (some 130,000 Monitor calls) held every report back behind it.
const maxTelemetryQueue = 1 << 17

// telemetryOp is one queued Monitor call, applied in order: a worker's
// batch (at, x = BPT, batch, iter), a push or pull (at, server, x = bytes,
// seconds) or a forget.
type telemetryOp struct {
	kind         telemetryKind
	batch        int32
	node, server int32 // in names
	at, x        int64
	iter         int64
	seconds      float64
}

type telemetryKind uint8

const (
	opWorker telemetryKind = iota
	opComm
	opForget
)

func newTelemetry(cfg monitor.Config) *telemetry {
	mon := monitor.New(cfg)
	return &telemetry{mon: mon, cfg: mon.Config(), ids: map[string]int32{}, full: make(chan struct{}, 1)}
}

// id is name's number. The caller holds mu.
func (t *telemetry) id(name string) int32 {
	if id, ok := t.ids[name]; ok {
		return id
	}
	id := int32(len(t.names))
	t.ids[name] = id
	t.names = append(t.names, name)
	return id
}

// ObserveWorker queues a worker's batch.
func (t *telemetry) ObserveWorker(node string, s monitor.WorkerSample) {
	t.push(func(q []telemetryOp) []telemetryOp {
		return append(q, telemetryOp{kind: opWorker, node: t.id(node), at: int64(s.At), x: int64(s.BPT),
			batch: int32(s.BatchSize), iter: s.Iteration})
	})
}

// ObserveComm queues a push or pull node made.
func (t *telemetry) ObserveComm(node string, c monitor.CommSample) {
	t.push(func(q []telemetryOp) []telemetryOp { return t.appendComm(q, t.id(node), c) })
}

// appendComm appends c, made by node, to q. The caller holds mu.
func (t *telemetry) appendComm(q []telemetryOp, node int32, c monitor.CommSample) []telemetryOp {
	return append(q, telemetryOp{kind: opComm, node: node, server: t.id(c.Server), at: int64(c.At), x: c.Bytes, seconds: c.Seconds})
}

// Forget queues the removal of a node's windows: samples queued before it
// are dropped with them, samples after it start afresh (a restarted node).
func (t *telemetry) Forget(node string) {
	t.push(func(q []telemetryOp) []telemetryOp { return append(q, telemetryOp{kind: opForget, node: t.id(node)}) })
}

// ObserveReport queues a worker's report: its batches (newest last in
// bpts, placed back in time from at) and its pushes and pulls, under one
// acquisition of the queue's lock.
func (t *telemetry) ObserveReport(node string, at time.Duration, batch int, iteration int64, bpts []float64, comm []monitor.CommSample) {
	t.push(func(q []telemetryOp) []telemetryOp {
		id := t.id(node)
		var back time.Duration
		for i := len(bpts) - 1; i >= 0; i-- {
			b := time.Duration(bpts[i] * float64(time.Second))
			q = append(q, telemetryOp{kind: opWorker, node: id, at: int64(at - back), x: int64(b),
				batch: int32(batch), iter: iteration - int64(len(bpts)-1-i)})
			back += b
		}
		for _, c := range comm {
			q = t.appendComm(q, id, c)
		}
		return q
	})
}

// push appends ops to the queue (add, under mu); when that filled it, it
// asks for a take-in (full), and takes the queue in itself when it is twice
// as full.
func (t *telemetry) push(add func([]telemetryOp) []telemetryOp) {
	t.mu.Lock()
	t.queue = add(t.queue)
	n := len(t.queue)
	t.mu.Unlock()
	switch {
	case n >= 2*maxTelemetryQueue:
		t.Drain()
	case n >= maxTelemetryQueue:
		select {
		case t.full <- struct{}{}:
		default: // asked already
		}
	}
}

// reset makes t the telemetry o is (a job launched by EPS at another size
// gets a fresh Monitor). t itself stays: the job's ticker reads it off the
// actor (Snapshot, full) without going through the actor.
func (t *telemetry) reset(o *telemetry) {
	t.monMu.Lock()
	defer t.monMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mon, t.cfg, t.ids, t.names, t.queue, t.spare = o.mon, o.cfg, o.ids, o.names, o.queue, o.spare
}

// Drain takes the queued samples in (the job's ticker, when full says so).
func (t *telemetry) Drain() {
	t.monMu.Lock()
	defer t.monMu.Unlock()
	t.takeIn()
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
	q, names := t.queue, t.names
	t.queue, t.spare = t.spare[:0], nil
	t.mu.Unlock()
	defer func() { t.spare = q[:0] }()
	for i := 0; i < len(q); i++ {
		op := &q[i]
		switch op.kind {
		case opWorker:
			// A report's batches are queued together: one call for
			// them (one look-up of the worker).
			batches := t.batches[:0]
			for ; i < len(q) && q[i].kind == opWorker && q[i].node == op.node; i++ {
				w := &q[i]
				batches = append(batches, monitor.WorkerSample{At: time.Duration(w.at), BPT: time.Duration(w.x),
					BatchSize: int(w.batch), Iteration: w.iter})
			}
			i--
			t.mon.ObserveWorkerBatches(names[op.node], batches)
			t.batches = batches
		case opComm:
			comms := t.comms[:0]
			for ; i < len(q) && q[i].kind == opComm && q[i].node == op.node; i++ {
				c := &q[i]
				comms = append(comms, monitor.CommSample{At: time.Duration(c.at), Server: names[c.server],
					Bytes: c.x, Seconds: c.seconds})
			}
			i--
			t.mon.ObserveComms(names[op.node], comms)
			t.comms = comms
		case opForget:
			t.mon.Forget(names[op.node])
		}
	}
}
