// Package policydecl declares what a straggler policy may be told: its
// name, and its parameters with their types, defaults and bounds (and the
// rules between them). It is the schema of a job spec's `policies:`
// section and of a live policy edit, and nothing else: what a policy does
// lives with the policy (scheduler/policy), which publishes its
// declaration here when its package is initialised (Register).
//
// The registry lives in core/ because the job spec (core/spec) decodes
// `policies:` against it and core imports no scheduler package; it is
// filled by the scheduler, so that a policy is declared once, in its own
// file, next to the code that reads its parameters. A program that parses
// job specs with a `policies:` section therefore links scheduler/policy
// (the kelpie binary does); one that does not sees no policies, and
// rejects such a section as unknown keys rather than guessing.
package policydecl

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Type is the type of a parameter's value.
type Type int

// The parameter types. Every value travels as a float64 (Values): an Int
// is a whole number, a Duration a number of seconds, a Bool 0 or 1.
const (
	Float Type = iota + 1
	Int
	Duration
	Bool
)

// String names the type as the console API carries it.
func (t Type) String() string {
	switch t {
	case Float:
		return "float"
	case Int:
		return "int"
	case Duration:
		return "duration"
	case Bool:
		return "bool"
	}
	return "unknown"
}

// Modes a policy runs in: its actions go out at once (auto), wait for an
// operator (approve), or it proposes nothing (off).
const (
	ModeAuto    = "auto"
	ModeApprove = "approve"
	ModeOff     = "off"
)

// Modes lists the modes in the order help texts give them.
var Modes = []string{ModeAuto, ModeApprove, ModeOff}

// Param declares one parameter of a policy.
type Param struct {
	// Name is the key in the job spec (`policies.<policy>.<name>`).
	Name string
	Type Type
	// Default is the value when the spec leaves the key out (seconds for
	// a Duration, 0 or 1 for a Bool).
	Default float64
	// Min and Max bound the value; MinOpen and MaxOpen exclude the bound
	// itself; Max is +Inf when there is none. A Bool is 0 or 1 and an
	// Int whole whatever the bounds say.
	Min, Max         float64
	MinOpen, MaxOpen bool
	// ZeroDefault: 0 is accepted and means the default (below Min).
	ZeroDefault bool
	// Source says why the bound is what it is: the paper and section.
	Source string
}

// Key is the parameter's name in a live edit and in the console API: the
// spec's name, with "_s" after a Duration's (the value is in seconds).
func (p Param) Key() string {
	if p.Type == Duration {
		return p.Name + "_s"
	}
	return p.Name
}

// Range writes the bound for people: "> 1", "in [0, 1]", "a whole number ≥ 1".
func (p Param) Range() string {
	var s string
	switch {
	case p.Type == Bool:
		return "0 or 1"
	case math.IsInf(p.Max, 1):
		op := "≥"
		if p.MinOpen {
			op = ">"
		}
		s = op + " " + Num(p.Min)
	default:
		lo, hi := "[", "]"
		if p.MinOpen {
			lo = "("
		}
		if p.MaxOpen {
			hi = ")"
		}
		s = "in " + lo + Num(p.Min) + ", " + Num(p.Max) + hi
	}
	if p.Type == Int {
		s = "a whole number " + s
	}
	if p.Type == Duration {
		s += " seconds"
	}
	if p.ZeroDefault {
		s += " (or 0 for the default)"
	}
	return s
}

// Check says whether x is within the parameter's type and bound; the
// error says what it must be, without the parameter's name.
func (p Param) Check(x float64) error {
	bad := math.IsNaN(x) || math.IsInf(x, 0)
	if !bad && p.ZeroDefault && x == 0 {
		return nil
	}
	switch {
	case bad:
	case p.Type == Bool:
		bad = x != 0 && x != 1
	case p.Type == Int && x != math.Trunc(x):
		bad = true
	case x < p.Min || p.MinOpen && x == p.Min:
		bad = true
	case x > p.Max || p.MaxOpen && x == p.Max:
		bad = true
	}
	if bad {
		return fmt.Errorf("must be %s, not %s (%s)", p.Range(), Num(x), p.Source)
	}
	return nil
}

// Values holds a policy's parameters by Key. Read them through the
// declaration (Float, Int, Duration, Bool), not by a string.
type Values map[string]float64

// Float is p's value: its default when v does not hold it.
func (v Values) Float(p Param) float64 {
	if x, ok := v[p.Key()]; ok {
		return x
	}
	return p.Default
}

// Int is p's value as a whole number.
func (v Values) Int(p Param) int { return int(v.Float(p)) }

// Duration is p's value as a duration.
func (v Values) Duration(p Param) time.Duration {
	return time.Duration(v.Float(p) * float64(time.Second))
}

// Bool is p's value as a flag.
func (v Values) Bool(p Param) bool { return v.Float(p) != 0 }

// Context is what a rule between parameters may look at besides them.
type Context struct {
	// Mode is the policy's mode ("" when unknown).
	Mode string
	// Workers is the job's worker count (0: unknown, or a rule about the
	// workers does not bind: the job spec passes 0 for a policy that is
	// off).
	Workers int
	// Exchange is the job's gradient exchange (spec.ExchangePS, ...; "":
	// unknown, not checked).
	Exchange string
}

// Violation is a rule broken: the parameter (or "mode") to blame, and why.
type Violation struct {
	Param string // a Param's Name, or "mode"
	Msg   string
}

// Error is the violation as one sentence.
func (v Violation) Error() string { return v.Param + " " + v.Msg }

// Policy declares a policy.
type Policy struct {
	Name string // as in the job spec's `policies:` section
	// Doc is one line for help texts.
	Doc    string
	Params []Param
	// Rules checks what single bounds cannot: one parameter against
	// another, or against the job (nil: none). It is given the
	// parameters with defaults filled in.
	Rules func(v Values, c Context) []Violation
}

// Param returns the declared parameter of that spec name or Key.
func (p Policy) Param(name string) (Param, bool) {
	i := slices.IndexFunc(p.Params, func(q Param) bool { return q.Name == name || q.Key() == name })
	if i < 0 {
		return Param{}, false
	}
	return p.Params[i], true
}

// Defaults are the declared defaults, by Key.
func (p Policy) Defaults() Values {
	v := make(Values, len(p.Params))
	for _, q := range p.Params {
		v[q.Key()] = q.Default
	}
	return v
}

// Check checks parameters as they would be after an edit: that each is
// declared and within its bound, then the rules between them (on v with
// the defaults filled in). A violation names the parameter by its Key
// (or "mode").
func (p Policy) Check(v Values, c Context) []Violation {
	var out []Violation
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q, ok := p.Param(k)
		if !ok || q.Key() != k {
			out = append(out, Violation{Param: k, Msg: "is not a parameter of " + p.Name + p.paramList()})
			continue
		}
		if err := q.Check(v[k]); err != nil {
			out = append(out, Violation{Param: k, Msg: err.Error()})
		}
	}
	if p.Rules == nil {
		return out
	}
	full := p.Defaults()
	bad := map[string]bool{}
	for _, o := range out {
		bad[o.Param] = true
	}
	for k, x := range v {
		if !bad[k] {
			full[k] = x
		}
	}
	// The rules see out-of-bound values as their defaults, and a
	// parameter already refused is not blamed twice.
	for _, r := range p.Rules(full, c) {
		if !bad[r.Param] {
			out = append(out, r)
		}
	}
	return out
}

// paramList is " (one of a, b)" or " (it has none)".
func (p Policy) paramList() string {
	if len(p.Params) == 0 {
		return " (it has none)"
	}
	s := " (one of "
	for i, q := range p.Params {
		if i > 0 {
			s += ", "
		}
		s += q.Key()
	}
	return s + ")"
}

// The registry: every declared policy, in the order it was registered
// (the order the console and the spec's encoding show them in).
var (
	mu       sync.RWMutex
	declared []Policy
)

// Register declares a policy. scheduler/policy calls it for each policy
// it registers; it panics on a name declared twice or a parameter
// declared twice, which are programming errors.
func Register(p Policy) {
	mu.Lock()
	defer mu.Unlock()
	if p.Name == "" {
		panic("policydecl: a policy without a name")
	}
	for _, q := range declared {
		if q.Name == p.Name {
			panic("policydecl: policy " + strconv.Quote(p.Name) + " declared twice")
		}
	}
	seen := map[string]bool{"mode": true}
	for _, q := range p.Params {
		if seen[q.Name] || seen[q.Key()] {
			panic("policydecl: " + p.Name + " declares " + strconv.Quote(q.Name) + " twice (or as mode)")
		}
		if q.Type < Float || q.Type > Bool {
			panic("policydecl: " + p.Name + "." + q.Name + " has no type")
		}
		seen[q.Name], seen[q.Key()] = true, true
	}
	declared = append(declared, p)
}

// All returns the declared policies in registration order.
func All() []Policy {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Clone(declared)
}

// Names returns the declared policies' names in registration order.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, len(declared))
	for i, p := range declared {
		out[i] = p.Name
	}
	return out
}

// Lookup returns the declared policy of that name.
func Lookup(name string) (Policy, bool) {
	mu.RLock()
	defer mu.RUnlock()
	i := slices.IndexFunc(declared, func(p Policy) bool { return p.Name == name })
	if i < 0 {
		return Policy{}, false
	}
	return declared[i], true
}

// Num writes a value as people type it: "1.5", "0.2", "20".
func Num(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
