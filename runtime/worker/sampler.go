package worker

import (
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/runtime/data"
)

// sampler maps stream positions to sample indexes, caching one epoch's
// permutation at a time.
type sampler struct {
	p     job.Plan
	epoch int
	perm  []int
}

// newSampler makes a sampler for a plan.
func newSampler(p job.Plan) *sampler { return &sampler{p: p, epoch: -1} }

// Indexes appends the sample indexes of stream positions [from, to).
func (s *sampler) Indexes(dst []int, from, to int64) []int {
	for pos := from; pos < to; pos++ {
		e := int(pos / int64(s.p.N))
		if e != s.epoch {
			s.perm = data.Permutation(s.p.N, s.p.Seed, e)
			s.epoch = e
		}
		dst = append(dst, s.perm[pos%int64(s.p.N)])
	}
	return dst
}
