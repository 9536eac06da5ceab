package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// bucketStacks holds the last stacks collection of each job (kelpie job
// stacks), kept with its timeline and deleted with it:
//
//	stacks   <job> → the collection (opaque bytes: the console plane's
//	         CommandResult with its stacks, in protobuf form)
var bucketStacks = []byte("stacks")

// PutStacks saves a job's last stacks collection, replacing the previous.
func (s *boltStore) PutStacks(job string, data []byte) error {
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
func (s *boltStore) GetStacks(job string) ([]byte, bool, error) {
	var out []byte
	err := s.view("get stacks "+job, func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketStacks); b != nil {
			if v := b.Get([]byte(job)); v != nil {
				out = append([]byte{}, v...) // present: not nil, even empty
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

// stacksChunk is the most bytes of a stacks collection one etcd value
// holds: a collection (up to 16 MiB) is kept in chunks, each written in a
// transaction of its own, well under etcd's request limit (1.5 MiB).
const stacksChunk = 512 << 10

func (s *etcdStore) stacksKey(job string, i int) string {
	return fmt.Sprintf("%sstacks/%s/%04x", s.p, job, i)
}

// PutStacks saves a job's last stacks collection, replacing the previous:
// the old chunks go, then the new ones are written in order.
func (s *etcdStore) PutStacks(job string, data []byte) error {
	if job == "" {
		return ErrEmptyName
	}
	if err := s.commit("put stacks "+job, deletePrefix(s.p+"stacks/"+job+"/")); err != nil {
		return err
	}
	for i := 0; i*stacksChunk < len(data) || i == 0; i++ {
		chunk := data[i*stacksChunk : min(len(data), (i+1)*stacksChunk)]
		if err := s.commit("put stacks "+job, clientv3.OpPut(s.stacksKey(job, i), string(chunk))); err != nil {
			return err
		}
	}
	return nil
}

// GetStacks returns a job's last stacks collection, if any.
func (s *etcdStore) GetStacks(job string) ([]byte, bool, error) {
	if job == "" {
		return nil, false, nil
	}
	resp, err := s.get("get stacks "+job, s.p+"stacks/"+job+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		return nil, false, err
	}
	out := []byte{}
	for _, kv := range resp.Kvs {
		out = append(out, kv.Value...)
	}
	return out, true, nil
}
