package torch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/model"
)

var findMNIST = data.FindMNIST

// Config selects the script a Model runs.
type Config struct {
	Script  string
	Seed    int64 // torch.manual_seed before model(): every process builds the same initial module
	Threads int
	Stderr  io.Writer // the child's output (default os.Stderr)
	// Want, when set, is the tensor list the job was laid out with (the
	// spec's model.tensors): a script that has changed since is refused.
	Want []spec.Tensor
	// Owner, when not 0, asks for a warm start (zygote.go): the child is
	// forked by a zygote that lives as long as process Owner (a worker's
	// agent), started by the first child's worker, so that the worker's
	// restarts skip importing torch and loading the data.
	Owner int
}

// Model is a model.Model whose forward and backward passes run in a child
// python3 process on the user's module. Its parameters and gradients
// (Shared) are shared memory: the worker pulls into them and pushes from
// them. One goroutine at a time, like every model.
type Model struct {
	c       *child
	tensors []model.Tensor
	train   int
	test    int
	sparseT int // index of the sparse tensor, -1 if none
	dim     int // its row width

	dense  *segment // params then grads of the dense tensors
	sparse *segment // rows, row gradients, keys
	old    []*segment
	rows   int // capacity of the sparse segment in rows
	params *model.Params
	grad   *model.Params
	dPar   [][]float32 // shared dense params by tensor (nil for the sparse one)

	req     []byte // the request being encoded
	batched bool   // the child indexes the training set a batch at once (Prepare is not worth a wake-up)
	warm    bool   // a zygote forked the child (zygote.go)
	zygote  int    // and its pid

	python  atomic.Int64 // nanoseconds the child spent in steps
	data    atomic.Int64 // of which collating batches not prepared ahead
	prep    atomic.Int64 // nanoseconds the child spent preparing batches ahead (off the step's path)
	control atomic.Int64 // nanoseconds of the round trips beyond python
	toChild atomic.Int64 // of which from the request's write to the child reading it
	toGo    atomic.Int64 // and from the child's reply to the worker reading it
	steps   atomic.Int64
	preps   atomic.Int64

	lastCompute time.Duration // the last step's forward and backward in the child (StepCompute)
}

var _ model.Model = (*Model)(nil)

// New starts the child on the script, checks its tensors and maps the
// shared memory.
func New(cfg Config) (*Model, error) {
	c, h, err := startChild(startOptions{Mode: "serve", Script: cfg.Script, Seed: cfg.Seed, Threads: cfg.Threads, Stderr: cfg.Stderr, Owner: cfg.Owner})
	if err != nil {
		return nil, err
	}
	m := &Model{c: c, train: h.Train, test: h.Test, sparseT: -1, batched: h.Batched, warm: h.Warm, zygote: h.Zygote}
	for i, t := range h.Tensors {
		m.tensors = append(m.tensors, model.Tensor{Name: t.Name, Rows: t.Rows, Cols: t.Cols, Sparse: t.Sparse})
		if t.Sparse {
			m.sparseT, m.dim = i, t.Cols
		}
	}
	if cfg.Want != nil {
		if err := sameTensors(cfg.Script, cfg.Want, m.tensors); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := m.mapDense(); err != nil {
		m.Close()
		return nil, err
	}
	if m.sparseT >= 0 {
		if err := m.growSparse(4096); err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

// startChild starts a serving child: forked by the owner's zygote when
// there is an owner, else (or when the warm path itself fails, which is
// said on the child's output) as a process of its own.
func startChild(o startOptions) (*child, *hello, error) {
	if o.Owner != 0 {
		c, h, err := startWarm(o)
		var w errWarm
		if !errors.As(err, &w) {
			return c, h, err
		}
		stderr := o.Stderr
		if stderr == nil {
			stderr = os.Stderr
		}
		fmt.Fprintf(stderr, "kelpie: %v; starting the torch child cold\n", err)
	}
	return start(o)
}

// sameTensors checks that the script still has the tensors the job was laid
// out with.
func sameTensors(script string, want []spec.Tensor, got []model.Tensor) error {
	if len(want) != len(got) {
		return fmt.Errorf("torch script %s now has %d parameter tensors; the job was submitted with %d (submit it again)", script, len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if w.Name != g.Name || w.Rows != g.Rows || w.Cols != g.Cols || w.Sparse != g.Sparse {
			return fmt.Errorf("torch script %s: tensor %d is now %s %dx%d (sparse %t); the job was submitted with %s %dx%d (sparse %t) (submit it again)",
				script, i, g.Name, g.Rows, g.Cols, g.Sparse, w.Name, w.Rows, w.Cols, w.Sparse)
		}
	}
	return nil
}

// floats views b as float32s.
func floats(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func (m *Model) mapDense() error {
	n := 0
	for _, t := range m.tensors {
		if !t.Sparse {
			n += t.Len()
		}
	}
	seg, err := newSegment(8 * n)
	if err != nil {
		return err
	}
	m.dense = seg
	all := floats(seg.mem)
	m.params = &model.Params{Dense: make([][]float32, len(m.tensors))}
	m.grad = &model.Params{Dense: make([][]float32, len(m.tensors))}
	off := 0
	for i, t := range m.tensors {
		if t.Sparse {
			continue
		}
		m.params.Dense[i] = all[off : off+t.Len() : off+t.Len()]
		m.grad.Dense[i] = all[n+off : n+off+t.Len() : n+off+t.Len()]
		off += t.Len()
	}
	m.dPar = m.params.Dense
	return m.c.call(map[string]any{"op": "map", "dense": seg.path(), "floats": n}, &reply{})
}

// The sparse segment holds, for up to rows rows: the pulled rows, their
// gradients, and their keys (int64).
func (m *Model) rowVals(seg *segment, rows int) []float32 {
	return floats(seg.mem)[: rows*m.dim : rows*m.dim]
}
func (m *Model) rowGrads(seg *segment, rows int) []float32 {
	return floats(seg.mem)[rows*m.dim : 2*rows*m.dim : 2*rows*m.dim]
}
func (m *Model) rowKeys(seg *segment, rows int) []uint64 {
	b := seg.mem[8*rows*m.dim:]
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), rows)
}

// growSparse maps a sparse segment of at least rows rows. The worker's
// parameters and gradients move to it, keeping the rows they hold; the old
// segment stays mapped until Close (the worker may still hold a slice of it).
func (m *Model) growSparse(rows int) error {
	if rows <= m.rows {
		return nil
	}
	rows = max(rows, 2*m.rows)
	seg, err := newSegment(rows * (8*m.dim + 8))
	if err != nil {
		return err
	}
	if err := m.c.call(map[string]any{"op": "map", "sparse": seg.path(), "rows": rows}, &reply{}); err != nil {
		seg.close()
		return err
	}
	vals, grads := m.rowVals(seg, rows), m.rowGrads(seg, rows)
	m.params.Sparse.Vals = append(vals[:0], m.params.Sparse.Vals...)
	m.grad.Sparse.Vals = append(grads[:0], m.grad.Sparse.Vals...)
	if m.sparse != nil {
		m.old = append(m.old, m.sparse)
	}
	m.sparse, m.rows = seg, rows
	return nil
}

// Shared returns the parameters and gradients in shared memory: a worker
// that uses them pulls straight into what the module computes on and pushes
// straight from what it wrote.
func (m *Model) Shared() (params, grad *model.Params) { return m.params, m.grad }

// Tensors is the module's parameter tensors, by name.
func (m *Model) Tensors() []model.Tensor { return m.tensors }

// Samples is the sizes of the script's training and test sets.
func (m *Model) Samples() (train, test int) { return m.train, m.test }

// NewParams returns zeroed parameters outside the shared memory.
func (m *Model) NewParams() *model.Params {
	p := &model.Params{Dense: make([][]float32, len(m.tensors))}
	for i, t := range m.tensors {
		if !t.Sparse {
			p.Dense[i] = make([]float32, t.Len())
		}
	}
	return p
}

// InitDense returns the module's initial dense values: the script's
// model() built after torch.manual_seed(Config.Seed) (the seed argument is
// that of the job, the same one).
func (m *Model) InitDense(int64) [][]float32 {
	if err := m.c.call(map[string]any{"op": "init"}, &reply{}); err != nil {
		panic(fmt.Sprintf("torch: initial values: %v", err))
	}
	out := make([][]float32, len(m.tensors))
	for i, d := range m.dPar {
		if d != nil {
			out[i] = append([]float32(nil), d...)
		}
	}
	return out
}

// request encodes {"op": op, "set": ..., "idx": [...]} into m.req, without
// the closing brace (the caller adds its fields). By hand: a step's request
// is built every iteration, and this costs no allocation once m.req has
// grown.
func (m *Model) request(op string, b *data.Batch) {
	set := b.Set
	if set == "" {
		set = "train"
	}
	q := append(m.req[:0], `{"op":"`...)
	q = append(q, op...)
	q = append(q, `","set":`...)
	q = appendString(q, set)
	q = append(q, `,"idx":[`...)
	for i, x := range b.Index {
		if i > 0 {
			q = append(q, ',')
		}
		q = strconv.AppendInt(q, int64(x), 10)
	}
	m.req = append(q, ']')
}

// appendString appends s as a JSON string.
func appendString(q []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			j, _ := json.Marshal(s)
			return append(q, j...)
		}
	}
	q = append(q, '"')
	q = append(q, s...)
	return append(q, '"')
}

// Prepare sends the child batch b's indices ahead of its step, without
// waiting: the child collates it while the worker pushes and pulls, and the
// step finds it ready. A model with a sparse table needs none (SparseKeys
// collates the batch as it finds its keys), nor one whose training set the
// child indexes a batch at once (microseconds: not worth waking the child
// for).
func (m *Model) Prepare(b *data.Batch) {
	if m.sparseT >= 0 || m.batched || b.N == 0 {
		return
	}
	m.request("prep", b)
	m.req = append(m.req, '}')
	if err := m.c.send(m.req); err != nil {
		panic(fmt.Sprintf("torch: %v", err))
	}
	m.preps.Add(1)
}

// SparseKeys asks the child which rows of the sparse table batch b touches
// (it runs the forward pass up to the embedding).
func (m *Model) SparseKeys(b *data.Batch, dst []uint64) []uint64 {
	if m.sparseT < 0 {
		return nil
	}
	if b.N == 0 {
		return dst[:0]
	}
	var r reply
	m.request("keys", b)
	m.req = append(m.req, '}')
	if err := m.c.call(m.req, &r); err != nil {
		panic(fmt.Sprintf("torch: %v", err))
	}
	if r.N > m.rows {
		if err := m.growSparse(r.N); err != nil {
			panic(fmt.Sprintf("torch: %v", err))
		}
		m.request("keys", b)
		m.req = append(m.req, '}')
		if err := m.c.call(m.req, &r); err != nil { // now written into the segment
			panic(fmt.Sprintf("torch: %v", err))
		}
	}
	return append(dst[:0], m.rowKeys(m.sparse, m.rows)[:r.N]...)
}

// place puts p's values where the child reads them: nothing to do for the
// shared parameters (the worker pulled straight into them), a copy for
// others (an allreduce worker's, a test's).
func (m *Model) place(p *model.Params) (rows int, err error) {
	if p != m.params {
		for i, d := range m.dPar {
			if d != nil {
				copy(d, p.Dense[i])
			}
		}
	}
	if m.sparseT < 0 {
		return 0, nil
	}
	rows = len(p.Sparse.Keys)
	if err := m.growSparse(rows); err != nil {
		return 0, err
	}
	copy(m.rowKeys(m.sparse, m.rows), p.Sparse.Keys)
	vals := m.rowVals(m.sparse, m.rows)
	if len(p.Sparse.Vals) > 0 && &p.Sparse.Vals[0] != &vals[0] {
		copy(vals, p.Sparse.Vals[:rows*m.dim])
	}
	return rows, nil
}

// Grad runs one training step in the child: forward and backward on batch
// b at p, with scale·gradient written into the shared gradients (copied
// into g when g is not them).
func (m *Model) Grad(p *model.Params, b *data.Batch, g *model.Params, scale float32) float64 {
	rows, err := m.place(p)
	if err != nil {
		panic(fmt.Sprintf("torch: %v", err))
	}
	m.request("step", b)
	m.req = append(m.req, `,"rows":`...)
	m.req = strconv.AppendInt(m.req, int64(rows), 10)
	m.req = append(m.req, `,"scale":`...)
	m.req = strconv.AppendFloat(m.req, float64(scale), 'g', -1, 32)
	m.req = append(m.req, '}')
	var r reply
	t0 := time.Now()
	if err := m.c.call(m.req, &r); err != nil {
		panic(fmt.Sprintf("torch: %v", err))
	}
	t1 := time.Now()
	m.account(t0, t1, &r)
	m.lastCompute = max(seconds(r.Seconds)-seconds(r.Data), 0)
	if m.sparseT >= 0 {
		m.grad.Sparse.Keys = append(m.grad.Sparse.Keys[:0], p.Sparse.Keys...)
		m.grad.Sparse.Vals = m.rowGrads(m.sparse, m.rows)[:rows*m.dim]
	}
	if g != m.grad {
		if len(g.Dense) != len(m.tensors) {
			g.Dense = make([][]float32, len(m.tensors))
		}
		for i, d := range m.grad.Dense {
			if d != nil {
				g.Dense[i] = append(g.Dense[i][:0], d...)
			}
		}
		g.Sparse.Keys = append(g.Sparse.Keys[:0], m.grad.Sparse.Keys...)
		g.Sparse.Vals = append(g.Sparse.Vals[:0], m.grad.Sparse.Vals...)
	}
	return float64(r.Loss)
}

// Evaluate returns the script's loss and metric (accuracy by default) on
// batch b at p.
func (m *Model) Evaluate(p *model.Params, b *data.Batch) (loss, metric float64) {
	if b.N == 0 {
		return 0, 0
	}
	rows, err := m.place(p)
	if err != nil {
		panic(fmt.Sprintf("torch: %v", err))
	}
	m.request("eval", b)
	m.req = append(m.req, `,"rows":`...)
	m.req = strconv.AppendInt(m.req, int64(rows), 10)
	m.req = append(m.req, '}')
	var r reply
	if err := m.c.call(m.req, &r); err != nil {
		panic(fmt.Sprintf("torch: %v", err))
	}
	return float64(r.Loss), float64(r.Metric)
}

// StepCompute is the last Grad's compute in the child: its forward,
// backward and gradient writes, without collating the batch and without
// the round trip to the child. It is what a cpu-sleep straggler stretches
// (runtime/worker), as a slowed DDP rank stretches its forward and backward
// (scripts/torch/ddp_mnist.py): the same slowdown on both sides.
func (m *Model) StepCompute() time.Duration { return m.lastCompute }

// account adds up a step's timing: sent at t0, its reply read at t1.
func (m *Model) account(t0, t1 time.Time, r *reply) {
	rt := t1.Sub(t0)
	py := seconds(r.Seconds)
	m.python.Add(int64(py))
	m.data.Add(int64(seconds(r.Data)))
	m.prep.Add(int64(seconds(r.Prep)))
	m.control.Add(int64(max(rt-py, 0)))
	if r.In > 0 && r.Out > 0 {
		m.toChild.Add(max(r.In-t0.UnixNano(), 0))
		m.toGo.Add(max(t1.UnixNano()-r.Out, 0))
	}
	m.steps.Add(1)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Timing is where a worker's compute time went.
type Timing struct {
	Steps   int64
	Python  time.Duration // forward, backward and writing gradients, in the child
	Data    time.Duration // of Python: collating batches that were not prepared ahead
	Control time.Duration // the rest of the round trips: messages, scheduling
	// Of Control: from writing a step's request to the child reading it,
	// and from the child writing its reply to the worker reading it (the
	// rest is encoding and decoding).
	ToChild, ToWorker time.Duration
	// Prepared batches (Prepare), and the child's time collating them
	// while the worker exchanged (off the steps' path).
	Preps int64
	Prep  time.Duration
}

// Timing returns the time spent so far.
func (m *Model) Timing() Timing {
	return Timing{Steps: m.steps.Load(), Python: time.Duration(m.python.Load()), Data: time.Duration(m.data.Load()),
		Control: time.Duration(m.control.Load()), ToChild: time.Duration(m.toChild.Load()), ToWorker: time.Duration(m.toGo.Load()),
		Preps: m.preps.Load(), Prep: time.Duration(m.prep.Load())}
}

// Pid is the child's process id.
func (m *Model) Pid() int { return m.c.pid() }

// Warm says that the child was forked by a zygote rather than started
// cold (Config.Owner).
func (m *Model) Warm() bool { return m.warm }

// Zygote is the pid of the zygote that forked the child (0: started cold).
func (m *Model) Zygote() int { return m.zygote }

// Close stops the child and unmaps the shared memory.
func (m *Model) Close() error {
	err := m.c.Close()
	m.dense.close()
	m.sparse.close()
	for _, s := range m.old {
		s.close()
	}
	return err
}
