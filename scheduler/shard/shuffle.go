package shard

import (
	"math/bits"
	"math/rand/v2"
)

// The shuffles are Fisher–Yates over a PCG stream with Lemire's unbiased
// bounded draw, written out so an order depends only on the PCG-DXSM
// algorithm and these constants, not on how a Go release implements
// rand.Shuffle: the scheduler and the workers, and a scheduler before and
// after an upgrade, must agree on the order of a shard's samples.
const (
	queueStreamKey = 0xa0761d6478bd642f // between-shard order of an epoch
	orderStreamKey = 0xe7037ed1a0b428db // within-shard sample order
)

func queueStream(seed int64, epoch int) *rand.PCG {
	return rand.NewPCG(uint64(seed), queueStreamKey^uint64(epoch))
}

func orderStream(seed int64, id ID) *rand.PCG {
	return rand.NewPCG(uint64(seed), orderStreamKey^uint64(id))
}

// below draws uniformly from [0, n), n > 0 (Lemire, "Fast Random Integer
// Generation in an Interval", 2019).
func below(r *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(r.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.Uint64(), n)
		}
	}
	return hi
}

// permutation is a random permutation of 0..n-1.
func permutation(n int64, r *rand.PCG) []int64 {
	p := make([]int64, n)
	for i := range p {
		p[i] = int64(i)
	}
	for i := n - 1; i > 0; i-- {
		j := below(r, uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// Order is the order in which a worker reads the samples of shard s: the
// sample positions s.Offset..s.Offset+s.Length-1 of the epoch, shuffled by
// the seed and the shard's ID (so the same range reads differently in every
// epoch). The positions index the epoch's sample set, which every epoch
// covers in full: position p is sample p of the dataset, or of the epoch's
// permutation if the data layer permutes samples itself. A worker that
// knows the job's config computes the same order as the scheduler.
func (c Config) Order(s Shard) []int64 {
	if s.Length <= 0 {
		return nil
	}
	p := permutation(s.Length, orderStream(c.Seed, s.ID))
	for i := range p {
		p[i] += s.Offset
	}
	return p
}
