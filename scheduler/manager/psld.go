package manager

import (
	"math/rand/v2"

	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// proposePSLD runs PSLD (PSLD §4) on the job's live servers and block table
// (under the manager's lock). The policy names servers by their place in
// the live list; the proposals it returns name them by their index in the
// job, as the block table does.
//
// The parameter "strawman" (> 0) swaps Alg. 1–3 for the proportional
// baseline of PSLD §6 (policy.PSLD.Strawman); while the job's policy
// settings carry no such parameter, the spec's policies.psld.strawman
// decides.
func (j *jobState) proposePSLD(snap monitor.Snapshot, pj policy.Job) []policy.Action {
	names := j.coord.ServerNames()
	addrs := j.coord.ServerAddrs()
	for i, n := range names {
		if addrs[i] != "" {
			pj.Servers = append(pj.Servers, n)
		}
	}
	t := j.coord.Table()
	for i, b := range t.Blocks {
		pj.Blocks = append(pj.Blocks, policy.BlockInfo{ID: b.ID, Bytes: b.Bytes(), Server: names[t.ServerOf[i]]})
	}
	p := j.policies[policy.NamePSLD].Params
	strawman := j.spec.Policies.PSLD.Strawman
	if v, ok := p["strawman"]; ok {
		strawman = v > 0
	}
	if j.rng == nil {
		j.rng = rand.New(rand.NewPCG(uint64(j.spec.Data.Seed), 0x9510))
	}
	var out []policy.Action
	for _, a := range (policy.PSLD{Epsilon: p["epsilon"], Theta1OverTheta0: p["theta1_over_theta0"],
		ScaleThreshold: p["scale_threshold"], VarianceThreshold: p["variance_threshold"], Strawman: strawman}).Propose(snap, pj, j.rng) {
		for k, r := range a.Assignment {
			a.Assignment[k] = nodeIndex(pj.Servers[r])
		}
		out = append(out, a)
	}
	return out
}
