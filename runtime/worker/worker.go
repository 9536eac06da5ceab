// Package worker is kelpie's training worker: it iterates fetch batch →
// forward/backward → push gradients → pull parameters against the job's
// parameter servers, with its own local batch size, and measures what the
// scheduler needs: batch processing time (BPT) and, per server, the time and
// bytes of each exchange.
package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/diverge"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/wire"
)

// Config is what a worker needs to train.
type Config struct {
	Index       int
	Model       model.Model
	Train, Test data.Dataset
	Plan        job.Plan
	Table       blocks.Table
	Addrs       []string // server index -> address
	Sync        syncmodel.Kind
	Start       time.Time // the job's time zero
	Straggler   straggler.Schedule
	Seed        int64
	ReportEvery int               // iterations between reports (default 10)
	Report      func(Report) bool // returns false to stop the worker
	// Source gives the worker its samples (the data-shard service); nil
	// follows Plan's static split of every global batch.
	Source Source
	// Commands delivers actions to apply at an iteration boundary; each is
	// acknowledged through Ack once applied (or refused).
	Commands <-chan Command
	Ack      func(Ack)
	// Conn says how to reach the servers: the transport (tcp by default)
	// and the data plane's credentials.
	Conn psclient.Options
	// Allreduce, when set, replaces the parameter servers (cluster.exchange
	// ring or rat): Addrs and Table are unused, the worker keeps its own
	// parameters, sums gradients with the other workers and applies the
	// optimizer itself.
	Allreduce *Allreduce
}

// Command is an action for the worker to apply at an iteration boundary.
type Command struct {
	ID    string
	Local []int // ADJUST_BS: every worker's new local batch size, by index
	At    int64 // the iteration from which it applies; an earlier one applies at the next boundary
	// A new block table (reassignment, a server added or removed): pushes
	// from iteration At on follow it. Addrs are its servers' addresses
	// ("" for a removed server).
	Table *blocks.Table
	Addrs []string
	// Accum (with Local) is every worker's gradient-accumulation count
	// (AntDT-DD): a worker computes its Local[i] samples as Accum[i]
	// micro-batches. Missing entries mean 1.
	Accum []int
	// LRScale multiplies this worker's gradient from At on (ADJUST_LR); 0
	// leaves it as it is.
	LRScale float64
	// Leave takes this worker out of the job at iteration At (REMOVE_WORKER):
	// it pushes the iterations before At, hands back the shard it has
	// started and leaves the servers' barriers.
	Leave bool
}

// Ack reports what became of a Command.
type Ack struct {
	ID      string
	Applied int64 // the iteration from which it applies
	Err     error
}

// Comm is one exchange with one server.
type Comm struct {
	Server  int
	Bytes   int64   // pushed and pulled
	Pulled  int64   // of which pulled (server to worker)
	Seconds float64 // not counting the time the pull condition held the pull
	Held    float64 // the time the pull condition held it
}

// Report is what a worker tells its agent every ReportEvery iterations.
type Report struct {
	Iteration int64 // iterations completed
	Samples   int64 // samples trained on so far
	BatchSize int
	BPT       []time.Duration // per iteration, less the time held by pull conditions
	Wait      []time.Duration // per iteration, the time held by pull conditions
	Compute   time.Duration   // summed compute time since the last report
	Comm      []Comm
	// PullComm are the pulls outside an iteration's push-pull since the
	// last report (the first pull, prefetched rows, a rejoin): counted in
	// the bytes that crossed regions, not in the iterations' timings.
	PullComm []Comm
	Loss     float64 // mean training loss since the last report
	// Allreduce only: the time spent summing gradients since the last
	// report, and the bytes this worker sent for it (all of them, and
	// those that crossed a region boundary).
	Reduce     time.Duration
	ReduceSent int64
	CrossSent  int64
	// Split is where the iterations since the last report spent their
	// time (the scheduler names a straggler's cause from it).
	Split Split
}

// Split is wall-clock time per phase, summed over Iterations iterations,
// measured around each phase with the monotonic clock. Compute is the
// gradient (a torch job's Python step) with any injected pause or compute
// delay; Data the preparation of the next batch; Push and Pull the
// exchange with the servers less the time the pull condition held it,
// split between the two directions by the bytes each way (one round trip
// carries both); Wait the time the pull condition held it; Other the rest
// of the iteration (commands, shard reports, table changes).
type Split struct {
	Iterations                             int
	Compute, Data, Push, Pull, Wait, Other time.Duration
}

// add adds one iteration's phases; other is what the iteration's time
// (total, less wait) leaves after the named phases.
func (s *Split) add(total, compute, data, exchange, wait time.Duration, pushed, pulled int64) {
	comm := max(exchange-wait, 0)
	push := comm / 2
	if pushed+pulled > 0 {
		push = time.Duration(float64(comm) * float64(pushed) / float64(pushed+pulled))
	}
	s.Iterations++
	s.Compute += compute
	s.Data += data
	s.Push += push
	s.Pull += comm - push
	s.Wait += wait
	s.Other += max(total-wait-compute-data-comm, 0)
}

// Summary is the outcome of Run.
type Summary struct {
	Iterations int64
	Samples    int64
	MeanBPT    time.Duration
	Left       bool  // the worker was removed (Command.Leave) before the data ran out
	Dropped    int64 // iterations whose gradients the servers discarded (backup workers)
}

// Worker trains one share of the job.
type Worker struct {
	cfg   Config
	conns []*psclient.Conn

	dense     [][]int // server -> dense block IDs it holds
	sparseT   int     // index of the sparse tensor, -1 if none
	rowDim    int
	params    *model.Params
	grad      *model.Params
	pushBuf   [][]float32 // server -> push payload
	pullComm  []Comm      // pulls since the last report (Report.PullComm)
	rng       *rand.Rand
	sampler   *sampler
	batch     *data.Batch
	nextBatch *data.Batch
	idx       []int
	pending   []Command
	leaveAt   int64 // the iteration the worker leaves at (-1: it stays)
	accum     int   // micro-batches per iteration (gradient accumulation)
	lrScale   float32
	micro     data.Batch
	microGrad *model.Params
	dropped   bool // the servers discarded the last push
	ar        *reducer
	more      bool // the worker has data for the iteration after the one exchanging
}

// New connects to the job's servers.
func New(cfg Config) (*Worker, error) {
	if cfg.ReportEvery <= 0 {
		cfg.ReportEvery = 10
	}
	w := &Worker{cfg: cfg, sparseT: -1, rowDim: 1, leaveAt: -1, accum: 1, lrScale: 1,
		rng:     rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(cfg.Index)+1)),
		sampler: newSampler(cfg.Plan), batch: &data.Batch{}, nextBatch: &data.Batch{}}
	for i, t := range cfg.Model.Tensors() {
		if t.Sparse {
			w.sparseT, w.rowDim = i, t.Cols
		}
	}
	if cfg.Allreduce != nil {
		r, err := newReducer(cfg.Model, cfg.Allreduce)
		if err != nil {
			return nil, fmt.Errorf("worker %d: %v", cfg.Index, err)
		}
		w.ar, w.params, w.grad = r, r.initParams(cfg.Model), cfg.Model.NewParams()
		return w, nil
	}
	w.setTable(cfg.Table)
	for _, a := range cfg.Addrs {
		if a == "" {
			w.conns = append(w.conns, nil) // a removed server
			continue
		}
		c, err := psclient.DialWith(context.Background(), a, cfg.Conn)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.conns = append(w.conns, c)
	}
	w.params = cfg.Model.NewParams()
	w.grad = cfg.Model.NewParams()
	if sh, ok := cfg.Model.(model.Shared); ok {
		w.params, w.grad = sh.Shared()
	}
	return w, nil
}

func (w *Worker) setTable(t blocks.Table) {
	w.cfg.Table = t
	w.dense = make([][]int, t.Servers)
	w.pushBuf = make([][]float32, t.Servers)
	for id, b := range t.Blocks {
		if !b.Sparse {
			r := t.ServerOf[id]
			w.dense[r] = append(w.dense[r], id)
		}
	}
}

// Close ends the connections.
func (w *Worker) Close() {
	for _, c := range w.conns {
		if c != nil {
			c.Close()
		}
	}
	w.conns = nil
}

// rowsByServer splits sorted keys by the server that holds them; pos[r] are
// the keys' positions in keys.
func (w *Worker) rowsByServer(keys []uint64) (byServer [][]uint64, pos [][]int) {
	n := w.cfg.Table.Servers
	byServer, pos = make([][]uint64, n), make([][]int, n)
	for i, k := range keys {
		b := w.cfg.Table.SparseBlock(w.sparseT, k)
		if b < 0 {
			continue
		}
		r := w.cfg.Table.ServerOf[b]
		byServer[r] = append(byServer[r], k)
		pos[r] = append(pos[r], i)
	}
	return byServer, pos
}

func u32s(ids []int) []uint32 {
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// live counts the connections of servers still in the job.
func live(conns []*psclient.Conn) int {
	n := 0
	for _, c := range conns {
		if c != nil {
			n++
		}
	}
	return n
}

// pull reads the parameters (and the sparse rows keys) outside an
// iteration's push-pull, and keeps its comm for the next report.
func (w *Worker) pull(progress int64, keys []uint64) error {
	comms, _, err := w.exchange(pspb.Op_OP_PULL, progress, keys)
	w.pullComm = append(w.pullComm, comms...)
	return err
}

// exchange runs one request per server concurrently. push selects a push of
// the current gradient; pullKeys are the sparse rows to read back (sorted).
// It writes the pulled values into w.params and returns per-server comm and
// the smallest version the servers answered with.
func (w *Worker) exchange(op pspb.Op, progress int64, pullKeys []uint64) ([]Comm, int64, error) {
	n := len(w.conns)
	var pushRows, pullRows [][]uint64
	var pullPos [][]int
	if w.sparseT >= 0 {
		if op != pspb.Op_OP_PULL {
			pushRows, _ = w.rowsByServer(w.grad.Sparse.Keys)
		}
		pullRows, pullPos = w.rowsByServer(pullKeys)
		w.params.Sparse.Keys = append(w.params.Sparse.Keys[:0], pullKeys...)
		w.params.Sparse.Vals = resize(w.params.Sparse.Vals, len(pullKeys)*w.rowDim)
	}
	comms := make([]Comm, n)
	versions := make([]int64, n)
	drops := make([]bool, n)
	errs := make([]error, n)
	// One failed server fails the whole exchange at once: waiting on the
	// others (a pull held by a barrier that will never complete) would
	// hang the worker instead of letting its agent restart it.
	abort := make(chan struct{})
	var abortOnce sync.Once
	// With one server there is no other to fail: its wait needs no abort,
	// and without one the waiting goroutine reads the answer from the
	// connection itself (psclient's direct read).
	waitAbort := abort
	if live(w.conns) == 1 {
		waitAbort = nil
	}
	var wg sync.WaitGroup
	for r := range n {
		if w.conns[r] == nil {
			continue // a removed server
		}
		req := &pspb.PSRequest{Op: op, Worker: int32(w.cfg.Index), Progress: progress,
			Blocks: u32s(w.dense[r]), AssignmentVersion: w.cfg.Table.Version}
		var payload [][]byte // the push's pieces, for the framed transport
		if op != pspb.Op_OP_PULL {
			framed := w.conns[r].Framed()
			buf := w.pushBuf[r][:0]
			for _, id := range w.dense[r] {
				b := w.cfg.Table.Blocks[id]
				g := w.grad.Dense[b.Tensor][b.Offset : b.Offset+b.Length]
				if framed {
					payload = append(payload, wire.AsBytes(g)) // written from the gradient itself
				} else {
					buf = append(buf, g...)
				}
			}
			if pushRows != nil {
				req.RowKeys = pushRows[r]
				buf = appendRows(buf, w.grad.Sparse, pushRows[r], w.rowDim)
			}
			w.pushBuf[r] = buf
			if framed {
				payload = append(payload, wire.AsBytes(buf))
			} else {
				req.Data = wire.AsBytes(buf)
			}
		}
		if pullRows != nil {
			req.PullRowKeys = pullRows[r]
		}
		if op == pspb.Op_OP_PUSH_PULL && len(req.Blocks) == 0 && len(req.RowKeys) == 0 && len(req.PullRowKeys) == 0 {
			// Nothing of this server is needed, but its barrier still counts
			// the worker's progress.
			req.NoReplyData = true
		}
		wg.Add(1)
		go func(r int, req *pspb.PSRequest, payload [][]byte) {
			defer wg.Done()
			sent := int64(len(req.Data))
			for _, p := range payload {
				sent += int64(len(p))
			}
			t0 := time.Now()
			call, err := w.conns[r].StartV(req, payload, w.pullInto(r, req))
			var resp *pspb.PSResponse
			var inPlace bool
			if err == nil {
				resp, inPlace, err = call.Wait(waitAbort)
			}
			if err != nil {
				errs[r] = fmt.Errorf("server %d (%s): %w", r, w.cfg.Addrs[r], err)
				abortOnce.Do(func() { close(abort) })
				return
			}
			got := int64(len(resp.Data))
			if inPlace {
				got = int64(w.pullBytes(req))
			}
			comms[r] = Comm{Server: r, Bytes: sent + got, Pulled: got, Held: resp.HeldSeconds,
				Seconds: max(time.Since(t0).Seconds()-resp.HeldSeconds, 0)}
			versions[r], drops[r] = resp.Version, resp.Dropped
			if !inPlace {
				errs[r] = w.absorb(r, req, resp, pullPos)
				wire.Recycle(resp.Data) // copied into the parameters
			}
		}(r, req, payload)
	}
	wg.Wait()
	minV := int64(-1)
	var out []Comm
	var first error
	for _, err := range errs {
		if err != nil && (first == nil || strings.Contains(first.Error(), "abandoned")) {
			first = err
		}
	}
	if first != nil {
		return nil, 0, first
	}
	w.dropped = false
	for r := range n {
		if w.conns[r] == nil {
			continue
		}
		w.dropped = w.dropped || drops[r]
		out = append(out, comms[r])
		if minV < 0 || versions[r] < minV {
			minV = versions[r]
		}
	}
	return out, minV, nil
}

// pullInto is where a pull's values go when they can be read straight into
// the parameters: the dense blocks' slices, in request order (nil for a
// request with sparse rows, whose values absorb scatters).
func (w *Worker) pullInto(r int, req *pspb.PSRequest) [][]byte {
	if req.Op == pspb.Op_OP_PUSH || req.NoReplyData || len(req.PullRowKeys) > 0 || len(req.Blocks) == 0 {
		return nil
	}
	dst := make([][]byte, 0, len(req.Blocks))
	for _, id := range req.Blocks {
		b := w.cfg.Table.Blocks[id]
		dst = append(dst, wire.AsBytes(w.params.Dense[b.Tensor][b.Offset:b.Offset+b.Length]))
	}
	return dst
}

// pullBytes is the size of a pull's values.
func (w *Worker) pullBytes(req *pspb.PSRequest) int {
	n := 0
	for _, id := range req.Blocks {
		n += int(w.cfg.Table.Blocks[id].Length)
	}
	return 4 * (n + len(req.PullRowKeys)*w.rowDim)
}

// absorb copies one server's pulled values into the worker's parameters.
// Servers own disjoint blocks and rows, so absorbs run concurrently.
func (w *Worker) absorb(r int, req *pspb.PSRequest, resp *pspb.PSResponse, pullPos [][]int) error {
	if req.NoReplyData {
		return nil
	}
	vals := wire.AsFloats(resp.Data)
	want := 0
	for _, id := range req.Blocks {
		want += int(w.cfg.Table.Blocks[id].Length)
	}
	want += len(req.PullRowKeys) * w.rowDim
	if len(vals) != want {
		return fmt.Errorf("server %d answered %d values; want %d", r, len(vals), want)
	}
	off := 0
	for _, id := range req.Blocks {
		b := w.cfg.Table.Blocks[id]
		off += copy(w.params.Dense[b.Tensor][b.Offset:b.Offset+b.Length], vals[off:])
	}
	if pullPos != nil {
		for j, p := range pullPos[r] {
			copy(w.params.Sparse.Vals[p*w.rowDim:(p+1)*w.rowDim], vals[off+j*w.rowDim:])
		}
	}
	return nil
}

func appendRows(dst []float32, sp model.Sparse, keys []uint64, dim int) []float32 {
	// keys is a sorted subsequence of sp.Keys.
	j := 0
	for _, k := range keys {
		for sp.Keys[j] != k {
			j++
		}
		dst = append(dst, sp.Vals[j*dim:(j+1)*dim]...)
	}
	return dst
}

func resize(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// fill gathers the worker's batch of iteration t into b; false when the
// worker has no more data.
func (w *Worker) fill(b *data.Batch, t int64) (bool, error) {
	if w.leaveAt >= 0 && t >= w.leaveAt {
		w.cfg.Train.Fill(b, w.idx[:0])
		return false, nil
	}
	if w.cfg.Source != nil {
		n := w.cfg.Plan.LocalOf(t, w.cfg.Index)
		idx, more, err := w.cfg.Source.Next(w.idx[:0], t, n)
		if err != nil {
			return false, fmt.Errorf("worker %d: data: %v", w.cfg.Index, err)
		}
		w.idx = idx
		w.cfg.Train.Fill(b, w.idx)
		return more, nil
	}
	if t >= w.cfg.Plan.Iterations() {
		w.cfg.Train.Fill(b, w.idx[:0])
		return false, nil
	}
	from, to := w.cfg.Plan.Slice(w.cfg.Index, t)
	w.idx = w.sampler.Indexes(w.idx[:0], from, to)
	w.cfg.Train.Fill(b, w.idx)
	return true, nil
}

// preparer is a model that can get a batch ready ahead of its step, while
// the worker exchanges the previous one's gradient (a torch model's child
// collates it). Built-in models compute on the batch as it is.
type preparer interface {
	Prepare(b *data.Batch)
}

// stepComputer is a model that measures its last gradient's own compute
// apart from the call around it (a torch model: its child's forward and
// backward, without the round trip to the child). A cpu-sleep straggler
// stretches that, not the call: a competitor for the CPU slows the model's
// arithmetic, and a slowed DDP rank, the torch side's baseline, stretches
// its forward and backward only.
type stepComputer interface {
	StepCompute() time.Duration
}

// ownCompute is the compute of a gradient call that took measured on a
// batch of n samples: the model's own figure where it has one.
func ownCompute(m model.Model, measured time.Duration, n int) time.Duration {
	if sc, ok := m.(stepComputer); ok && n > 0 {
		return sc.StepCompute()
	}
	return measured
}

func (w *Worker) keys(b *data.Batch) []uint64 {
	if w.sparseT < 0 || b.N == 0 {
		return nil
	}
	return w.cfg.Model.SparseKeys(b, nil)
}

// Run trains until the data runs out (the plan's last iteration, or no
// shard left to fetch), the context ends, or Report asks to stop. It then
// leaves the servers' barriers, so that the workers still training are not
// held waiting for it.
func (w *Worker) Run(ctx context.Context) (Summary, error) {
	// The initial pull also tells where the job is: a restarted worker
	// resumes at the servers' version (its in-flight iteration is
	// recomputed; pushes the servers already counted are ignored as
	// duplicates).
	start, err := w.probe()
	if err != nil {
		return Summary{}, fmt.Errorf("worker %d: initial pull: %v", w.cfg.Index, err)
	}
	if w.ar != nil {
		// Where the job is comes from the group (a restarted or added
		// worker takes its state).
		if start, err = w.joinAllreduce(ctx); err != nil {
			return Summary{}, err
		}
	}
	start = max(start, 0)
	if w.cfg.Source == nil {
		start = min(start, w.cfg.Plan.Iterations())
	}
	// A table change that the job has already passed applies now.
	if err := w.applyTables(start); err != nil {
		return Summary{}, fmt.Errorf("worker %d: new block table: %v", w.cfg.Index, err)
	}
	// A worker added while the job runs joins the barriers from where the
	// job is (for a member this changes nothing).
	if err := w.join(start); err != nil {
		return Summary{}, err
	}
	if err := w.pull(-1, nil); err != nil {
		return Summary{}, fmt.Errorf("worker %d: initial pull: %v", w.cfg.Index, err)
	}
	w.applyCommands(start)
	more, err := w.fill(w.batch, start)
	if err != nil {
		return Summary{}, err
	}
	if keys := w.keys(w.batch); keys != nil {
		if err := w.pull(start-1, keys); err != nil {
			return Summary{}, fmt.Errorf("worker %d: initial pull: %v", w.cfg.Index, err)
		}
	}
	var (
		sum     Summary
		rep     Report
		lossSum float64
		lossN   int
		bptSum  time.Duration
	)
	// send reports the progress since the last report: iterations
	// completed and samples trained so far.
	send := func(iterations, samples int64) bool {
		rep.Iteration, rep.Samples = iterations, samples
		rep.PullComm, w.pullComm = w.pullComm, nil
		if w.ar != nil {
			rep.Reduce, rep.ReduceSent, rep.CrossSent = w.ar.take()
		}
		if lossN > 0 {
			rep.Loss = lossSum / float64(lossN)
		}
		ok := w.cfg.Report == nil || w.cfg.Report(rep)
		rep = Report{BatchSize: rep.BatchSize}
		lossSum, lossN = 0, 0
		return ok
	}
	gb := float32(w.cfg.Plan.GlobalBatch)
	t := start
	for more {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		begin := time.Now()
		if d := w.cfg.Straggler.Pause(time.Since(w.cfg.Start)); d > 0 {
			sleep(ctx, d)
		}
		c0 := time.Now()
		if w.batch.N > 0 {
			loss := w.gradient(gb)
			if !diverge.Finite(loss) {
				// Training diverged: nothing after this is worth pushing.
				return sum, &diverge.Error{Node: spec.WorkerName(w.cfg.Index), Iteration: t, What: diverge.Loss, Value: loss}
			}
			lossSum += loss
			lossN++
		} else {
			for _, d := range w.grad.Dense {
				clear(d)
			}
			w.grad.Sparse.Keys, w.grad.Sparse.Vals = w.grad.Sparse.Keys[:0], w.grad.Sparse.Vals[:0]
		}
		compute := time.Since(c0)
		if d := w.cfg.Straggler.ComputeDelay(time.Since(w.cfg.Start), ownCompute(w.cfg.Model, compute, w.batch.N), w.rng.Float64()); d > 0 {
			sleep(ctx, d)
		}
		computed := time.Since(begin) // with the injected pause and delay: the node's own slowness
		samples := int64(w.batch.N)
		rep.BatchSize = w.cfg.Plan.LocalOf(t, w.cfg.Index)
		next := t + 1
		w.applyCommands(next)
		d0 := time.Now()
		if more, err = w.fill(w.nextBatch, next); err != nil {
			return sum, err
		}
		var pullKeys []uint64
		if more {
			pullKeys = w.keys(w.nextBatch)
			if p, ok := w.cfg.Model.(preparer); ok {
				p.Prepare(w.nextBatch) // made ready while the exchange runs
			}
		}
		loaded := time.Since(d0)
		w.more = more
		x0 := time.Now()
		comms, version, err := w.exchangeFollowing(ctx, pspb.Op_OP_PUSH_PULL, t, pullKeys)
		exchanged := time.Since(x0)
		if err != nil {
			return sum, fmt.Errorf("worker %d: iteration %d: %w", w.cfg.Index, t, err)
		}
		if w.ar != nil {
			// Allreduce workers stop together: one with no data left trains
			// zero gradients while any other has data; a removed one
			// leaves at its iteration.
			more = w.ar.more && (w.leaveAt < 0 || next < w.leaveAt)
		}
		if w.dropped && samples > 0 {
			// The servers completed iteration t without our gradient: its
			// samples are trained again (their shards go back to the queue).
			sum.Dropped++
			if d, ok := w.cfg.Source.(Dropper); ok {
				d.Dropped(t)
			}
			samples = 0
		}
		if w.cfg.Source != nil {
			if f, ok := w.cfg.Source.(Finisher); ok && f.Finishes(t) {
				// Pushed(t) reports shards DONE: the samples that trained
				// them are reported first. A worker killed after the DONE
				// reports would otherwise take the samples of its last
				// iterations out of the job's count, while nobody trains
				// those shards again (the count of a restarted worker
				// starts at its last report).
				if !send(t+1, sum.Samples+samples) {
					return sum, fmt.Errorf("worker %d: stopped by the coordinator", w.cfg.Index)
				}
			}
			if err := w.cfg.Source.Pushed(t); err != nil {
				return sum, fmt.Errorf("worker %d: report shards: %v", w.cfg.Index, err)
			}
			if ro, ok := w.cfg.Source.(Reopener); ok && !more && ro.More() && w.leaveAt < 0 {
				// A shard went back to the queue after it looked empty
				// (a dropped gradient): train it before leaving.
				if more, err = w.fill(w.nextBatch, next); err != nil {
					return sum, err
				}
				if keys := w.keys(w.nextBatch); more && keys != nil {
					if err := w.pull(t, keys); err != nil {
						return sum, fmt.Errorf("worker %d: iteration %d: %v", w.cfg.Index, next, err)
					}
				}
			}
		}
		if err := w.applyTables(next); err != nil {
			return sum, fmt.Errorf("worker %d: new block table: %v", w.cfg.Index, err)
		}
		if more && (w.cfg.Sync == syncmodel.Drop || w.dropped) && version > next {
			// Our gradient was dropped and the servers moved on: rejoin at
			// their version (backup-worker semantics).
			next = version
			if w.cfg.Source == nil {
				if more, err = w.fill(w.nextBatch, next); err != nil {
					return sum, err
				}
			}
			if more {
				if err := w.pull(next-1, w.keys(w.nextBatch)); err != nil {
					return sum, fmt.Errorf("worker %d: rejoin at %d: %v", w.cfg.Index, next, err)
				}
			}
		}
		w.batch, w.nextBatch = w.nextBatch, w.batch
		t = next
		var held float64
		var pushed, pulled int64
		for _, c := range comms {
			held = max(held, c.Held)
			pushed += c.Bytes - c.Pulled
			pulled += c.Pulled
		}
		wait := time.Duration(held * float64(time.Second))
		total := time.Since(begin)
		bpt := max(total-wait, 0)
		rep.Split.add(total, computed, loaded, exchanged, min(wait, exchanged), pushed, pulled)
		sum.Iterations++
		sum.Samples += samples
		bptSum += bpt
		rep.BPT = append(rep.BPT, bpt)
		rep.Wait = append(rep.Wait, wait)
		rep.Compute += compute
		rep.Comm = append(rep.Comm, comms...)
		if sum.Iterations%int64(w.cfg.ReportEvery) == 0 || !more {
			if !send(t, sum.Samples) {
				return sum, fmt.Errorf("worker %d: stopped by the coordinator", w.cfg.Index)
			}
		}
	}
	if w.leaveAt >= 0 && t >= w.leaveAt {
		sum.Left = true
		if r, ok := w.cfg.Source.(Releaser); ok {
			if err := r.Release(); err != nil {
				return sum, fmt.Errorf("worker %d: hand back shards: %v", w.cfg.Index, err)
			}
		}
	}
	if err := w.leave(t - 1); err != nil {
		return sum, err
	}
	if sum.Iterations > 0 {
		sum.MeanBPT = bptSum / time.Duration(sum.Iterations)
	}
	return sum, nil
}

// probe asks every server where it is (V_train) without reading blocks, and
// returns the lowest: the iteration the job is at.
func (w *Worker) probe() (int64, error) {
	if w.ar != nil {
		return 0, nil // allreduce workers start together, at 0
	}
	minV := int64(-1)
	for r, c := range w.conns {
		if c == nil {
			continue
		}
		resp, err := c.Do(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Worker: int32(w.cfg.Index), Progress: -1, NoReplyData: true})
		if err != nil {
			return 0, fmt.Errorf("server %d (%s): %v", r, w.cfg.Addrs[r], err)
		}
		if minV < 0 || resp.Version < minV {
			minV = resp.Version
		}
	}
	return minV, nil
}

// exchangeFollowing is exchange that follows a table change the servers
// made before its command reached the worker: they refuse the request
// whole, the worker switches to the new table and sends it again.
func (w *Worker) exchangeFollowing(ctx context.Context, op pspb.Op, progress int64, pullKeys []uint64) ([]Comm, int64, error) {
	if w.ar != nil {
		if op == pspb.Op_OP_PULL {
			return nil, progress + 1, nil // the worker holds the parameters
		}
		err := w.ar.step(ctx, progress, w.params, w.grad, w.more)
		return nil, progress + 1, err
	}
	comms, version, err := w.exchange(op, progress, pullKeys)
	if staleTable(err) {
		if err = w.awaitTable(ctx, progress); err == nil {
			comms, version, err = w.exchange(op, progress, pullKeys)
		}
	}
	return comms, version, err
}

// staleTable says whether servers refused a request because it follows a
// block table they have left.
func staleTable(err error) bool {
	return err != nil && status.Code(err) == codes.Aborted
}

// tableWait bounds how long a worker waits for a table change's command
// after the servers have switched.
const tableWait = 30 * time.Second

// awaitTable waits for the command of a table change newer than the
// worker's and switches to it for iteration t.
func (w *Worker) awaitTable(ctx context.Context, t int64) error {
	have := w.cfg.Table.Version
	newer := func() bool {
		for _, c := range w.pending {
			if c.Table != nil && c.Table.Version > have {
				return true
			}
		}
		return false
	}
	timeout := time.NewTimer(tableWait)
	defer timeout.Stop()
	w.drain()
	for !newer() {
		if w.cfg.Commands == nil {
			return fmt.Errorf("worker %d: servers moved past table v%d and no command can bring the new one", w.cfg.Index, have)
		}
		select {
		case c, ok := <-w.cfg.Commands:
			if !ok {
				w.cfg.Commands = nil
				continue
			}
			w.pending = append(w.pending, c)
		case <-timeout.C:
			return fmt.Errorf("worker %d: servers moved past table v%d; no new table within %s", w.cfg.Index, have, tableWait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Its switch iteration is at most t (the servers refused t).
	for i := range w.pending {
		if c := &w.pending[i]; c.Table != nil && c.At > t {
			c.At = t
		}
	}
	return w.applyTables(t)
}

// join puts the worker in every server's barrier from iteration from on.
func (w *Worker) join(from int64) error { return w.membership(pspb.Op_OP_JOIN, "join", from) }

// gradient computes the gradient of the current batch into w.grad, in
// w.accum micro-batches whose gradients are summed (gradient accumulation:
// the same gradient, computed in less memory), scaled by the worker's
// learning-rate factor. It returns the batch's mean loss.
func (w *Worker) gradient(gb float32) float64 {
	b := w.batch
	scale := w.lrScale / gb
	k := min(w.accum, b.N)
	if k <= 1 {
		return w.cfg.Model.Grad(w.params, b, w.grad, float32(b.N)*scale)
	}
	if w.microGrad == nil {
		w.microGrad = w.cfg.Model.NewParams()
	}
	var loss float64
	for i := range k {
		from, to := i*b.N/k, (i+1)*b.N/k
		b.Slice(&w.micro, from, to)
		g := w.grad
		if i > 0 {
			g = w.microGrad
		}
		loss += w.cfg.Model.Grad(w.params, &w.micro, g, float32(to-from)*scale) * float64(to-from)
		if i > 0 {
			addParams(w.grad, w.microGrad, w.rowDim)
		}
	}
	return loss / float64(b.N)
}

// leave takes the worker out of every server's barrier after its last
// pushed iteration.
func (w *Worker) leave(last int64) error { return w.membership(pspb.Op_OP_LEAVE, "leave", last) }

// membership sends a JOIN or LEAVE to every server.
func (w *Worker) membership(op pspb.Op, verb string, progress int64) error {
	for r, c := range w.conns {
		if c == nil {
			continue
		}
		if _, err := c.Do(&pspb.PSRequest{Op: op, Worker: int32(w.cfg.Index), Progress: progress}); err != nil {
			return fmt.Errorf("worker %d: %s server %d: %v", w.cfg.Index, verb, r, err)
		}
	}
	return nil
}

// applyCommands takes the commands that have arrived and applies those due
// by iteration next (the next one to fill).
func (w *Worker) applyCommands(next int64) {
	w.drain()
	keep := w.pending[:0]
	for _, c := range w.pending {
		if c.At > next || c.Table != nil {
			keep = append(keep, c) // tables switch after the exchange (applyTables)
			continue
		}
		at := max(c.At, next)
		var err error
		switch {
		case c.Leave:
			w.leaveAt = at
		case c.LRScale > 0:
			w.lrScale = float32(c.LRScale)
		default:
			var plan job.Plan
			if plan, err = w.cfg.Plan.WithSplit(at, c.Local); err == nil {
				w.cfg.Plan = plan
				w.accum = 1
				if w.cfg.Index < len(c.Accum) {
					w.accum = max(c.Accum[w.cfg.Index], 1)
				}
				if w.ar != nil {
					w.ar.split(at, c.Local) // members may change at iteration at
				}
			}
		}
		if w.cfg.Ack != nil {
			w.cfg.Ack(Ack{ID: c.ID, Applied: at, Err: err})
		}
	}
	w.pending = keep
}

// drain moves the commands that have arrived into the pending list.
func (w *Worker) drain() {
	for more := true; more && w.cfg.Commands != nil; {
		select {
		case c, ok := <-w.cfg.Commands:
			if !ok {
				w.cfg.Commands = nil
				more = false
				break
			}
			w.pending = append(w.pending, c)
		default:
			more = false
		}
	}
}

// applyTables switches to a new block table once the iterations before its
// switch have been exchanged under the old one.
func (w *Worker) applyTables(next int64) error {
	w.drain()
	keep := w.pending[:0]
	var err error
	for _, c := range w.pending {
		if c.Table == nil || c.At > next || err != nil {
			keep = append(keep, c)
			continue
		}
		if c.Table.Version <= w.cfg.Table.Version {
			// A restarted worker got this table when it registered.
			if w.cfg.Ack != nil {
				w.cfg.Ack(Ack{ID: c.ID, Applied: next})
			}
			continue
		}
		if w.ar != nil {
			err = fmt.Errorf("worker %d: an allreduce job has no parameter servers to reassign", w.cfg.Index)
		} else {
			err = w.retable(*c.Table, c.Addrs)
		}
		if w.cfg.Ack != nil {
			w.cfg.Ack(Ack{ID: c.ID, Applied: max(c.At, next), Err: err})
		}
	}
	w.pending = keep
	return err
}

// retable follows a new block table: connections are kept for servers that
// stay, opened for new ones and closed for removed ones.
func (w *Worker) retable(t blocks.Table, addrs []string) error {
	old := map[string]*psclient.Conn{}
	for i, c := range w.conns {
		if c != nil {
			old[w.cfg.Addrs[i]] = c
		}
	}
	conns := make([]*psclient.Conn, len(addrs))
	for i, a := range addrs {
		if a == "" {
			continue
		}
		if c, ok := old[a]; ok {
			conns[i] = c
			delete(old, a)
			continue
		}
		c, err := psclient.DialWith(context.Background(), a, w.cfg.Conn)
		if err != nil {
			return err
		}
		conns[i] = c
	}
	for _, c := range old {
		c.Close()
	}
	w.conns, w.cfg.Addrs = conns, append([]string(nil), addrs...)
	w.setTable(t)
	return nil
}

// Evaluate pulls the current parameters and evaluates them on ds in batches.
func (w *Worker) Evaluate(ds data.Dataset, progress int64) (loss, acc float64, err error) {
	const chunk = 1000
	n := ds.Len()
	var b data.Batch
	var lossSum, accSum float64
	idx := make([]int, 0, chunk)
	for from := 0; from < n; from += chunk {
		idx = idx[:0]
		for i := from; i < min(from+chunk, n); i++ {
			idx = append(idx, i)
		}
		ds.Fill(&b, idx)
		if from == 0 || w.sparseT >= 0 {
			if _, _, err := w.exchangeFollowing(context.Background(), pspb.Op_OP_PULL, progress, w.keys(&b)); err != nil {
				return 0, 0, fmt.Errorf("worker %d: evaluation pull: %w", w.cfg.Index, err)
			}
		}
		l, a := w.cfg.Model.Evaluate(w.params, &b)
		lossSum += l * float64(b.N)
		accSum += a * float64(b.N)
	}
	if n == 0 {
		return 0, 0, nil
	}
	return lossSum / float64(n), accSum / float64(n), nil
}

// Params returns the worker's current parameters (for tests).
func (w *Worker) Params() *model.Params { return w.params }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
