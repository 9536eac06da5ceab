package policy

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

	"github.com/kelpie/kelpie/core/policydecl"
	"github.com/kelpie/kelpie/scheduler/monitor"
)

// Policy is a straggler policy as the job manager runs it: a declaration
// (its name, and its parameters with their types, defaults and bounds —
// the job spec's `policies.<name>` keys and the console's live edits are
// checked against it) and Propose. A policy keeps no state between
// rounds: everything it reads is in the Snapshot.
type Policy interface {
	Decl() policydecl.Policy
	// Propose returns the policy's plan for one round; rng is the job's
	// random source (a policy that explores draws from it, the others
	// leave it alone).
	Propose(s Snapshot, rng *rand.Rand) []Action
}

// Explorer is implemented by a policy whose plan is drawn anew each round
// (PSLD's ε-greedy exploration): the job manager does not withdraw its
// pending proposals when a round does not repeat them.
type Explorer interface {
	Explores() bool
}

// Snapshot is what a policy reads in one round.
type Snapshot struct {
	// Monitor is the Monitor's snapshot; Monitor.Config holds the λ and
	// windows in use (AntDT-ND's parameters, which the Monitor classifies
	// with).
	Monitor monitor.Snapshot
	// Job is what the scheduler knows of the job beyond it.
	Job Job
	// Params are the policy's parameters now (read them through its
	// declared Params: Params.Float(lambda), not by a string).
	Params policydecl.Values
}

// builtin is the registry: every policy kelpie runs, in the order the
// console shows them. Adding a policy is one file (its type, declaration
// and Propose) and one line here.
var builtin = []Policy{
	antdtNDPolicy{},
	antdtDDPolicy{},
	backupWorkersPolicy{},
	adjustLRPolicy{},
	psldPolicy{},
}

var (
	mu         sync.RWMutex
	registered []Policy
)

func init() {
	for _, p := range builtin {
		Register(p)
	}
}

// Register adds a policy to the registry and publishes its declaration to
// the job spec (policydecl.Register). The builtin policies are registered
// when this package is initialised; a test package may register its own
// in its init. It panics on a name registered twice.
func Register(p Policy) {
	policydecl.Register(p.Decl()) // panics on a duplicate before we add it
	mu.Lock()
	defer mu.Unlock()
	registered = append(registered, p)
}

// All returns the registered policies in registration order.
func All() []Policy {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Clone(registered)
}

// Names returns the registered policies' names in registration order.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]string, len(registered))
	for i, p := range registered {
		out[i] = p.Decl().Name
	}
	return out
}

// Lookup returns the registered policy of that name.
func Lookup(name string) (Policy, bool) {
	mu.RLock()
	defer mu.RUnlock()
	for _, p := range registered {
		if p.Decl().Name == name {
			return p, true
		}
	}
	return nil, false
}

// Explores says whether p is an Explorer that explores.
func Explores(p Policy) bool {
	e, ok := p.(Explorer)
	return ok && e.Explores()
}

// CheckParams checks a policy's parameters as they would be after a live
// edit against its declaration: every key declared, each value within its
// bound, and the declared rules between them. workers is the job's worker
// count (0: unknown, not checked).
func CheckParams(name string, p map[string]float64, workers int) error {
	pol, ok := Lookup(name)
	if !ok {
		return unknownPolicy(name)
	}
	d := pol.Decl()
	if v := d.Check(p, policydecl.Context{Workers: workers}); len(v) > 0 {
		return paramError{policy: name, v: v[0]}
	}
	return nil
}

// paramError is a declared parameter's violation, worded for a live edit:
// "antdt-nd lambda must be > 1, not 0.9 (AntDT §VI-A 3: ...)".
type paramError struct {
	policy string
	v      policydecl.Violation
}

func (e paramError) Error() string { return e.policy + " " + e.v.Param + " " + e.v.Msg }

type unknownPolicy string

func (e unknownPolicy) Error() string {
	return "unknown policy " + string(e) + " (one of " + list(Names()) + ")"
}

// BoundsText lists a policy's parameter ranges ("lambda > 1, ..."), for
// help texts.
func BoundsText(name string) string {
	pol, ok := Lookup(name)
	if !ok {
		return ""
	}
	var parts []string
	for _, q := range pol.Decl().Params {
		parts = append(parts, q.Key()+" "+q.Range())
	}
	return strings.Join(parts, ", ")
}
