// Package optim holds the optimizers parameter servers apply to their blocks of parameters:
// SGD, momentum and Adam. Workers send gradients already averaged and scaled, so SGD is
// param -= LR*grad. Dense blocks are updated whole (Apply); sparse embedding blocks only in the
// rows a push touched (ApplyRows), leaving the optimizer state of other rows alone.
package optim

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// Optimizer kinds.
const (
	SGD      = "sgd"
	Momentum = "momentum"
	Adam     = "adam"
)

// Config selects an optimizer. Zero fields take defaults: Kind "sgd", Momentum 0.9, Beta1 0.9,
// Beta2 0.999, Eps 1e-8. LR has no default: a zero LR leaves parameters unchanged.
type Config struct {
	Kind         string
	LR           float32
	Momentum     float32 // momentum: v = Momentum*v + grad; param -= LR*v
	Beta1, Beta2 float32 // adam moment decay rates
	Eps          float32 // adam denominator term
	// Decay lowers LR over the job: "" or "none" keeps it, "cosine" and
	// "linear" take it from LR at iteration 0 to Final·LR at iteration
	// Steps (and keep it there).
	Decay string
	Final float32
	Steps int64
}

// Learning-rate decays.
const (
	DecayNone   = "none"
	DecayCosine = "cosine"
	DecayLinear = "linear"
)

// Accumulate adds gradient x into dst (len(x) >= len(dst)): a server
// summing workers' gradients of one version, a worker summing its
// micro-batches' gradients.
func Accumulate(dst, x []float32) {
	x = x[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		dst[i] += x[i]
		dst[i+1] += x[i+1]
		dst[i+2] += x[i+2]
		dst[i+3] += x[i+3]
	}
	for ; i < len(dst); i++ {
		dst[i] += x[i]
	}
}

// At returns c with the learning rate of iteration t under its decay.
func (c Config) At(t int64) Config {
	if c.Decay == "" || c.Decay == DecayNone || c.Steps <= 0 {
		return c
	}
	x := math.Min(math.Max(float64(t)/float64(c.Steps), 0), 1)
	f := float64(c.Final)
	switch c.Decay {
	case DecayCosine:
		f += (1 - f) * 0.5 * (1 + math.Cos(math.Pi*x))
	case DecayLinear:
		f += (1 - f) * (1 - x)
	default:
		return c
	}
	c.LR = float32(float64(c.LR) * f)
	return c
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Kind == "" {
		c.Kind = SGD
	}
	if c.Momentum == 0 {
		c.Momentum = 0.9
	}
	if c.Beta1 == 0 {
		c.Beta1 = 0.9
	}
	if c.Beta2 == 0 {
		c.Beta2 = 0.999
	}
	if c.Eps == 0 {
		c.Eps = 1e-8
	}
	return c
}

// Validate reports whether c (after defaults) is a usable optimizer.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Kind != SGD && c.Kind != Momentum && c.Kind != Adam:
		return fmt.Errorf("optim: unknown kind %q (want sgd, momentum or adam)", c.Kind)
	case c.LR < 0 || math.IsNaN(float64(c.LR)) || math.IsInf(float64(c.LR), 0):
		return fmt.Errorf("optim: learning rate %v must be finite and not negative", c.LR)
	case c.Decay != "" && c.Decay != DecayNone && c.Decay != DecayCosine && c.Decay != DecayLinear:
		return fmt.Errorf("optim: unknown decay %q (want none, cosine or linear)", c.Decay)
	case c.Final < 0 || c.Final > 1:
		return fmt.Errorf("optim: final learning-rate fraction %v not in [0,1]", c.Final)
	case c.Momentum < 0 || c.Momentum >= 1:
		return fmt.Errorf("optim: momentum %v not in [0,1)", c.Momentum)
	case c.Beta1 < 0 || c.Beta1 >= 1 || c.Beta2 < 0 || c.Beta2 >= 1:
		return fmt.Errorf("optim: adam betas %v, %v not in [0,1)", c.Beta1, c.Beta2)
	case c.Eps <= 0:
		return fmt.Errorf("optim: adam eps %v must be positive", c.Eps)
	}
	return nil
}

// State is the optimizer state of one parameter block. Its fields are exported so a server can
// ship a block's state along with its values when the block moves.
type State struct {
	// V is momentum's velocity, or Adam's second moment; M is Adam's first moment. Both have the
	// block's length, or are nil when the optimizer does not use them.
	M, V []float32
	// Step counts Apply calls (Adam's bias correction for dense blocks).
	Step int64
	// RowStep counts the updates of each row for ApplyRows, so a sparse row's Adam bias
	// correction follows its own history: a row first touched late still gets a first-step
	// update. Allocated on the first ApplyRows.
	RowStep []int64
}

// NewState returns the zero state for a block of n parameters. It panics on an invalid config;
// check it with Validate first.
func NewState(c Config, n int) *State {
	c = mustValid(c)
	s := &State{}
	switch c.Kind {
	case Momentum:
		s.V = make([]float32, n)
	case Adam:
		s.M, s.V = make([]float32, n), make([]float32, n)
	}
	return s
}

func mustValid(c Config) Config {
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c.WithDefaults()
}

// Apply updates the whole block param with grad (same length) and advances s.
func Apply(c Config, s *State, param, grad []float32) {
	c = mustValid(c)
	if len(grad) != len(param) {
		panic(fmt.Sprintf("optim: %d gradients for %d parameters", len(grad), len(param)))
	}
	if c.Kind == Adam {
		s.Step++
	}
	// Every update is element-wise, so a large block splits across cores
	// with results identical to one pass.
	split(len(param), func(lo, hi int) {
		p, g := param[lo:hi], grad[lo:hi]
		switch c.Kind {
		case SGD:
			sgd(c, p, g)
		case Momentum:
			momentum(c, s.V[lo:hi], p, g)
		case Adam:
			adam(c, s.Step, s.M[lo:hi], s.V[lo:hi], p, g)
		}
	})
}

// SplitMin is the least number of parameters whose update Apply splits
// across goroutines (when GOMAXPROCS allows more than one): below it, a
// goroutine costs more than it saves.
const SplitMin = 256 << 10

// split runs f over [0, n) in one piece, or in GOMAXPROCS pieces (each a
// multiple of 16 values, for the unrolled loops) for large n.
func split(n int, f func(lo, hi int)) {
	procs := runtime.GOMAXPROCS(0)
	if n < SplitMin || procs < 2 {
		f(0, n)
		return
	}
	procs = min(procs, n/(SplitMin/4))
	chunk := (n/procs + 15) &^ 15
	var wg sync.WaitGroup
	for lo := chunk; lo < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, min(lo+chunk, n))
	}
	f(0, min(chunk, n))
	wg.Wait()
}

// ApplyRows updates only the given rows of a block of dim-wide rows: grad holds len(rows)*dim
// values, row k's at grad[k*dim:(k+1)*dim], for block row rows[k]. Rows not listed keep both
// their values and their optimizer state (the "lazy" update of sparse embeddings). A row listed
// twice is updated twice, in order.
func ApplyRows(c Config, s *State, param []float32, dim int, rows []int, grad []float32) {
	c = mustValid(c)
	if dim <= 0 || len(param)%dim != 0 || len(grad) != len(rows)*dim {
		panic(fmt.Sprintf("optim: %d gradients for %d rows of %d in a block of %d", len(grad), len(rows), dim, len(param)))
	}
	if c.Kind == Adam && len(s.RowStep) != len(param)/dim {
		s.RowStep = make([]int64, len(param)/dim)
	}
	for k, r := range rows {
		p := param[r*dim : (r+1)*dim]
		g := grad[k*dim : (k+1)*dim]
		switch c.Kind {
		case SGD:
			sgd(c, p, g)
		case Momentum:
			momentum(c, s.V[r*dim:(r+1)*dim], p, g)
		case Adam:
			s.RowStep[r]++
			adam(c, s.RowStep[r], s.M[r*dim:(r+1)*dim], s.V[r*dim:(r+1)*dim], p, g)
		}
	}
}

func sgd(c Config, p, g []float32) {
	g = g[:len(p)]
	lr := c.LR
	// Unrolled: this loop is most of a parameter server's work per byte.
	i := 0
	for ; i+8 <= len(p); i += 8 {
		pp, gg := p[i:i+8:i+8], g[i:i+8:i+8]
		pp[0] -= lr * gg[0]
		pp[1] -= lr * gg[1]
		pp[2] -= lr * gg[2]
		pp[3] -= lr * gg[3]
		pp[4] -= lr * gg[4]
		pp[5] -= lr * gg[5]
		pp[6] -= lr * gg[6]
		pp[7] -= lr * gg[7]
	}
	for ; i < len(p); i++ {
		p[i] -= lr * g[i]
	}
}

// momentum is heavy-ball momentum in PyTorch's form: v = μv + g; p -= lr·v.
func momentum(c Config, v, p, g []float32) {
	v, g = v[:len(p)], g[:len(p)]
	mu, lr := c.Momentum, c.LR
	i := 0
	for ; i+4 <= len(p); i += 4 {
		pp, vv, gg := p[i:i+4:i+4], v[i:i+4:i+4], g[i:i+4:i+4]
		vv[0] = mu*vv[0] + gg[0]
		vv[1] = mu*vv[1] + gg[1]
		vv[2] = mu*vv[2] + gg[2]
		vv[3] = mu*vv[3] + gg[3]
		pp[0] -= lr * vv[0]
		pp[1] -= lr * vv[1]
		pp[2] -= lr * vv[2]
		pp[3] -= lr * vv[3]
	}
	for ; i < len(p); i++ {
		v[i] = mu*v[i] + g[i]
		p[i] -= lr * v[i]
	}
}

// adam is Adam (Kingma & Ba) at step t ≥ 1:
//
//	m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  p -= lr · m̂ / (√v̂ + ε)
//
// with m̂ = m/(1-β1^t), v̂ = v/(1-β2^t). The bias corrections are folded into one step size and
// a rescaled ε (lr·√(1-β2^t)/(1-β1^t) and ε·√(1-β2^t)), which is algebraically the same.
func adam(c Config, t int64, m, v, p, g []float32) {
	c1 := 1 - math.Pow(float64(c.Beta1), float64(t))
	c2 := math.Sqrt(1 - math.Pow(float64(c.Beta2), float64(t)))
	step := float32(float64(c.LR) * c2 / c1)
	eps := float32(float64(c.Eps) * c2)
	b1, b2 := c.Beta1, c.Beta2
	m, v, g = m[:len(p)], v[:len(p)], g[:len(p)]
	for i := range p {
		gi := g[i]
		m[i] = b1*m[i] + (1-b1)*gi
		v[i] = b2*v[i] + (1-b2)*gi*gi
		p[i] -= step * m[i] / (float32(math.Sqrt(float64(v[i]))) + eps)
	}
}
