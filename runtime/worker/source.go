package worker

import (
	"errors"
	"slices"

	"github.com/kelpie/kelpie/proto/coordinatorpb"
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

// Dropper is a Source that is told when the servers discarded the
// gradients of an iteration (backup workers): the data of that iteration
// must be trained again.
type Dropper interface {
	Dropped(t int64)
}

// Reopener is a Source that may have data again after it said it had none
// (it handed a shard back to the queue after finding the queue empty).
type Reopener interface {
	More() bool
}

// Finisher is a Source that says whether Pushed(t) will report shards
// DONE: the worker then reports its samples first, so that the job's count
// of samples trained covers every DONE shard even if the worker is killed
// right after.
type Finisher interface {
	Finishes(t int64) bool
}

// Releaser is a Source that can hand back the data it has started but not
// finished, when the worker leaves the job.
type Releaser interface {
	Release() error
}

// ErrUnavailable wraps a shard report that could not reach the scheduler
// (it is away): ShardSource keeps the shards and reports them with the next
// report or Flush, and training goes on.
var ErrUnavailable = errors.New("scheduler unavailable")

// ShardSource reads data through the data-shard service (AntDT §V-C): it
// fetches a shard (TODO → DOING), trains on its samples in the shard's
// order, and reports it (DOING → DONE) once the gradients of its last
// samples are pushed. A worker that finds no shard to fetch is done; a lost
// worker's DOING shards go back to the queue at the scheduler.
//
// A shard some of whose gradients the servers dropped (backup workers) is
// returned (DOING → TODO) instead of reported, so that another fetch
// trains it again: every sample's gradient is applied at least once.
type ShardSource struct {
	Fetch  func() (*coordinatorpb.ShardInfo, error)
	Report func(ids []int64) error
	// Return hands shards back to the queue: ids, or every shard the
	// worker holds when ids is empty.
	Return func(ids []int64) error

	cur       *coordinatorpb.ShardInfo
	pos       int
	exhausted bool
	finished  []finishedShard
	touched   map[int64][]int64 // iteration -> shards it took samples from
	tainted   map[int64]bool    // shards with a dropped gradient
	unsent    []int64           // DONE shards whose report could not be sent yet
	// Fetched counts the shards taken; Returned those handed back.
	Fetched, Returned int
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
		if take > 0 {
			if s.touched == nil {
				s.touched = map[int64][]int64{}
			}
			s.touched[t] = append(s.touched[t], s.cur.Id)
		}
		s.pos += take
		if s.pos == len(s.cur.Order) {
			s.finished = append(s.finished, finishedShard{s.cur.Id, t})
			s.cur = nil
		}
	}
	return dst, len(dst) > 0 || !s.exhausted, nil
}

// Held is the shards this worker holds: fetched and not yet reported DONE
// or handed back — the one it trains, those finished and not yet pushed,
// and those whose DONE report waits for the scheduler. A fetch sends them
// (coordinatorpb.FetchShardRequest.held), so that a shard whose delivery
// was lost is delivered again.
func (s *ShardSource) Held() []int64 {
	var out []int64
	if s.cur != nil {
		out = append(out, s.cur.Id)
	}
	for _, f := range s.finished {
		out = append(out, f.id)
	}
	return append(out, s.unsent...)
}

// Dropped implements Dropper: the shards iteration t took samples from
// go back to the queue once finished. A worker that rejoined the servers
// ahead (its gradient was dropped before) numbers its iterations anew, so
// the batch pushed as t may have been drawn as an earlier iteration: every
// draw not yet pushed, up to t, counts.
func (s *ShardSource) Dropped(t int64) {
	for it, ids := range s.touched {
		if it > t {
			continue
		}
		for _, id := range ids {
			if s.tainted == nil {
				s.tainted = map[int64]bool{}
			}
			s.tainted[id] = true
		}
	}
}

// Finishes implements Finisher: a shard finished by iteration t goes DONE
// (or back to the queue, if tainted) with Pushed(t).
func (s *ShardSource) Finishes(t int64) bool {
	for _, f := range s.finished {
		if f.iter <= t {
			return true
		}
	}
	return false
}

// Pushed implements Source.
func (s *ShardSource) Pushed(t int64) error {
	for it := range s.touched {
		if it <= t {
			delete(s.touched, it)
		}
	}
	var done, back []int64
	keep := s.finished[:0]
	for _, f := range s.finished {
		switch {
		case f.iter > t:
			keep = append(keep, f)
		case s.tainted[f.id]:
			back = append(back, f.id)
			delete(s.tainted, f.id)
		default:
			done = append(done, f.id)
		}
	}
	s.finished = keep
	done = append(s.unsent, done...)
	s.unsent = nil
	if len(back) > 0 && s.Return != nil {
		if err := s.Return(back); err != nil {
			return err
		}
		s.Returned += len(back)
		// The queue has work again, maybe only the shards just handed back.
		s.exhausted = false
	}
	return s.report(done)
}

// report sends DONE reports; while the scheduler is away it keeps them.
func (s *ShardSource) report(done []int64) error {
	if len(done) == 0 {
		return nil
	}
	err := s.Report(done)
	if errors.Is(err, ErrUnavailable) {
		s.unsent = done
		return nil
	}
	return err
}

// Flush sends the DONE reports kept while the scheduler was away; it
// returns the report's error (wrapping ErrUnavailable while it still is).
func (s *ShardSource) Flush() error {
	if len(s.unsent) == 0 {
		return nil
	}
	done := s.unsent
	if err := s.Report(done); err != nil {
		return err
	}
	s.unsent = nil
	return nil
}

// Unsent counts the DONE shards not yet reported.
func (s *ShardSource) Unsent() int { return len(s.unsent) }

// More implements Reopener.
func (s *ShardSource) More() bool { return !s.exhausted || s.cur != nil }

// Release implements Releaser: the shard the worker has started goes back
// to the queue (its samples trained so far are trained again: at least
// once), and so does any finished one whose gradients are not all pushed.
func (s *ShardSource) Release() error {
	if s.Return == nil || (s.cur == nil && len(s.finished) == 0) {
		return nil
	}
	var ids []int64
	if s.cur != nil {
		ids = append(ids, s.cur.Id)
	}
	for _, f := range s.finished {
		ids = append(ids, f.id)
	}
	slices.Sort(ids)
	s.cur, s.finished = nil, nil
	s.Returned += len(ids)
	return s.Return(ids)
}
