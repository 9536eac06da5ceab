package allreduce

import "github.com/kelpie/kelpie/core/optim"

// Optimizer applies the job's optimizer (and its learning-rate schedule) to
// a worker's own copy of the parameters once the summed gradient is known.
// Every worker holds the same parameters and gets the same sum, so every
// worker takes the same step: the parameter server's update, done
// everywhere.
type Optimizer struct {
	cfg    optim.Config
	states []*optim.State
}

// NewOptimizer returns the optimizer for tensors of the given lengths (0 for
// a tensor it will not update). cfg must be valid (optim.Config.Validate).
func NewOptimizer(cfg optim.Config, lens []int) *Optimizer {
	o := &Optimizer{cfg: cfg, states: make([]*optim.State, len(lens))}
	for i, n := range lens {
		o.states[i] = optim.NewState(cfg, n)
	}
	return o
}

// Step applies the summed gradient of iteration t: params[i] -= update of
// grads[i], with the learning rate of iteration t. A nil tensor is skipped.
func (o *Optimizer) Step(t int64, params, grads [][]float32) {
	c := o.cfg.At(t)
	for i, p := range params {
		if p != nil {
			optim.Apply(c, o.states[i], p, grads[i])
		}
	}
}

// Vectors are the optimizer's state (momentum's velocity, Adam's moments),
// every tensor's in a fixed order: what a worker joining the group copies
// from one that has trained.
func (o *Optimizer) Vectors() [][]float32 {
	var out [][]float32
	for _, s := range o.states {
		if s == nil {
			continue
		}
		for _, v := range [][]float32{s.M, s.V} {
			if v != nil {
				out = append(out, v)
			}
		}
	}
	return out
}

// Steps is how many steps the optimizer has taken (Adam's bias correction
// counts them).
func (o *Optimizer) Steps() int64 {
	for _, s := range o.states {
		if s != nil {
			return s.Step
		}
	}
	return 0
}

// SetSteps sets the step count of every tensor's state.
func (o *Optimizer) SetSteps(n int64) {
	for _, s := range o.states {
		if s != nil {
			s.Step = n
		}
	}
}
