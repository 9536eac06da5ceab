package store

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// bucketTimelines holds each job's recorded timeline (scheduler/timeline):
//
//	timelines/<job>   4-byte frame index → frame (opaque bytes: the
//	                  console plane's TimelineFrame in protobuf form)
var bucketTimelines = []byte("timelines")

// PutTimeline writes a job's timeline from frame index from on: frames
// replace what was stored at from, from+1, ..., and any frame stored at or
// beyond from+len(frames) is deleted (a downsampled timeline is shorter).
// One transaction: the stored timeline is the old one or the new one.
func (s *boltStore) PutTimeline(job string, from int, frames [][]byte) error {
	if job == "" {
		return ErrEmptyName
	}
	if from < 0 {
		return fmt.Errorf("store: put timeline %s: negative index %d", job, from)
	}
	return s.update("put timeline "+job, func(tx *bolt.Tx) error {
		b, err := sub(tx, bucketTimelines, job, true)
		if err != nil {
			return err
		}
		for i, f := range frames {
			if err := b.Put(u32(from+i), f); err != nil {
				return err
			}
		}
		c := b.Cursor()
		for k, _ := c.Seek(u32(from + len(frames))); k != nil; k, _ = c.Seek(u32(from + len(frames))) {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

// LoadTimeline returns a job's stored frames in order (none if there are
// none).
func (s *boltStore) LoadTimeline(job string) ([][]byte, error) {
	var out [][]byte
	err := s.view("load timeline "+job, func(tx *bolt.Tx) error {
		b, err := sub(tx, bucketTimelines, job, false)
		if err != nil || b == nil {
			return err
		}
		return b.ForEach(func(_, v []byte) error {
			out = append(out, append([]byte(nil), v...))
			return nil
		})
	})
	return out, err
}

// DeleteTimeline forgets a job's timeline (retention), and the stacks
// saved with it.
func (s *boltStore) DeleteTimeline(job string) error {
	return s.update("delete timeline "+job, func(tx *bolt.Tx) error {
		if err := deleteStacks(tx, job); err != nil {
			return err
		}
		err := tx.Bucket(bucketTimelines).DeleteBucket([]byte(job))
		if errors.Is(err, bolterrors.ErrBucketNotFound) {
			return nil
		}
		return err
	})
}

func u32(v int) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
