package worker

import (
	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// Source gives a worker its samples, iteration by iteration.
type Source interface {
	// Next appends to dst the sample indexes of the worker's batch in
	// iteration t, at most n of them. It returns false when the worker has
	// no more data (it then leaves the barrier).
	Next(dst []int, t int64, n int) ([]int, bool, error)
	// Pushed says the gradients of iteration t and every earlier one are
	// pushed: the shards they finished can be reported DONE.
	Pushed(t int64) error
}

// ShardSource reads data through the data-shard service (AntDT §V-C): it
// fetches a shard (TODO → DOING), trains on its samples in the shard's
// order, and reports it (DOING → DONE) once the gradients of its last
// samples are pushed. A worker that finds no shard to fetch is done; a lost
// worker's DOING shards go back to the queue at the scheduler.
type ShardSource struct {
	Fetch  func() (*kelpiepb.ShardInfo, error)
	Report func(ids []int64) error

	cur       *kelpiepb.ShardInfo
	pos       int
	exhausted bool
	finished  []finishedShard
	// Fetched counts the shards taken.
	Fetched int
}

type finishedShard struct {
	id   int64
	iter int64
}

// Next implements Source.
func (s *ShardSource) Next(dst []int, t int64, n int) ([]int, bool, error) {
	for len(dst) < n && !s.exhausted {
		if s.cur == nil {
			sh, err := s.Fetch()
			if err != nil {
				return dst, false, err
			}
			if sh == nil {
				s.exhausted = true
				break
			}
			s.cur, s.pos = sh, 0
			s.Fetched++
		}
		take := min(n-len(dst), len(s.cur.Order)-s.pos)
		for _, i := range s.cur.Order[s.pos : s.pos+take] {
			dst = append(dst, int(i))
		}
		s.pos += take
		if s.pos == len(s.cur.Order) {
			s.finished = append(s.finished, finishedShard{s.cur.Id, t})
			s.cur = nil
		}
	}
	return dst, len(dst) > 0 || !s.exhausted, nil
}

// Pushed implements Source.
func (s *ShardSource) Pushed(t int64) error {
	var ids []int64
	keep := s.finished[:0]
	for _, f := range s.finished {
		if f.iter <= t {
			ids = append(ids, f.id)
		} else {
			keep = append(keep, f)
		}
	}
	s.finished = keep
	if len(ids) == 0 {
		return nil
	}
	return s.Report(ids)
}
