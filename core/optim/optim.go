// Package optim holds the optimizers parameter servers apply to their blocks of parameters:
// SGD, momentum and Adam. Workers send gradients already averaged and scaled, so SGD is
// param -= LR*grad. Dense blocks are updated whole (Apply); sparse embedding blocks only in the
// rows a push touched (ApplyRows), leaving the optimizer state of other rows alone. The update
// is most of a parameter server's work per byte: SGD, momentum and gradient sums run in AVX2
// kernels where the CPU has them (kernels_amd64.s, several times the Go loops' speed), and
// every update reports whether its results are finite, so divergence costs no extra pass.
package optim

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
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

// Apply updates the whole block param with grad (same length) and advances
// s. It reports whether every updated parameter is finite (a NaN or ±Inf
// means the training diverged).
func Apply(c Config, s *State, param, grad []float32) (finite bool) {
	c = mustValid(c)
	if len(grad) != len(param) {
		panic(fmt.Sprintf("optim: %d gradients for %d parameters", len(grad), len(param)))
	}
	if c.Kind == Adam {
		s.Step++
	}
	if len(param) < SplitMin || runtime.GOMAXPROCS(0) < 2 {
		return applyRange(c, s, param, grad, 0, len(param)) // no closure to allocate
	}
	// Every update is element-wise, so a large block splits across cores
	// with results identical to one pass.
	return split(len(param), func(lo, hi int) bool { return applyRange(c, s, param, grad, lo, hi) })
}

// ApplyRange is Apply on param[lo:hi] alone, with the same ranges of s's
// state: a block updated a range at a time, as its gradient arrives (a
// server computing the update out of place while the rest is still on the
// wire). So that every element meets the kernel it meets in one pass and
// the results are bit for bit Apply's, lo must be a multiple of RangeUnit,
// and hi too unless it is the block's end; a range shorter than RangeUnit
// must be the whole block (a short tail goes with the range before it). It
// does not advance s's step count: call AdvanceStep once per update, before
// its ranges.
func ApplyRange(c Config, s *State, param, grad []float32, lo, hi int) (finite bool) {
	c = mustValid(c)
	mustRange(param, grad, lo, hi)
	return applyRange(c, s, param, grad, lo, hi)
}

// mustRange panics unless [lo, hi) is a range ApplyRange takes.
func mustRange(param, grad []float32, lo, hi int) {
	if len(grad) != len(param) || lo < 0 || hi > len(param) || lo > hi || lo%lanes != 0 || hi%lanes != 0 && hi != len(param) ||
		hi-lo < lanes && (lo != 0 || hi != len(param)) {
		panic(fmt.Sprintf("optim: range [%d, %d) of %d parameters with %d gradients", lo, hi, len(param), len(grad)))
	}
}

// ApplyRangeTo is ApplyRange out of place: dst[lo:hi], and the same
// ranges of next's state, get what ApplyRange would make of param[lo:hi]
// with state s; param and s are only read. next's step count must already
// include this update (AdvanceStep on a copy of s's). SGD reads the old
// values and writes the new ones in one pass; the others copy the range
// and update the copy.
func ApplyRangeTo(c Config, next *State, dst []float32, s *State, param, grad []float32, lo, hi int) (finite bool) {
	c = mustValid(c)
	if len(dst) != len(param) {
		panic(fmt.Sprintf("optim: %d values out of place for %d parameters", len(dst), len(param)))
	}
	mustRange(param, grad, lo, hi)
	if c.Kind == SGD {
		return sgdTo(c, dst[lo:hi], param[lo:hi], grad[lo:hi])
	}
	copy(dst[lo:hi], param[lo:hi])
	if next.M != nil {
		copy(next.M[lo:hi], s.M[lo:hi])
	}
	if next.V != nil {
		copy(next.V[lo:hi], s.V[lo:hi])
	}
	return applyRange(c, next, dst, grad, lo, hi)
}

// ApplyRangeUndoable is ApplyRange for SGD (which keeps no state) that
// leaves the old values of param[lo:hi] in grad[lo:hi], in place of the
// gradient it has used: a block updated in place a range at a time as its
// gradient arrives, which copying grad[lo:hi] back into param[lo:hi]
// restores bit for bit. The new values are ApplyRange's (and so Apply's)
// bit for bit. It panics for any other optimizer.
func ApplyRangeUndoable(c Config, param, grad []float32, lo, hi int) (finite bool) {
	c = mustValid(c)
	if c.Kind != SGD {
		panic(fmt.Sprintf("optim: an undoable update of %s", c.Kind))
	}
	mustRange(param, grad, lo, hi)
	return sgdKeep(c, param[lo:hi], grad[lo:hi])
}

// RangeUnit is the alignment of ApplyRange's ranges (the vector kernels'
// unit).
const RangeUnit = lanes

// AdvanceStep counts one update in s, as Apply does before it updates.
func AdvanceStep(c Config, s *State) {
	if mustValid(c).Kind == Adam {
		s.Step++
	}
}

func applyRange(c Config, s *State, param, grad []float32, lo, hi int) bool {
	p, g := param[lo:hi], grad[lo:hi]
	switch c.Kind {
	case Momentum:
		return momentum(c, s.V[lo:hi], p, g)
	case Adam:
		return adam(c, s.Step, s.M[lo:hi], s.V[lo:hi], p, g)
	}
	return sgd(c, p, g)
}

// SplitMin is the least number of parameters whose update Apply splits
// across goroutines (when GOMAXPROCS allows more than one): below it, a
// goroutine costs more than it saves.
const SplitMin = 256 << 10

// split runs f over [0, n) in one piece, or in GOMAXPROCS pieces (each a
// multiple of 32 values, the vector kernels' unit) for large n, and reports
// whether every piece returned true.
func split(n int, f func(lo, hi int) bool) bool {
	procs := runtime.GOMAXPROCS(0)
	if n < SplitMin || procs < 2 {
		return f(0, n)
	}
	procs = min(procs, n/(SplitMin/4))
	chunk := (n/procs + lanes - 1) &^ (lanes - 1)
	var wg sync.WaitGroup
	var bad atomic.Bool
	for lo := chunk; lo < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			if !f(lo, hi) {
				bad.Store(true)
			}
		}(lo, min(lo+chunk, n))
	}
	ok := f(0, min(chunk, n))
	wg.Wait()
	return ok && !bad.Load()
}

// ApplyRows updates only the given rows of a block of dim-wide rows: grad holds len(rows)*dim
// values, row k's at grad[k*dim:(k+1)*dim], for block row rows[k]. Rows not listed keep both
// their values and their optimizer state (the "lazy" update of sparse embeddings). A row listed
// twice is updated twice, in order. It reports whether every updated
// parameter is finite.
func ApplyRows(c Config, s *State, param []float32, dim int, rows []int, grad []float32) (finite bool) {
	c = mustValid(c)
	if dim <= 0 || len(param)%dim != 0 || len(grad) != len(rows)*dim {
		panic(fmt.Sprintf("optim: %d gradients for %d rows of %d in a block of %d", len(grad), len(rows), dim, len(param)))
	}
	if c.Kind == Adam && len(s.RowStep) != len(param)/dim {
		s.RowStep = make([]int64, len(param)/dim)
	}
	finite = true
	for k, r := range rows {
		p := param[r*dim : (r+1)*dim]
		g := grad[k*dim : (k+1)*dim]
		var ok bool
		switch c.Kind {
		case SGD:
			ok = sgd(c, p, g)
		case Momentum:
			ok = momentum(c, s.V[r*dim:(r+1)*dim], p, g)
		case Adam:
			s.RowStep[r]++
			ok = adam(c, s.RowStep[r], s.M[r*dim:(r+1)*dim], s.V[r*dim:(r+1)*dim], p, g)
		}
		finite = finite && ok
	}
	return finite
}
