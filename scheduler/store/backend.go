package store

import (
	"fmt"
	"time"

	"github.com/kelpie/kelpie/scheduler/shard"
)

// Store is the scheduler's durable state, on one of two backends: a bbolt
// file (Open, the embedded default) or an etcd cluster that several
// scheduler replicas share (OpenEtcd). Both keep the same records with the
// same semantics; the methods are the backend's.
type Store struct {
	backend
}

// backend is what a storage backend implements: every record kind of the
// package, one atomic write per call.
type backend interface {
	Close() error
	// Path names where the state lives: the bbolt file, or the etcd
	// endpoints and key prefix.
	Path() string
	setNow(func() time.Time)

	PutJob(JobRecord) error
	GetJob(name string) (JobRecord, bool, error)
	ListJobs() ([]JobRecord, error)
	DeleteJob(name string) error

	PutNode(job string, n NodeRecord) error
	SetNodeAddr(job, node, role, addr string) error
	ListNodes(job string) ([]NodeRecord, error)
	DeleteNode(job, name string) error

	PutAction(job string, a ActionRecord) error
	GetAction(job, id string) (ActionRecord, bool, error)
	ListActions(job string) ([]ActionRecord, error)

	Audit(AuditEntry) (AuditEntry, error)
	ListAudit(since time.Time, limit int) ([]AuditEntry, error)
	LastAudit(n int) ([]AuditEntry, error)

	PutPolicies(job string, settings []byte) error
	GetPolicies(job string) ([]byte, bool, error)

	PutShards(job string, snapshot []byte) error
	GetShards(job string) ([]byte, bool, error)
	PutShardChanges(job string, changes []shard.Shard) error
	shardState(job string) (snap []byte, changes [][]byte, err error)

	PutTimeline(job string, from int, frames [][]byte) error
	LoadTimeline(job string) ([][]byte, error)
	DeleteTimeline(job string) error

	PutStacks(job string, data []byte) error
	GetStacks(job string) ([]byte, bool, error)
}

// SaveShards snapshots q as job's shard state and clears the change log.
// On success q's pending Changes are durable and are dropped from q.
func (s *Store) SaveShards(job string, q *shard.Queue) error {
	b, err := q.MarshalBinary()
	if err != nil {
		return fmt.Errorf("store: save shards of %s: %w", job, err)
	}
	if err := s.PutShards(job, b); err != nil {
		return err
	}
	q.Changes()
	return nil
}

// LoadShards rebuilds job's shard queue from its snapshot and change log;
// false if the job has no shard state.
func (s *Store) LoadShards(job string) (*shard.Queue, bool, error) {
	snap, changes, err := s.shardState(job)
	if err != nil {
		return nil, false, fmt.Errorf("store: load shards of %s: %w", job, err)
	}
	if snap == nil {
		return nil, false, nil
	}
	recs := make([]shard.Shard, len(changes))
	for i, c := range changes {
		if err := recs[i].UnmarshalBinary(c); err != nil {
			return nil, false, fmt.Errorf("store: load shards of %s: change %d: %w", job, i, err)
		}
	}
	q, err := shard.Restore(snap)
	if err == nil {
		err = q.Apply(recs...)
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: load shards of %s: %w", job, err)
	}
	return q, true, nil
}
