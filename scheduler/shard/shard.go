// Package shard is kelpie's Stateful Dynamic Data Sharding core (AntDT
// §V-C): the queue of data shards that workers fetch, train on and report,
// with the state of every shard so that no sample is lost when workers are
// killed, restarted, removed or have their gradients dropped.
//
// Each epoch of N samples is cut into K = ⌈N/(B·M)⌉ shards (B the global
// batch, M the batches per shard); a shard is only (offset, length) into the
// epoch's samples. Shards move TODO → DOING(owner) on Fetch and DOING → DONE
// on the owner's Report, which the worker sends after its gradients for the
// shard were pushed. Fast workers take more shards simply because they fetch
// more often. A lost worker's DOING shards go back to TODO (Release), as does
// a shard a worker gives back unfinished (Return): every sample is trained
// at least once ("at-least-once"), possibly more than once.
//
// Requeued shards go to the FRONT of the queue, ahead of every fresh shard,
// in the order they were requeued. The paper appends them to the end; with
// all epochs in one queue that would postpone a lost shard of epoch 0 until
// after the last epoch, so kelpie redoes lost work first.
//
// A late report is a Report for a shard that was requeued after its worker
// was Released (lost) and that nobody has fetched again yet. It is accepted:
// the shard becomes DONE, because the report means the gradients were
// already pushed and redoing them would only add a duplicate. Once another
// worker has re-fetched the shard, the late report is refused with
// ErrNotOwner (the new owner's work counts; the duplicate is the price of
// at-least-once). A shard given back with Return is never completed by its
// old owner: the worker said it was unfinished.
//
// Shuffling is deterministic by Config.Seed: the order of each epoch's
// shards in the queue (between shards) and the order of the samples a
// worker reads inside a shard (Config.Order).
//
// The package is a pure state machine: no I/O, no goroutines, no clock (time
// is a value passed in) and no locking (the caller serializes use). Its
// durable form is either a full snapshot (MarshalBinary / Restore) or the
// per-shard records returned by Changes, overlaid with Apply: every shard
// record carries the shard's whole state, queue position included, so the
// queue can be rebuilt from a snapshot plus the latest record of each shard
// changed since.
package shard

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// ID identifies a shard, unique across epochs: epoch e's shard i (the i-th
// by offset) has ID e·K + i.
type ID int64

// State is a shard's state.
type State int

// The states of a shard (AntDT §V-C2).
const (
	// TODO: ready to be fetched.
	TODO State = iota
	// DOING: a worker holds it; nobody else is given it.
	DOING
	// DONE: its worker reported it after pushing its gradients.
	DONE
)

func (s State) String() string {
	switch s {
	case TODO:
		return "TODO"
	case DOING:
		return "DOING"
	case DONE:
		return "DONE"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// MarshalText writes the state's name, so JSON views read "DOING".
func (s State) MarshalText() ([]byte, error) {
	if s < TODO || s > DONE {
		return nil, fmt.Errorf("shard: invalid state %d", int(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads a state's name.
func (s *State) UnmarshalText(b []byte) error {
	for v := TODO; v <= DONE; v++ {
		if string(b) == v.String() {
			*s = v
			return nil
		}
	}
	return fmt.Errorf("shard: unknown state %q", b)
}

// Shard is one data shard and its state.
type Shard struct {
	ID     ID
	Epoch  int
	Offset int64 // first sample position in the epoch
	Length int64 // samples; B·M except for an epoch's last shard
	State  State
	// Owner is the worker holding a DOING shard, or the worker whose report
	// made it DONE; empty while TODO.
	Owner string
	// Attempts counts the fetches: more than one means the shard was
	// requeued and handed out again.
	Attempts int
	// Since is when the shard entered its current state (0 for a shard
	// never touched).
	Since time.Duration
	// Lost is set on a TODO shard requeued by Release: the worker that held
	// it when it was lost, whose late report is still accepted. Fetch and
	// Return clear it.
	Lost string
	// Seq is the shard's place in the queue: the TODO shard with the lowest
	// Seq is fetched next. Fresh shards have 0..Total-1 in shuffled order;
	// requeued shards get negative values, increasing with every requeue.
	Seq int64
}

// Typed errors of Report and Return; the returned errors wrap them with the
// shard and worker, so test with errors.Is.
var (
	// ErrUnknownShard: no shard has this ID.
	ErrUnknownShard = errors.New("unknown shard")
	// ErrNotOwner: the worker does not hold the shard (another worker holds
	// it, it was requeued and re-fetched, it was returned, or it was never
	// given to this worker).
	ErrNotOwner = errors.New("shard not held by this worker")
	// ErrDuplicate: the shard is already DONE. Nothing changes; reporting
	// twice is harmless but says something went round twice.
	ErrDuplicate = errors.New("shard already done")
)

// MaxShards bounds the shards of a queue (all epochs), so a mistyped config
// or a corrupt snapshot cannot ask for unbounded memory. Raise
// BatchesPerShard if a dataset needs more.
const MaxShards = 1 << 20

// Config describes the dataset and how it is cut.
type Config struct {
	Samples         int64 // N, samples per epoch
	Epochs          int   // E
	GlobalBatch     int   // B
	BatchesPerShard int   // M (AntDT uses 100 by default)
	Seed            int64 // shuffles the queue and each shard's samples
}

// Validate reports whether c describes a queue New can build.
func (c Config) Validate() error {
	switch {
	case c.Samples <= 0:
		return fmt.Errorf("shard: samples must be positive, got %d", c.Samples)
	case c.Epochs <= 0:
		return fmt.Errorf("shard: epochs must be positive, got %d", c.Epochs)
	case c.GlobalBatch <= 0:
		return fmt.Errorf("shard: global batch must be positive, got %d", c.GlobalBatch)
	case c.BatchesPerShard <= 0:
		return fmt.Errorf("shard: batches per shard must be positive, got %d", c.BatchesPerShard)
	}
	if int64(c.GlobalBatch) > math.MaxInt64/int64(c.BatchesPerShard) {
		return fmt.Errorf("shard: shard size %d×%d overflows", c.GlobalBatch, c.BatchesPerShard)
	}
	if k := c.PerEpoch(); k > MaxShards/int64(c.Epochs) {
		return fmt.Errorf("shard: %d epochs of %d shards exceed %d shards; raise batches per shard", c.Epochs, k, MaxShards)
	}
	return nil
}

// Size is the samples of a full shard, B·M.
func (c Config) Size() int64 { return int64(c.GlobalBatch) * int64(c.BatchesPerShard) }

// PerEpoch is K = ⌈N/(B·M)⌉, the shards of one epoch.
func (c Config) PerEpoch() int64 {
	s := c.Size()
	return c.Samples/s + min(c.Samples%s, 1)
}

// shard is the static part of shard id: its epoch, offset and length.
func (c Config) shard(id ID, k int64) Shard {
	e, i := int64(id)/k, int64(id)%k
	off := i * c.Size()
	return Shard{ID: id, Epoch: int(e), Offset: off, Length: min(c.Size(), c.Samples-off)}
}

// Queue is the shard queue of one job. It is not safe for concurrent use.
type Queue struct {
	cfg    Config
	k      int64
	shards []Shard // by ID
	// The TODO shards by increasing Seq: requeued ones (negative Seq) are
	// fetched before fresh ones. A requeue appends to requeued, as its Seq
	// is the highest of them.
	requeued, fresh []ID
	doing           int
	done            int
	front           int64 // the Seq the next requeued shard gets
	// held indexes the DOING shards by owner, so Release and Held cost the
	// worker's shards, not the whole queue.
	held map[string]map[ID]struct{}
	// changed holds the shards changed since the last Changes or Commit
	// call, with each one's record as it was then (what Rollback restores).
	changed map[ID]Shard
}

// requeueBase is the Seq of the first requeued shard: below every fresh Seq,
// with room for 2^63 requeues.
const requeueBase = math.MinInt64

// New builds the queue of c: every shard TODO, each epoch's shards in a
// seeded shuffled order, epoch after epoch.
func New(c Config) (*Queue, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	k := c.PerEpoch()
	total := k * int64(c.Epochs)
	q := &Queue{cfg: c, k: k, shards: make([]Shard, total), fresh: make([]ID, total), front: requeueBase,
		held: make(map[string]map[ID]struct{})}
	for e := range c.Epochs {
		base := int64(e) * k
		for pos, i := range permutation(k, queueStream(c.Seed, e)) {
			id := ID(base + i)
			s := c.shard(id, k)
			s.Seq = base + int64(pos)
			q.shards[id] = s
			q.fresh[s.Seq] = id
		}
	}
	return q, nil
}

// Config is the queue's configuration.
func (q *Queue) Config() Config { return q.cfg }

// Fetch gives worker the next TODO shard, now DOING and owned by worker.
// It returns false when no shard is TODO (DOING shards may remain, and come
// back if their worker is lost) or when worker is empty.
func (q *Queue) Fetch(worker string, now time.Duration) (Shard, bool) {
	var id ID
	switch {
	case worker == "":
		return Shard{}, false
	case len(q.requeued) > 0:
		id, q.requeued = q.requeued[0], q.requeued[1:]
	case len(q.fresh) > 0:
		id, q.fresh = q.fresh[0], q.fresh[1:]
	default:
		return Shard{}, false
	}
	q.touch(id)
	s := &q.shards[id]
	s.State, s.Owner, s.Lost, s.Since = DOING, worker, "", now
	s.Attempts++
	q.doing++
	q.hold(worker, id)
	return *s, true
}

// Report marks shard id DONE: worker trained it and pushed its gradients.
// Errors: ErrUnknownShard; ErrDuplicate if it is already DONE (nothing
// changes); ErrNotOwner if worker does not hold it. A late report from the
// worker a shard was Released from, before anyone re-fetched it, is
// accepted (see the package comment).
func (q *Queue) Report(worker string, id ID, now time.Duration) error {
	s, err := q.lookup(id)
	if err != nil {
		return fmt.Errorf("shard: report of %d by %q: %w", id, worker, err)
	}
	switch {
	case s.State == DONE:
		return fmt.Errorf("shard: report of %d by %q (done by %q): %w", id, worker, s.Owner, ErrDuplicate)
	case s.State == DOING && s.Owner == worker:
		q.doing--
		q.unhold(worker, id)
	case s.State == TODO && s.Lost != "" && s.Lost == worker:
		q.unqueue(s)
	default:
		return fmt.Errorf("shard: report of %d by %q (%v %q): %w", id, worker, s.State, s.Owner, ErrNotOwner)
	}
	q.touch(id)
	s.State, s.Owner, s.Lost, s.Since = DONE, worker, "", now
	q.done++
	return nil
}

// Release requeues every DOING shard of worker (lost, restarted, removed)
// and returns their IDs, in the order they stood in the queue (by Seq),
// which is the order they go back in. Their late reports are still accepted
// until the shards are fetched again.
func (q *Queue) Release(worker string, now time.Duration) []ID {
	held := make([]*Shard, 0, len(q.held[worker]))
	for id := range q.held[worker] {
		held = append(held, &q.shards[id])
	}
	sort.Slice(held, func(i, j int) bool { return held[i].Seq < held[j].Seq })
	ids := make([]ID, len(held))
	for i, s := range held {
		q.requeue(s, now, worker)
		ids[i] = s.ID
	}
	return ids
}

// Return requeues one DOING shard of worker, unfinished: a removed worker
// handing back its current shard, or a shard whose gradients a policy
// dropped (BACKUP_WORKERS). Errors: ErrUnknownShard, ErrNotOwner.
func (q *Queue) Return(worker string, id ID, now time.Duration) error {
	s, err := q.lookup(id)
	if err != nil {
		return fmt.Errorf("shard: return of %d by %q: %w", id, worker, err)
	}
	if s.State != DOING || s.Owner != worker {
		return fmt.Errorf("shard: return of %d by %q (%v %q): %w", id, worker, s.State, s.Owner, ErrNotOwner)
	}
	q.requeue(s, now, "")
	return nil
}

func (q *Queue) lookup(id ID) (*Shard, error) {
	if id < 0 || int64(id) >= int64(len(q.shards)) {
		return nil, ErrUnknownShard
	}
	return &q.shards[id], nil
}

// requeue puts DOING shard s back to TODO at the front of the queue, behind
// the shards requeued before it.
func (q *Queue) requeue(s *Shard, now time.Duration, lost string) {
	q.touch(s.ID)
	q.unhold(s.Owner, s.ID)
	s.State, s.Owner, s.Lost, s.Since = TODO, "", lost, now
	s.Seq = q.front
	q.front++
	q.requeued = append(q.requeued, s.ID)
	q.doing--
}

// unqueue removes requeued TODO shard s from the queue.
func (q *Queue) unqueue(s *Shard) {
	at := sort.Search(len(q.requeued), func(i int) bool { return q.shards[q.requeued[i]].Seq >= s.Seq })
	q.requeued = slices.Delete(q.requeued, at, at+1)
}

func (q *Queue) hold(worker string, id ID) {
	m := q.held[worker]
	if m == nil {
		m = make(map[ID]struct{})
		q.held[worker] = m
	}
	m[id] = struct{}{}
}

func (q *Queue) unhold(worker string, id ID) {
	delete(q.held[worker], id)
	if len(q.held[worker]) == 0 {
		delete(q.held, worker)
	}
}

// touch notes that shard id is about to change (call it before changing
// the record): its first change since the last commit keeps the record as
// it was.
func (q *Queue) touch(id ID) {
	if q.changed == nil {
		q.changed = make(map[ID]Shard)
	}
	if _, ok := q.changed[id]; !ok {
		q.changed[id] = q.shards[id]
	}
}

// Counts is the number of shards in each state.
func (q *Queue) Counts() (todo, doing, done int) {
	return len(q.requeued) + len(q.fresh), q.doing, q.done
}

// Total is the number of shards over all epochs, K·E.
func (q *Queue) Total() int { return len(q.shards) }

// Finished reports whether every shard is DONE.
func (q *Queue) Finished() bool { return q.done == len(q.shards) }

// Get is shard id.
func (q *Queue) Get(id ID) (Shard, bool) {
	s, err := q.lookup(id)
	if err != nil {
		return Shard{}, false
	}
	return *s, true
}

// Shards is every shard, by ID.
func (q *Queue) Shards() []Shard { return slices.Clone(q.shards) }

// Held is the shards worker holds (DOING), in the order they stood in the
// queue (by Seq).
func (q *Queue) Held(worker string) []Shard {
	var out []Shard
	for id := range q.held[worker] {
		out = append(out, q.shards[id])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// DoneBy counts the DONE shards per worker that completed them: the data
// consumption AntDT Fig. 16 plots against throughput.
func (q *Queue) DoneBy() map[string]int {
	out := make(map[string]int)
	for _, s := range q.shards {
		if s.State == DONE {
			out[s.Owner]++
		}
	}
	return out
}

// Order is the sample order of shard s (Config.Order with the queue's seed).
func (q *Queue) Order(s Shard) []int64 { return q.cfg.Order(s) }

// Changes returns the shards changed since the previous call, by ID, each
// with its whole state, and forgets them. Persist them (Apply overlays them
// on a restored queue) to lose no shard state across a scheduler restart;
// persist before acknowledging the Fetch or Report that caused them.
// Changes is Pending and Commit at once.
func (q *Queue) Changes() []Shard {
	out := q.Pending()
	q.Commit()
	return out
}

// Pending returns the shards changed since the last Changes or Commit
// call, by ID, each with its whole state, without forgetting them: persist
// them, then Commit, or Rollback when persisting failed.
func (q *Queue) Pending() []Shard {
	if len(q.changed) == 0 {
		return nil
	}
	out := make([]Shard, 0, len(q.changed))
	for id := range q.changed {
		out = append(out, q.shards[id])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Commit forgets the pending changes: they are durable.
func (q *Queue) Commit() { q.changed = nil }

// Rollback undoes every change since the last Changes or Commit call: the
// queue is again what was last made durable. A Fetch or Report whose
// changes could not be persisted (a full disk) is then as if it never
// happened, and its caller may try again — never a shard DOING for a
// worker that was told nothing.
func (q *Queue) Rollback() {
	if len(q.changed) == 0 {
		return
	}
	recs := make([]Shard, 0, len(q.changed))
	for _, r := range q.changed {
		recs = append(recs, r)
	}
	q.changed = nil
	if err := q.Apply(recs...); err != nil {
		// The records were the queue's own a moment ago.
		panic("shard: rollback: " + err.Error())
	}
}

// Apply overlays shard records (from Changes or a snapshot) on the queue,
// replacing each shard's state, and rebuilds the queue order and counts. It
// is for recovery: the records are not reported by Changes again. Records
// that do not fit the queue's config, are inconsistent, or would give two
// shards the same Seq are refused and nothing changes.
func (q *Queue) Apply(recs ...Shard) error {
	next := slices.Clone(q.shards)
	for _, r := range recs {
		if err := q.check(r); err != nil {
			return err
		}
		next[r.ID] = r
	}
	// Fresh positions are 0..Total-1, so a slice finds duplicates among
	// them; requeued (negative) positions come only from records.
	fresh := make([]ID, len(next))
	requeued := make(map[int64]ID, len(recs))
	var requeuedTODO []ID
	front := int64(requeueBase)
	doing, done := 0, 0
	held := make(map[string]map[ID]struct{})
	for _, s := range next {
		other, dup := requeued[s.Seq]
		if s.Seq >= 0 {
			other, dup = fresh[s.Seq]-1, fresh[s.Seq] != 0
			fresh[s.Seq] = s.ID + 1
		} else {
			requeued[s.Seq] = s.ID
			front = max(front, s.Seq+1)
		}
		if dup {
			return fmt.Errorf("shard: shards %d and %d both have queue position %d", other, s.ID, s.Seq)
		}
		switch s.State {
		case TODO:
			if s.Seq < 0 {
				requeuedTODO = append(requeuedTODO, s.ID)
			}
		case DOING:
			doing++
			if held[s.Owner] == nil {
				held[s.Owner] = make(map[ID]struct{})
			}
			held[s.Owner][s.ID] = struct{}{}
		case DONE:
			done++
		}
	}
	sort.Slice(requeuedTODO, func(i, j int) bool { return next[requeuedTODO[i]].Seq < next[requeuedTODO[j]].Seq })
	freshTODO := make([]ID, 0, len(next)-doing-done-len(requeuedTODO))
	for _, id := range fresh { // by position
		if id != 0 && next[id-1].State == TODO {
			freshTODO = append(freshTODO, id-1)
		}
	}
	q.shards, q.requeued, q.fresh = next, requeuedTODO, freshTODO
	q.doing, q.done, q.front, q.held = doing, done, front, held
	return nil
}

// check validates one shard record against the queue's config.
func (q *Queue) check(r Shard) error {
	if r.ID < 0 || int64(r.ID) >= int64(len(q.shards)) {
		return fmt.Errorf("shard: record of shard %d: %w (queue has %d)", r.ID, ErrUnknownShard, len(q.shards))
	}
	want := q.cfg.shard(r.ID, q.k)
	switch {
	case r.Epoch != want.Epoch || r.Offset != want.Offset || r.Length != want.Length:
		return fmt.Errorf("shard: record of shard %d is epoch %d [%d,+%d), config says epoch %d [%d,+%d)",
			r.ID, r.Epoch, r.Offset, r.Length, want.Epoch, want.Offset, want.Length)
	case r.State < TODO || r.State > DONE:
		return fmt.Errorf("shard: record of shard %d has invalid state %d", r.ID, int(r.State))
	case r.State == TODO && r.Owner != "":
		return fmt.Errorf("shard: record of shard %d is TODO with owner %q", r.ID, r.Owner)
	case r.State != TODO && r.Owner == "":
		return fmt.Errorf("shard: record of shard %d is %v without owner", r.ID, r.State)
	case r.State != TODO && r.Lost != "":
		return fmt.Errorf("shard: record of shard %d is %v and lost by %q", r.ID, r.State, r.Lost)
	case r.Attempts < 0 || (r.State != TODO && r.Attempts == 0):
		return fmt.Errorf("shard: record of shard %d is %v after %d attempts", r.ID, r.State, r.Attempts)
	case r.Seq >= int64(len(q.shards)):
		return fmt.Errorf("shard: record of shard %d has queue position %d beyond %d", r.ID, r.Seq, len(q.shards))
	}
	return nil
}
