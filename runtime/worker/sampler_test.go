package worker

import (
	"testing"

	"github.com/kelpie/kelpie/core/job"
)

func TestSamplerDrawsEachSampleOncePerEpoch(t *testing.T) {
	p := job.Plan{N: 1000, Epochs: 2, GlobalBatch: 64, Seed: 1, Local: []int{16, 16, 16, 16}, BatchesPerShard: 5}
	// Within an epoch every sample appears once.
	s := newSampler(p)
	idx := s.Indexes(nil, 1000, 2000)
	count := make([]int, 1000)
	for _, i := range idx {
		count[i]++
	}
	for i, c := range count {
		if c != 1 {
			t.Fatalf("epoch 2: sample %d drawn %d times", i, c)
		}
	}
}
