package policytest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/kelpie/kelpie/core/policydecl"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// A toy policy, the whole of it: it proposes KILL_RESTART of every worker
// slower than Factor × the workers' mean short-window BPT.

var (
	toyFactor = policydecl.Param{Name: "factor", Type: policydecl.Float, Default: 2, Min: 1, MinOpen: true, Max: math.Inf(1),
		Source: "toy §1: a ratio over the mean, above 1"}
	toyCooldown = policydecl.Param{Name: "cooldown", Type: policydecl.Duration, Default: 30, Min: 0, Max: math.Inf(1),
		Source: "toy §2: a length of time"}
)

type toyPolicy struct{}

func (toyPolicy) Decl() policydecl.Policy {
	return policydecl.Policy{Name: "toy-restart", Doc: "restart workers slower than factor × the mean",
		Params: []policydecl.Param{toyFactor, toyCooldown}}
}

func (toyPolicy) Propose(s policy.Snapshot, _ *rand.Rand) []policy.Action {
	var out []policy.Action
	f := s.Params.Float(toyFactor)
	for _, w := range s.Monitor.Workers {
		if s.Monitor.MeanBPT > 0 && float64(w.BPTTrans) > f*float64(s.Monitor.MeanBPT) {
			out = append(out, policy.Action{Kind: policy.KindKillRestart, Policy: "toy-restart", Target: w.Node,
				Reason: fmt.Sprintf("%s is more than %g× the mean", w.Node, f)})
		}
	}
	return out
}

func init() { policy.Register(toyPolicy{}) }
