package store

import (
	bolt "go.etcd.io/bbolt"
)

// bucketStacks holds the last stacks collection of each job (kelpie job
// stacks), kept with its timeline and deleted with it:
//
//	stacks   <job> → the collection (opaque bytes: the console plane's
//	         CommandResult with its stacks, in protobuf form)
var bucketStacks = []byte("stacks")

// PutStacks saves a job's last stacks collection, replacing the previous.
func (s *Store) PutStacks(job string, data []byte) error {
	if job == "" {
		return ErrEmptyName
	}
	return s.update("put stacks "+job, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketStacks)
		if err != nil {
			return err
		}
		return b.Put([]byte(job), data)
	})
}

// GetStacks returns a job's last stacks collection, if any.
func (s *Store) GetStacks(job string) ([]byte, bool, error) {
	var out []byte
	err := s.view("get stacks "+job, func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketStacks); b != nil {
			if v := b.Get([]byte(job)); v != nil {
				out = append([]byte(nil), v...)
			}
		}
		return nil
	})
	return out, out != nil, err
}

// deleteStacks forgets a job's stacks (with its timeline).
func deleteStacks(tx *bolt.Tx, job string) error {
	if b := tx.Bucket(bucketStacks); b != nil {
		return b.Delete([]byte(job))
	}
	return nil
}
