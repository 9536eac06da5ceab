package manager

import (
	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// proposePSLD runs PSLD (PSLD §4) on the job's live servers and block table
// (as policyInputs copied them). The policy names servers by their place in
// the live list; the proposals it returns name them by their index in the
// job, as the block table does.
//
// The parameter "strawman" (> 0) swaps Alg. 1–3 for the proportional
// baseline of PSLD §6 (policy.PSLD.Strawman); while the job's policy
// settings carry no such parameter, the spec's policies.psld.strawman
// decides.
func (in *policyInputs) proposePSLD(snap monitor.Snapshot) []policy.Action {
	pj := in.job
	pj.Servers, pj.Blocks = in.servers, in.blocks
	p := in.policies[policy.NamePSLD].Params
	strawman := in.strawmanSpec
	if v, ok := p["strawman"]; ok {
		strawman = v > 0
	}
	var out []policy.Action
	for _, a := range (policy.PSLD{Epsilon: p["epsilon"], Theta1OverTheta0: p["theta1_over_theta0"],
		ScaleThreshold: p["scale_threshold"], VarianceThreshold: p["variance_threshold"], Strawman: strawman}).Propose(snap, pj, in.rng) {
		for k, r := range a.Assignment {
			a.Assignment[k] = in.serverIndex[r]
		}
		out = append(out, a)
	}
	return out
}
