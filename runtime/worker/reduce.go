package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/kelpie/kelpie/runtime/allreduce"
	"github.com/kelpie/kelpie/runtime/model"
)

// reducer is a worker's side of an allreduce step: it lays the gradient's
// dense tensors end to end, sums them with the other workers along the
// plan, and applies the job's optimizer to the worker's own parameters.
type reducer struct {
	cfg  *Allreduce
	opt  *allreduce.Optimizer
	flat []float32 // the gradient, then one flag: this worker has data for the next iteration
	// more says whether any worker has data for the next iteration: all
	// go on (those without data with a zero gradient) until none has.
	more bool
	// Since the last report.
	spent       time.Duration
	sent, cross int64
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
	case cfg.Exchange == nil || cfg.Plan == nil:
		return nil, fmt.Errorf("allreduce: no exchange or plan")
	case cfg.Plan.Len != total+1:
		return nil, fmt.Errorf("allreduce: %s plan sums %d values; want the model's %d and one more", cfg.Plan.Kind, cfg.Plan.Len, total)
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
	return &reducer{cfg: cfg, opt: allreduce.NewOptimizer(cfg.Optim, lens), flat: make([]float32, total+1)}, nil
}

// initParams returns the worker's own copy of the initial parameters.
func (r *reducer) initParams(m model.Model) *model.Params {
	p := m.NewParams()
	for i, d := range r.cfg.Init {
		copy(p.Dense[i], d)
	}
	return p
}

// step sums grad (this worker's share of iteration t's gradient, already
// divided by the global batch) across the workers and applies the optimizer
// at iteration t's learning rate. more says whether this worker has data for
// iteration t+1; r.more then says whether any worker has.
func (r *reducer) step(ctx context.Context, t int64, params, grad *model.Params, more bool) error {
	off := 0
	for _, d := range grad.Dense {
		off += copy(r.flat[off:], d)
	}
	r.flat[off] = 0
	if more {
		r.flat[off] = 1
	}
	x := r.cfg.Exchange
	sent0, cross0 := sum(x.Sent()), x.CrossBytes()
	t0 := time.Now()
	err := x.Run(ctx, r.cfg.Plan, r.flat)
	r.spent += time.Since(t0)
	r.sent += sum(x.Sent()) - sent0
	r.cross += x.CrossBytes() - cross0
	if err != nil {
		return err
	}
	off = 0
	for _, d := range grad.Dense {
		off += copy(d, r.flat[off:])
	}
	r.more = r.flat[off] > 0
	r.opt.Step(t, params.Dense, grad.Dense)
	return nil
}

// take returns and resets the counters since the last report.
func (r *reducer) take() (time.Duration, int64, int64) {
	d, s, c := r.spent, r.sent, r.cross
	r.spent, r.sent, r.cross = 0, 0, 0
	return d, s, c
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}
