package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/runtime/allreduce"
	"github.com/kelpie/kelpie/runtime/model"
)

// Allreduce is a worker's allreduce group (cluster.exchange ring or rat).
type Allreduce struct {
	// Group connects the worker to the other members (the caller owns
	// it); Members are the workers it starts with. An added worker
	// (Await) starts with none: it waits for the batch split that takes it
	// in and joins at that split's iteration.
	Group   *allreduce.Group
	Members []int
	Await   bool
	// Optim is the job's optimizer and learning-rate schedule; Init the
	// dense tensors' initial values (the same on every worker).
	Optim optim.Config
	Init  [][]float32
	// RegroupTimeout bounds how long the worker waits for the members to
	// form a new mesh after one broke (a member restarted); default 2 min.
	RegroupTimeout time.Duration
}

// reducer is a worker's side of an allreduce step: it lays the gradient's
// dense tensors end to end, sums them with the other members along the
// group's plan, and applies the job's optimizer to the worker's own
// parameters.
//
// Members change at iteration boundaries. A planned change (workers added
// or removed: a batch split that gives some workers nothing, or a new one
// something) forms a new mesh at the split's iteration. A mesh that breaks
// mid-exchange (a member was killed and restarts) is formed again by the
// members that are left, the restarted one joining; then the members agree
// on where the job is (sync): the state of a member that completed the
// most iterations — parameters, optimizer state, whether data is left — is
// copied to all, and an exchange that no member completed runs again.
// Members never differ by more than one iteration: none starts iteration
// t+1 before every member's gradient of t has reached it.
type reducer struct {
	cfg   *Allreduce
	opt   *allreduce.Optimizer
	lens  []int
	flat  []float32 // the gradient, then one flag: this worker has data for the next iteration
	group *allreduce.Group
	// more says whether any member has data for the next iteration: all
	// go on (those without data with a zero gradient) until none has.
	more bool
	// next is a membership change to make before the exchange of
	// iteration next.at.
	next *regroup
	// done is the last iteration whose sum this worker has applied (-1:
	// none).
	done int64
	// Since the last report.
	spent       time.Duration
	sent, cross int64
}

type regroup struct {
	at      int64
	members []int
}

func newReducer(m model.Model, cfg *Allreduce) (*reducer, error) {
	var lens []int
	total := 0
	for _, t := range m.Tensors() {
		if t.Sparse {
			return nil, fmt.Errorf("allreduce: tensor %s is sparse; allreduce sums dense tensors only (use exchange ps)", t.Name)
		}
		lens = append(lens, t.Len())
		total += t.Len()
	}
	switch {
	case cfg.Group == nil:
		return nil, fmt.Errorf("allreduce: no group")
	case len(cfg.Members) == 0 && !cfg.Await:
		return nil, fmt.Errorf("allreduce: no members to start with")
	case len(cfg.Init) != len(lens):
		return nil, fmt.Errorf("allreduce: %d initial tensors for a model of %d", len(cfg.Init), len(lens))
	}
	for i, n := range lens {
		if len(cfg.Init[i]) != n {
			return nil, fmt.Errorf("allreduce: initial tensor %d has %d values; want %d", i, len(cfg.Init[i]), n)
		}
	}
	if err := cfg.Optim.Validate(); err != nil {
		return nil, err
	}
	if cfg.RegroupTimeout <= 0 {
		cfg.RegroupTimeout = 2 * time.Minute
	}
	return &reducer{cfg: cfg, opt: allreduce.NewOptimizer(cfg.Optim, lens), lens: lens, flat: make([]float32, total+1),
		group: cfg.Group, done: -1}, nil
}

// initParams returns the worker's own copy of the initial parameters.
func (r *reducer) initParams(m model.Model) *model.Params {
	p := m.NewParams()
	for i, d := range r.cfg.Init {
		copy(p.Dense[i], d)
	}
	return p
}

// joinAllreduce puts the worker into its group and returns the iteration
// it trains first. A worker the job starts with (or one restarted) joins
// the members it was given and takes the group's state; an added worker
// first waits for the batch split that takes it in.
func (w *Worker) joinAllreduce(ctx context.Context) (int64, error) {
	r := w.ar
	members, at := r.cfg.Members, int64(-1)
	if r.cfg.Await {
		if w.cfg.Report != nil {
			// Tell the scheduler the worker is up: it sends the split then.
			w.cfg.Report(Report{})
		}
		var err error
		if members, at, err = w.awaitSplit(ctx); err != nil {
			return 0, err
		}
	}
	if err := r.regroup(ctx, members, w.params); err != nil {
		return 0, err
	}
	if at >= 0 && r.done+1 != at {
		return 0, fmt.Errorf("worker %d: joined at iteration %d, but the group is at %d", w.cfg.Index, at, r.done+1)
	}
	return r.done + 1, nil
}

// awaitSplit waits for a batch split that gives this worker samples, and
// returns its members and iteration (the split stays pending: it applies
// at that iteration as usual).
func (w *Worker) awaitSplit(ctx context.Context) ([]int, int64, error) {
	for {
		w.drain()
		for _, c := range w.pending {
			if w.cfg.Index < len(c.Local) && c.Local[w.cfg.Index] > 0 {
				return positive(c.Local), c.At, nil
			}
		}
		if w.cfg.Commands == nil {
			return nil, 0, fmt.Errorf("worker %d: added to an allreduce job, but no command can take it in", w.cfg.Index)
		}
		select {
		case c, ok := <-w.cfg.Commands:
			if !ok {
				w.cfg.Commands = nil
				continue
			}
			w.pending = append(w.pending, c)
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// positive lists the workers a split gives samples: an allreduce group's
// members.
func positive(local []int) []int {
	var out []int
	for i, b := range local {
		if b > 0 {
			out = append(out, i)
		}
	}
	return out
}

// split takes a batch split that applies from iteration at: when it
// changes who has samples, the group changes before that iteration's
// exchange.
func (r *reducer) split(at int64, local []int) {
	members := positive(local)
	cur := r.group.Members()
	if r.next != nil {
		cur = r.next.members
	}
	if !slices.Equal(members, cur) {
		r.next = &regroup{at: at, members: members}
	}
}

// step sums grad (this worker's share of iteration t's gradient, already
// divided by the global batch) across the members and applies the
// optimizer at iteration t's learning rate. more says whether this worker
// has data for iteration t+1; r.more then says whether any member has.
func (r *reducer) step(ctx context.Context, t int64, params, grad *model.Params, more bool) error {
	if n := r.next; n != nil && t >= n.at {
		r.next = nil
		if err := r.regroup(ctx, n.members, params); err != nil {
			return err
		}
	}
	for {
		off := 0
		for _, d := range grad.Dense {
			off += copy(r.flat[off:], d)
		}
		r.flat[off] = 0
		if more {
			r.flat[off] = 1
		}
		sent0, cross0 := r.group.Sent(), r.group.CrossBytes()
		t0 := time.Now()
		err := r.group.Run(ctx, r.flat)
		r.spent += time.Since(t0)
		r.sent += r.group.Sent() - sent0
		r.cross += r.group.CrossBytes() - cross0
		if err == nil {
			off = 0
			for _, d := range grad.Dense {
				off += copy(d, r.flat[off:])
			}
			r.more = r.flat[off] > 0
			r.opt.Step(t, params.Dense, grad.Dense)
			r.done = t
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		// The mesh broke: form it again with the same members and agree
		// on where the job is.
		if rerr := r.regroup(ctx, r.group.Members(), params); rerr != nil {
			return fmt.Errorf("the exchange of iteration %d failed (%v) and the group did not form again: %w", t, err, rerr)
		}
		if r.done >= t {
			return nil // a member had completed iteration t: its state is ours
		}
	}
}

// regroup forms a mesh of members and syncs the state, again and again
// while a member fails meanwhile (one restarting), for up to
// RegroupTimeout.
func (r *reducer) regroup(ctx context.Context, members []int, params *model.Params) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RegroupTimeout)
	defer cancel()
	for {
		err := r.group.Form(ctx, members)
		if err == nil {
			err = r.sync(ctx, params)
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
}

// sync makes every member's state that of the member that has completed
// the most iterations (the first such by index): first every member's
// count of completed iterations is summed into one vector, then that
// member's parameters, optimizer state and flags go to all (the others
// add zeros, so the sum is its values exactly).
func (r *reducer) sync(ctx context.Context, params *model.Params) error {
	g := r.group
	n := len(g.Members())
	done := make([]float32, 2*n)
	hi, lo := split24(r.done + 1)
	done[2*g.Pos()], done[2*g.Pos()+1] = hi, lo
	if err := g.Run(ctx, done); err != nil {
		return err
	}
	best, root := int64(-1), 0
	for k := range n {
		if d := join24(done[2*k], done[2*k+1]) - 1; d > best {
			best, root = d, k
		}
	}
	if best < 0 {
		// No member has completed an iteration (every member sees the
		// same sum, so all return here): every state is the initial one
		// (the job's Init, a fresh optimizer, no flag), and copying it
		// would only send twice the model across the mesh.
		return nil
	}
	vecs := append(slices.Clone(params.Dense), r.opt.Vectors()...)
	size := 5 // steps (2), done (2), more (1)
	for _, v := range vecs {
		size += len(v)
	}
	state := make([]float32, size)
	if g.Pos() == root {
		off := 0
		for _, v := range vecs {
			off += copy(state[off:], v)
		}
		state[off], state[off+1] = split24(r.opt.Steps())
		state[off+2], state[off+3] = split24(r.done + 1)
		if r.more {
			state[off+4] = 1
		}
	}
	if err := g.Run(ctx, state); err != nil {
		return err
	}
	off := 0
	for _, v := range vecs {
		off += copy(v, state[off:])
	}
	r.opt.SetSteps(join24(state[off], state[off+1]))
	r.done = join24(state[off+2], state[off+3]) - 1
	r.more = state[off+4] > 0
	return nil
}

// split24 writes a non-negative count below 2^48 as two float32 values
// that hold it exactly (and that a sum with zeros leaves alone).
func split24(x int64) (float32, float32) { return float32(x >> 24), float32(x & (1<<24 - 1)) }

func join24(hi, lo float32) int64 { return int64(hi)<<24 | int64(lo) }

// take returns and resets the counters since the last report.
func (r *reducer) take() (time.Duration, int64, int64) {
	d, s, c := r.spent, r.sent, r.cross
	r.spent, r.sent, r.cross = 0, 0, 0
	return d, s, c
}
