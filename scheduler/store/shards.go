package store

import (
	"bytes"
	"errors"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/kelpie/kelpie/scheduler/shard"
)

// A job's shard queue is stored as a snapshot plus a change log: the latest
// record of every shard changed since the snapshot, keyed by shard ID. A
// Fetch or Report costs one small write (PutShardChanges); SaveShards folds
// the log into a new snapshot whenever the caller likes (at job start, and
// then every so many changes). LoadShards reads the snapshot and overlays
// the log, which gives back the queue exactly as it was at the last
// committed write.

// ErrNoSnapshot is returned when shard changes are written or read for a
// job whose queue was never saved whole.
var ErrNoSnapshot = errors.New("no shard snapshot")

// PutShards stores snapshot (shard.Queue.MarshalBinary) as job's shard
// state and clears its change log, in one transaction.
func (s *boltStore) PutShards(job string, snapshot []byte) error {
	if job == "" {
		return ErrEmptyName
	}
	return s.update("put shards of "+job, func(tx *bolt.Tx) error {
		b, err := sub(tx, bucketShards, job, true)
		if err != nil {
			return err
		}
		if err := b.DeleteBucket(keyChanges); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
			return err
		}
		return b.Put(keySnapshot, snapshot)
	})
}

// GetShards is job's last snapshot (without the changes since); false if
// none was stored.
func (s *boltStore) GetShards(job string) ([]byte, bool, error) {
	var out []byte
	err := s.view("get shards of "+job, func(tx *bolt.Tx) error {
		b, _ := sub(tx, bucketShards, job, false)
		if b != nil {
			out = bytes.Clone(b.Get(keySnapshot))
		}
		return nil
	})
	return out, out != nil && err == nil, err
}

// PutShardChanges appends shard records (shard.Queue.Changes) to job's
// change log in one transaction; a shard's newer record replaces its older
// one. The job must have a snapshot.
func (s *boltStore) PutShardChanges(job string, changes []shard.Shard) error {
	if len(changes) == 0 {
		return nil
	}
	return s.update("put shard changes of "+job, func(tx *bolt.Tx) error {
		b, _ := sub(tx, bucketShards, job, false)
		if b == nil || b.Get(keySnapshot) == nil {
			return ErrNoSnapshot
		}
		log, err := b.CreateBucketIfNotExists(keyChanges)
		if err != nil {
			return err
		}
		for _, sh := range changes {
			rec, err := sh.MarshalBinary()
			if err != nil {
				return err
			}
			if err := log.Put(u64(uint64(sh.ID)), rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// shardState is job's snapshot (nil if none) and its change records.
func (s *boltStore) shardState(job string) (snap []byte, changes [][]byte, err error) {
	err = s.view("load shards of "+job, func(tx *bolt.Tx) error {
		b, _ := sub(tx, bucketShards, job, false)
		if b == nil {
			return nil
		}
		snap = bytes.Clone(b.Get(keySnapshot))
		log := b.Bucket(keyChanges)
		if log == nil {
			return nil
		}
		if snap == nil {
			return ErrNoSnapshot
		}
		return log.ForEach(func(_, v []byte) error {
			changes = append(changes, bytes.Clone(v))
			return nil
		})
	})
	return snap, changes, err
}
