// Package monitor turns the telemetry that agents stream in (batch
// processing times, per-server push/pull times and sizes) into the
// statistics the straggler policies and the console read: AntDT's sliding
// windows and straggler classes (§V-D Monitor, §VI AntDT-ND) and PSLD's
// per-server profiles, confidence bounds and superior set (§4.1–4.2,
// Alg. 1).
//
// A Monitor is a pure state machine, in the manner of etcd's raft: samples
// go in through the Observe methods, an immutable Snapshot comes out, and
// time is a value the caller passes. It does no I/O, starts no goroutine
// and reads no clock; it is not safe for concurrent use (one goroutine owns
// it and hands Snapshots, which share nothing with it, to readers).
//
// Windows. Each worker keeps its samples ordered by time with a short
// window L_trans and a long window L_per; a window at time now holds the
// samples with now−L < At (samples stamped after now, from an agent whose
// clock runs ahead, count as the newest). Running integer sums per window
// make a Snapshot O(workers + expired samples + server samples). At most
// Config.MaxSamples samples are kept per node, so a window that would hold
// more is, in effect, shorter.
//
// Workers (AntDT-ND). With T̄ᵢ the mean BPT of worker i in a window and T̄
// the mean of those means over all workers with enough samples in the same
// window, worker i is a transient straggler when T̄ᵢ^trans ≥ λ·T̄^trans and a
// persistent one when T̄ᵢ^per ≥ λ·T̄^per and it is slow at both ends of the
// long window: now (T̄ᵢ^trans ≥ λ·T̄^trans) and over the long window's
// oldest L_trans (its mean ≥ λ·T̄^per); persistent wins. AntDT (§I) defines
// persistent stragglers as "consistently slower" over the long term and
// transient ones by their periodicity; the long-window mean alone is not
// that: a deep slowness of a few seconds (the demo's worker-3, 8 s every
// 30 s) lifts a 20 s mean past λ while it lasts, and keeps it there after
// it ended. Requiring both ends makes a slowness persistent only once it
// has lasted the whole long window and only while it still lasts, so the
// class never lags the short-window figure the console shows beside it. Throughput is
// v_i = ΣB/ΣT over the short window, which is B_i/T̄_i^trans while the batch
// size is constant and the samples processed per second of batch time when
// an ADJUST_BS changed it inside the window.
//
// Servers (PSLD and AntDT-ND). Every push or pull a worker reports is a
// sample (bytes, seconds) of the server it talked to; over the long window
// the Monitor fits Pred(r,s) = α_r·s + β_r by least squares and evaluates
// Pred_mean and Pred_SEM at one size s for all servers (Snapshot.PredBytes:
// Alg. 1's s = model size / number of PSs when Config.ModelBytes is set,
// otherwise the mean sample size, which is the same thing when each sample
// is one server's share of an iteration). From those come the 90 % bounds,
// the superior set, the PS speed s/Pred_mean and the speed variance. A
// server is a persistent straggler when its mean communication time over
// the long window is ≥ λ times the mean over servers. AntDT states this
// rule on the server's own processing time T^s; the time a worker sees
// contains it plus the network (T^s + T^m), so a bandwidth-starved server
// is caught too. Server-side processing times, when reported, are shown
// alongside (ServerStat.BusyPer) but do not classify.
package monitor

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Config holds the Monitor's parameters. Zero fields take the defaults of
// DefaultConfig, so a partial Config is fine; Validate reports values that
// are out of range (SetConfig replaces those by defaults as well).
type Config struct {
	LTrans time.Duration // short window (AntDT L^trans)
	LPer   time.Duration // long window (AntDT L^per); also the window of the server profiles
	Lambda float64       // slowness ratio λ (AntDT-ND; the paper uses 1.5)
	// MaxSamples bounds the samples kept per node: per worker its BPTs, per
	// server the push/pull samples of all workers together. Size it to at
	// least twice the number of workers for server profiles that hear from
	// every worker.
	MaxSamples int
	// MinSamples is the least number of samples a window needs before its
	// mean takes part in classification. Server profiles need at least 3
	// regardless (the SEM has n−2 degrees of freedom).
	MinSamples int
	// ScaleThreshold is PSLD's scale-out threshold as a fraction of the
	// profiled servers: ScaleOut when |superior| < ScaleThreshold·|PS|
	// (Alg. 1 lines 11–12; 1/2 in the paper).
	ScaleThreshold float64
	// ModelBytes is the model size; when set, predictions are made at
	// ModelBytes / |PS| (Alg. 1 line 2). Zero means the mean sample size.
	ModelBytes int64
}

// DefaultConfig returns the defaults: windows of 5 s and 20 s (the design's
// time-compressed demo; the paper uses 5 and 10 minutes), λ = 1.5,
// 1024 samples per node, 3 samples per window, scale threshold 1/2.
func DefaultConfig() Config {
	return Config{
		LTrans:         5 * time.Second,
		LPer:           20 * time.Second,
		Lambda:         1.5,
		MaxSamples:     1024,
		MinSamples:     3,
		ScaleThreshold: 0.5,
	}
}

// Validate reports the first field out of range. Zero fields are valid
// (they mean "default").
func (c Config) Validate() error {
	switch {
	case c.LTrans < 0:
		return fmt.Errorf("monitor: negative short window %v", c.LTrans)
	case c.LPer < 0:
		return fmt.Errorf("monitor: negative long window %v", c.LPer)
	case c.Lambda < 0 || math.IsNaN(c.Lambda) || math.IsInf(c.Lambda, 0):
		return fmt.Errorf("monitor: lambda %v is not a positive number", c.Lambda)
	case c.MaxSamples < 0:
		return fmt.Errorf("monitor: negative max samples %d", c.MaxSamples)
	case c.MinSamples < 0:
		return fmt.Errorf("monitor: negative min samples %d", c.MinSamples)
	case c.ScaleThreshold < 0 || c.ScaleThreshold > 1 || math.IsNaN(c.ScaleThreshold):
		return fmt.Errorf("monitor: scale threshold %v is outside [0, 1]", c.ScaleThreshold)
	case c.ModelBytes < 0:
		return fmt.Errorf("monitor: negative model size %d", c.ModelBytes)
	}
	d := c.withDefaults()
	if d.LTrans > d.LPer {
		return fmt.Errorf("monitor: short window %v is longer than long window %v", d.LTrans, d.LPer)
	}
	if d.MinSamples > d.MaxSamples {
		return fmt.Errorf("monitor: min samples %d exceed max samples %d", d.MinSamples, d.MaxSamples)
	}
	return nil
}

// withDefaults replaces zero and out-of-range fields by the defaults.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.LTrans <= 0 {
		c.LTrans = d.LTrans
	}
	if c.LPer <= 0 {
		c.LPer = d.LPer
	}
	if !(c.Lambda > 0) || math.IsInf(c.Lambda, 0) {
		c.Lambda = d.Lambda
	}
	if c.MaxSamples <= 0 {
		c.MaxSamples = d.MaxSamples
	}
	if c.MinSamples <= 0 {
		c.MinSamples = d.MinSamples
	}
	if !(c.ScaleThreshold > 0) || c.ScaleThreshold > 1 {
		c.ScaleThreshold = d.ScaleThreshold
	}
	if c.ModelBytes < 0 {
		c.ModelBytes = 0
	}
	return c
}

// WorkerSample is one batch a worker processed.
type WorkerSample struct {
	At        time.Duration // when the batch finished, on the job's clock
	BPT       time.Duration // batch processing time; must be > 0
	BatchSize int           // samples in the batch; must be ≥ 0 and fit in 32 bits
	Iteration int64
}

// CommSample is one push or pull between a worker and a server.
type CommSample struct {
	At      time.Duration
	Server  string
	Bytes   int64   // payload size; must be ≥ 0
	Seconds float64 // round-trip time seen by the worker; must be > 0
}

// Class is a node's straggler class. The zero value, Unknown, means no
// window had enough samples (Config.MinSamples) to judge: a window with
// too few samples gives no class, it does not count as healthy.
type Class int

const (
	Unknown    Class = iota // not enough samples in any window
	Healthy                 // judged, not a straggler
	Transient               // T̄ᵢ^trans ≥ λ·T̄^trans (workers only)
	Persistent              // T̄ᵢ^per ≥ λ·T̄^per, slow now and at the long window's start; wins over Transient
)

func (c Class) String() string {
	switch c {
	case Unknown:
		return "unknown"
	case Healthy:
		return "healthy"
	case Transient:
		return "transient"
	case Persistent:
		return "persistent"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// WorkerStat is one worker in a Snapshot. Window means are zero when the
// window holds no samples; ratios are zero when there is no mean to
// compare with.
type WorkerStat struct {
	Node       string
	BatchSize  int   // of the latest sample
	Iteration  int64 // of the latest sample
	LastAt     time.Duration
	BPTTrans   time.Duration // T̄ᵢ^trans
	BPTPer     time.Duration // T̄ᵢ^per
	RatioTrans float64       // T̄ᵢ^trans / T̄^trans: the heatmap's "BPT relative to the mean"
	RatioPer   float64       // T̄ᵢ^per / T̄^per
	// BPTHead is the mean BPT over the long window's head, its oldest
	// L_trans; RatioHead is BPTHead / T̄^per (zero with too few samples).
	BPTHead     time.Duration
	RatioHead   float64
	SamplesHead int
	// RatioNow is the BPT now over T̄^trans: the short window's mean (the
	// latest batch when the short window has none, a batch longer than it)
	// — RatioTrans whenever the short window has samples.
	RatioNow float64
	// Throughput v_i in samples per second over the short window (the long
	// one when the short is empty).
	Throughput   float64
	Class        Class
	SamplesTrans int // samples in the short window
	Samples      int // samples in the long window
}

// ServerStat is one server in a Snapshot. Predictions are in seconds at
// Snapshot.PredBytes and are zero when Model is NoFit.
type ServerStat struct {
	Node        string
	Model       FitKind
	Alpha, Beta float64 // seconds per byte, seconds
	Samples     int     // push/pull samples in the long window
	PredMean    float64
	PredSEM     float64
	Lower       float64 // PredMean − 1.645·PredSEM
	Upper       float64 // PredMean + 1.645·PredSEM
	Speed       float64 // bytes per second: PredBytes / PredMean (0 if PredMean ≤ 0)
	Superior    bool
	CommPer     time.Duration // mean push/pull time over the long window (AntDT T̄ᵢ^per)
	Ratio       float64       // CommPer / mean over servers
	Class       Class         // Unknown, Healthy or Persistent
	BusyPer     time.Duration // mean server-side processing time reported over the long window
	BusySamples int
	LastAt      time.Duration // latest push/pull sample ever seen
}

// Snapshot is what the Monitor knows at one time. It shares no memory with
// the Monitor. Workers and Servers are sorted by Node.
type Snapshot struct {
	At     time.Duration
	Config Config // with defaults filled in: the λ, windows and thresholds used

	Workers    []WorkerStat
	MeanBPT    time.Duration // T̄^trans: mean of the workers' short-window means
	MeanBPTPer time.Duration // T̄^per: mean of the workers' long-window means

	Servers  []ServerStat
	MeanComm time.Duration // mean of the servers' CommPer
	// PredBytes is the size s at which every server's PredMean, PredSEM and
	// Speed are evaluated (see the package comment).
	PredBytes     float64
	Profiled      int     // servers with a profile (Model ≠ NoFit): |PS| in Alg. 1
	SpeedVariance float64 // (best − worst)/worst over profiled servers' Speed
	Superior      []string
	ScaleOut      bool // |Superior| < ScaleThreshold·Profiled

	// Rejected counts samples refused since New for invalid values
	// (BPT ≤ 0, negative sizes, non-positive or NaN times, empty names).
	Rejected int64
}

// Worker returns the named worker's stats.
func (s Snapshot) Worker(node string) (WorkerStat, bool) {
	i, ok := slices.BinarySearchFunc(s.Workers, node, func(w WorkerStat, n string) int {
		return strings.Compare(w.Node, n)
	})
	if !ok {
		return WorkerStat{}, false
	}
	return s.Workers[i], true
}

// Server returns the named server's stats.
func (s Snapshot) Server(node string) (ServerStat, bool) {
	i, ok := slices.BinarySearchFunc(s.Servers, node, func(v ServerStat, n string) int {
		return strings.Compare(v.Node, n)
	})
	if !ok {
		return ServerStat{}, false
	}
	return s.Servers[i], true
}

type worker struct {
	name string
	q    series
}

// csample is one push/pull sample held by the server it measured.
type csample struct {
	at      int64
	bytes   int64
	seconds float64
	worker  int32 // interned name of the reporting worker, for Forget
}

type busySample struct {
	at      int64
	seconds float64
}

type server struct {
	name   string
	comm   ring[csample]
	busy   ring[busySample]
	lastAt int64
	seen   bool
	// purged is the Monitor's forgets count when comm last dropped the
	// samples of forgotten workers (purge).
	purged uint64
}

// Monitor accumulates samples; see the package comment.
type Monitor struct {
	cfg     Config
	workers map[string]*worker
	servers map[string]*server

	// Sorted views, rebuilt only when a node is added or forgotten.
	workerOrder []*worker
	serverOrder []*server
	orderDirty  bool

	// Interned worker names of comm samples.
	ids    map[string]int32
	nextID int32

	// forgotten holds the numbers of workers forgotten since the servers'
	// rings last dropped their samples; forgets counts Forgets that added
	// to it. Forget is O(1): a server's ring drops a forgotten worker's
	// samples when it is next read (Snapshot, SetConfig) or would drop a
	// live sample at its bound (observeComm), not at every Forget — a
	// storm of lost workers filtered every server's ring once per worker
	// (O(workers × servers × samples)). Numbers are never reused (a
	// worker that comes back gets a new one), and Snapshot reads every
	// server, after which the set is empty.
	forgotten map[int32]struct{}
	forgets   uint64

	rejected int64

	// Scratch reused by Snapshot.
	xs, ys []float64
}

// New returns an empty Monitor; zero fields of c take defaults.
func New(c Config) *Monitor {
	return &Monitor{
		cfg:     c.withDefaults(),
		workers: make(map[string]*worker),
		servers: make(map[string]*server),
		ids:     make(map[string]int32),
	}
}

// Config returns the configuration in use, defaults filled in.
func (m *Monitor) Config() Config { return m.cfg }

// SetConfig changes the parameters live. Zero and out-of-range fields take
// defaults (check with Validate first to reject them instead). Samples
// already expired from a window are gone; a longer window fills up again
// as new samples arrive. A smaller MaxSamples drops the oldest samples.
func (m *Monitor) SetConfig(c Config) {
	m.cfg = c.withDefaults()
	for _, w := range m.workers {
		w.q.reset(m.cfg.MaxSamples)
	}
	for _, s := range m.servers {
		m.purge(s)
		if over := len(s.comm.live()) - m.cfg.MaxSamples; over > 0 {
			s.comm.head += over
		}
		if over := len(s.busy.live()) - m.cfg.MaxSamples; over > 0 {
			s.busy.head += over
		}
	}
	m.purgedAll()
}

// ObserveWorker records one batch of a worker, creating the worker on its
// first sample.
func (m *Monitor) ObserveWorker(node string, s WorkerSample) {
	if node == "" || s.BPT <= 0 || s.BatchSize < 0 || s.BatchSize > math.MaxInt32 {
		m.rejected++
		return
	}
	w := m.workers[node]
	if w == nil {
		w = &worker{name: node, q: newSeries()}
		m.workers[node] = w
		m.orderDirty = true
	}
	w.q.insert(wsample{at: int64(s.At), bpt: int64(s.BPT), batch: int32(s.BatchSize)}, s.Iteration, m.cfg.MaxSamples)
}

// ObserveWorkerBatches records batches of one worker, as ObserveWorker
// does each, with one look-up of the worker for them all: a report carries
// ten or so, and a 20,000-worker job's Monitor takes in 200,000 a second.
func (m *Monitor) ObserveWorkerBatches(node string, ss []WorkerSample) {
	var w *worker
	for _, s := range ss {
		if node == "" || s.BPT <= 0 || s.BatchSize < 0 || s.BatchSize > math.MaxInt32 {
			m.rejected++
			continue
		}
		if w == nil {
			if w = m.workers[node]; w == nil {
				w = &worker{name: node, q: newSeries()}
				m.workers[node] = w
				m.orderDirty = true
			}
		}
		w.q.insert(wsample{at: int64(s.At), bpt: int64(s.BPT), batch: int32(s.BatchSize)}, s.Iteration, m.cfg.MaxSamples)
	}
}

// ObserveComm records one push or pull that worker made to s.Server,
// creating the server on its first sample.
func (m *Monitor) ObserveComm(worker string, s CommSample) {
	if worker == "" || s.Server == "" || s.Bytes < 0 || !(s.Seconds > 0) || math.IsInf(s.Seconds, 0) {
		m.rejected++
		return
	}
	m.observeComm(m.workerID(worker), s)
}

// ObserveComms records pushes and pulls of one worker, as ObserveComm does
// each, with one look-up of the worker for them all.
func (m *Monitor) ObserveComms(worker string, cs []CommSample) {
	id, known := int32(0), false
	for _, s := range cs {
		if worker == "" || s.Server == "" || s.Bytes < 0 || !(s.Seconds > 0) || math.IsInf(s.Seconds, 0) {
			m.rejected++
			continue
		}
		if !known {
			id, known = m.workerID(worker), true
		}
		m.observeComm(id, s)
	}
}

// workerID is worker's interned number, given it on first use.
func (m *Monitor) workerID(worker string) int32 {
	id, ok := m.ids[worker]
	if !ok {
		id = m.nextID
		m.nextID++
		m.ids[worker] = id
	}
	return id
}

// observeComm records a valid sample of the worker numbered id.
func (m *Monitor) observeComm(id int32, s CommSample) {
	v := m.server(s.Server)
	at := int64(s.At)
	if !v.seen || at > v.lastAt {
		v.lastAt, v.seen = at, true
	}
	if len(v.comm.live()) >= m.cfg.MaxSamples {
		// At its bound the ring drops its oldest sample: a forgotten
		// worker's must not take a live one's place.
		m.purge(v)
	}
	v.comm.push(csample{at: at, bytes: s.Bytes, seconds: s.Seconds, worker: id}, m.cfg.MaxSamples)
}

// ObserveServerTime records the time a server spent processing (its own
// measure, without the network), shown as ServerStat.BusyPer.
func (m *Monitor) ObserveServerTime(server string, at time.Duration, busySeconds float64) {
	if server == "" || busySeconds < 0 || math.IsNaN(busySeconds) || math.IsInf(busySeconds, 0) {
		m.rejected++
		return
	}
	m.server(server).busy.push(busySample{at: int64(at), seconds: busySeconds}, m.cfg.MaxSamples)
}

func (m *Monitor) server(name string) *server {
	v := m.servers[name]
	if v == nil {
		v = &server{name: name, purged: m.forgets}
		m.servers[name] = v
		m.orderDirty = true
	}
	return v
}

// Forget removes everything a lost or removed node contributed: its own
// samples as a worker or a server, and the push/pull samples it reported as
// a worker (a restarted worker runs on another host, with another link).
func (m *Monitor) Forget(node string) {
	if _, ok := m.workers[node]; ok {
		delete(m.workers, node)
		m.orderDirty = true
	}
	if _, ok := m.servers[node]; ok {
		delete(m.servers, node)
		m.orderDirty = true
	}
	if id, ok := m.ids[node]; ok {
		delete(m.ids, node)
		if m.forgotten == nil {
			m.forgotten = make(map[int32]struct{})
		}
		m.forgotten[id] = struct{}{}
		m.forgets++
	}
}

// live says whether c is not a forgotten worker's sample.
func (m *Monitor) live(c csample) bool {
	if len(m.forgotten) == 0 {
		return true
	}
	_, gone := m.forgotten[c.worker]
	return !gone
}

// purge drops the samples of forgotten workers from v's ring, if some
// were forgotten since it last did.
func (m *Monitor) purge(v *server) {
	if v.purged != m.forgets {
		if len(m.forgotten) > 0 {
			v.comm.keep(m.live)
		}
		v.purged = m.forgets
	}
}

// purgedAll empties the forgotten set once every server's ring has dropped
// its workers' samples (Snapshot and SetConfig purge them all).
func (m *Monitor) purgedAll() { clear(m.forgotten) }

func (m *Monitor) sortNodes() {
	if !m.orderDirty {
		return
	}
	m.workerOrder = m.workerOrder[:0]
	for _, w := range m.workers {
		m.workerOrder = append(m.workerOrder, w)
	}
	slices.SortFunc(m.workerOrder, func(a, b *worker) int { return strings.Compare(a.name, b.name) })
	m.serverOrder = m.serverOrder[:0]
	for _, v := range m.servers {
		m.serverOrder = append(m.serverOrder, v)
	}
	slices.SortFunc(m.serverOrder, func(a, b *server) int { return strings.Compare(a.name, b.name) })
	m.orderDirty = false
}

// Snapshot expires samples older than the windows at now and returns the
// statistics. now should not go backwards: expired samples are dropped for
// good.
func (m *Monitor) Snapshot(now time.Duration) Snapshot {
	m.sortNodes()
	c := m.cfg
	snap := Snapshot{At: now, Config: c, Rejected: m.rejected}
	m.workerStats(&snap, int64(now))
	m.serverStats(&snap, int64(now))
	m.purgedAll()
	return snap
}

func (m *Monitor) workerStats(snap *Snapshot, now int64) {
	c := m.cfg
	l := [nwin]int64{int64(c.LTrans), int64(c.LPer), int64(c.LPer - c.LTrans)}
	snap.Workers = make([]WorkerStat, len(m.workerOrder))
	means := make([][2]float64, len(m.workerOrder)) // ns; NaN when too few samples
	heads := make([]float64, len(m.workerOrder))    // ns: the long window's head; NaN when it has no sample
	nows := make([]float64, len(m.workerOrder))     // ns: the BPT now; NaN when the long window has no sample
	var sum [2]float64
	var cnt [2]int
	for i, w := range m.workerOrder {
		w.q.trim(now, l)
		st := &snap.Workers[i]
		st.Node = w.name
		st.BatchSize = int(w.q.last.batch)
		st.Iteration = w.q.lastIter
		st.LastAt = time.Duration(w.q.last.at)
		st.SamplesTrans = w.q.win[trans].n
		st.Samples = w.q.win[per].n
		heads[i], nows[i] = math.NaN(), math.NaN()
		if hn, hb := w.q.win[per].n-w.q.win[mid].n, w.q.win[per].bpt-w.q.win[mid].bpt; hn > 0 {
			st.BPTHead = time.Duration(hb / int64(hn))
			st.SamplesHead = hn
			heads[i] = float64(hb) / float64(hn)
		} else if m := w.q.win[mid]; m.n > 0 {
			// No batch ended in the head: a batch longer than L_trans
			// that began there covers it.
			if o := w.q.sample(m.start); o.at-o.bpt <= now-l[mid] {
				st.BPTHead = time.Duration(o.bpt)
				heads[i] = float64(o.bpt)
			}
		}
		// Now: the short window's mean, else (a batch longer than the
		// short window) the latest batch, if the long window holds it.
		if tw := w.q.win[trans]; tw.n > 0 {
			nows[i] = float64(tw.bpt) / float64(tw.n)
		} else if w.q.win[per].n > 0 {
			nows[i] = float64(w.q.last.bpt)
		}
		for k, win := range w.q.win[:2] {
			means[i][k] = math.NaN()
			if win.n == 0 {
				continue
			}
			mean := float64(win.bpt) / float64(win.n)
			if k == trans {
				st.BPTTrans = time.Duration(win.bpt / int64(win.n))
			} else {
				st.BPTPer = time.Duration(win.bpt / int64(win.n))
			}
			if win.n >= c.MinSamples {
				means[i][k] = mean
				sum[k] += mean
				cnt[k]++
			}
		}
		tw := w.q.win[trans]
		if tw.n == 0 {
			tw = w.q.win[per]
		}
		if tw.bpt > 0 {
			st.Throughput = float64(tw.batch) / (float64(tw.bpt) / 1e9)
		}
	}
	if cnt[trans] > 0 {
		snap.MeanBPT = time.Duration(sum[trans] / float64(cnt[trans]))
	}
	if cnt[per] > 0 {
		snap.MeanBPTPer = time.Duration(sum[per] / float64(cnt[per]))
	}
	for i := range snap.Workers {
		st := &snap.Workers[i]
		judged, isTrans, isPer, headSlow := false, false, false, false
		if t := means[i][trans]; !math.IsNaN(t) {
			judged = true
			isTrans = straggles(t, cnt[trans], sum[trans], c.Lambda)
			st.RatioTrans = t * float64(cnt[trans]) / sum[trans]
		}
		if t := means[i][per]; !math.IsNaN(t) {
			judged = true
			isPer = straggles(t, cnt[per], sum[per], c.Lambda)
			st.RatioPer = t * float64(cnt[per]) / sum[per]
		}
		nowSlow := false
		if t := heads[i]; !math.IsNaN(t) && cnt[per] > 0 {
			headSlow = straggles(t, cnt[per], sum[per], c.Lambda)
			st.RatioHead = t * float64(cnt[per]) / sum[per]
		}
		if t := nows[i]; !math.IsNaN(t) {
			if cnt[trans] > 0 {
				nowSlow = straggles(t, cnt[trans], sum[trans], c.Lambda)
				st.RatioNow = t * float64(cnt[trans]) / sum[trans]
			} else if cnt[per] > 0 {
				nowSlow = straggles(t, cnt[per], sum[per], c.Lambda)
				st.RatioNow = t * float64(cnt[per]) / sum[per]
			}
		}
		// Persistent: slow over the long window as a whole and at both of
		// its ends — now and at its start (the head) — so that a slowness
		// shorter than the long window is transient however deep it is.
		isPer = isPer && nowSlow && headSlow
		switch {
		case isPer:
			st.Class = Persistent
		case isTrans:
			st.Class = Transient
		case judged:
			st.Class = Healthy
		}
	}
}

func (m *Monitor) serverStats(snap *Snapshot, now int64) {
	c := m.cfg
	cut := now - int64(c.LPer)
	n := len(m.serverOrder)
	snap.Servers = make([]ServerStat, n)
	regs := make([]regression, n)
	commMean := make([]float64, n) // seconds; NaN when too few samples
	var commSum, bytesSum float64
	var commCnt, bytesCnt int
	for i, v := range m.serverOrder {
		v.comm.keep(func(s csample) bool { return s.at > cut && m.live(s) })
		v.purged = m.forgets
		v.busy.keep(func(s busySample) bool { return s.at > cut })
		st := &snap.Servers[i]
		st.Node = v.name
		st.LastAt = time.Duration(v.lastAt)

		live := v.comm.live()
		st.Samples = len(live)
		m.xs, m.ys = m.xs[:0], m.ys[:0]
		for _, s := range live {
			m.xs = append(m.xs, float64(s.bytes))
			m.ys = append(m.ys, s.seconds)
		}
		r := regress(m.xs, m.ys)
		if r.n < c.MinSamples {
			r.kind = NoFit
		}
		regs[i] = r
		st.Model = r.kind
		commMean[i] = math.NaN()
		if r.n > 0 {
			st.CommPer = time.Duration(r.ybar * 1e9)
		}
		if r.n > 0 && r.n >= c.MinSamples {
			commMean[i] = r.ybar
			commSum += r.ybar
			commCnt++
		}
		if r.kind != NoFit {
			st.Alpha, st.Beta = r.alpha, r.beta
			snap.Profiled++
			bytesSum += r.xbar * float64(r.n)
			bytesCnt += r.n
		}

		busy := v.busy.live()
		st.BusySamples = len(busy)
		if len(busy) > 0 {
			var b float64
			for _, s := range busy {
				b += s.seconds
			}
			st.BusyPer = time.Duration(b / float64(len(busy)) * 1e9)
		}
	}
	if commCnt > 0 {
		snap.MeanComm = time.Duration(commSum / float64(commCnt) * 1e9)
	}
	for i := range snap.Servers {
		st := &snap.Servers[i]
		if t := commMean[i]; !math.IsNaN(t) {
			st.Ratio = t * float64(commCnt) / commSum
			st.Class = Healthy
			if straggles(t, commCnt, commSum, c.Lambda) {
				st.Class = Persistent
			}
		}
	}
	if snap.Profiled == 0 {
		return
	}

	switch {
	case c.ModelBytes > 0:
		snap.PredBytes = float64(c.ModelBytes) / float64(snap.Profiled)
	case bytesCnt > 0:
		snap.PredBytes = bytesSum / float64(bytesCnt)
	}
	s := snap.PredBytes
	preds := make([]Pred, 0, snap.Profiled)
	index := make([]int, 0, snap.Profiled) // preds[k] is server index[k]
	var speeds []float64
	for i := range snap.Servers {
		p, ok := regs[i].predict(s)
		if !ok {
			continue
		}
		st := &snap.Servers[i]
		st.PredMean, st.PredSEM = p.Mean, p.SEM
		st.Lower, st.Upper = p.Lower(), p.Upper()
		if p.Mean > 0 && s > 0 {
			st.Speed = s / p.Mean
			speeds = append(speeds, st.Speed)
		}
		preds = append(preds, p)
		index = append(index, i)
	}
	snap.SpeedVariance = SpeedVariance(speeds)
	for _, k := range SuperiorSet(preds) {
		st := &snap.Servers[index[k]]
		st.Superior = true
		snap.Superior = append(snap.Superior, st.Node)
	}
	snap.ScaleOut = float64(len(snap.Superior)) < c.ScaleThreshold*float64(snap.Profiled)
}
