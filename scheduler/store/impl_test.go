package store

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kelpie/kelpie/scheduler/store/etcdtest"
)

// impl is one backend as the tests see it: the same tests run against
// each (eachImpl).
type impl struct {
	name string
	// open opens a fresh, empty store with a clock that starts at t0 and
	// ticks a second per reading (safe for concurrent use), closed at the
	// test's end; where is what reopen takes to open the same state again.
	open   func(t *testing.T, o Options) (s *Store, where string)
	reopen func(t *testing.T, where string, o Options) (*Store, error)
	// changeRecords counts job's shard change records; putRawChange
	// writes one as it is, bypassing the store (to corrupt it).
	changeRecords func(t *testing.T, s *Store, job string) int
	putRawChange  func(t *testing.T, s *Store, job string, id uint64, rec []byte)
}

func tickingClock() func() time.Time {
	var mu sync.Mutex
	tick := t0
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		tick = tick.Add(time.Second)
		return tick
	}
}

var boltImpl = impl{
	name: "bbolt",
	open: func(t *testing.T, o Options) (*Store, string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "state", "kelpie.db")
		s, err := OpenWith(path, o)
		if err != nil {
			t.Fatal(err)
		}
		s.setNow(tickingClock())
		t.Cleanup(func() { s.Close() })
		return s, path
	},
	reopen: func(_ *testing.T, path string, o Options) (*Store, error) { return OpenWith(path, o) },
	changeRecords: func(t *testing.T, s *Store, job string) int {
		n := 0
		must(t, s.backend.(*boltStore).db.View(func(tx *bolt.Tx) error {
			if b := tx.Bucket(bucketShards).Bucket([]byte(job)); b != nil && b.Bucket(keyChanges) != nil {
				n = b.Bucket(keyChanges).Stats().KeyN
			}
			return nil
		}))
		return n
	},
	putRawChange: func(t *testing.T, s *Store, job string, id uint64, rec []byte) {
		must(t, s.backend.(*boltStore).db.Update(func(tx *bolt.Tx) error {
			log, err := tx.Bucket(bucketShards).Bucket([]byte(job)).CreateBucketIfNotExists(keyChanges)
			if err != nil {
				return err
			}
			return log.Put(u64(id), rec)
		}))
	},
}

// etcdImpl runs the tests on a one-member etcd cluster of the test's own,
// each store under a prefix of its own.
func etcdImpl(t *testing.T) impl {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	n := 0
	openAt := func(prefix string, o Options) (*Store, error) {
		return OpenEtcd(cli, EtcdOptions{Prefix: prefix, AuditMaxBytes: o.AuditMaxBytes, AuditMaxAge: o.AuditMaxAge})
	}
	raw := func(s *Store) *etcdStore { return s.backend.(*etcdStore) }
	return impl{
		name: "etcd",
		open: func(t *testing.T, o Options) (*Store, string) {
			t.Helper()
			n++
			prefix := fmt.Sprintf("/test%d/", n)
			s, err := openAt(prefix, o)
			if err != nil {
				t.Fatal(err)
			}
			s.setNow(tickingClock())
			t.Cleanup(func() { s.Close() })
			return s, prefix
		},
		reopen: func(_ *testing.T, prefix string, o Options) (*Store, error) { return openAt(prefix, o) },
		changeRecords: func(t *testing.T, s *Store, job string) int {
			e := raw(s)
			resp, err := e.get("count", e.p+"shards/"+job+"/changes/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			must(t, err)
			return int(resp.Count)
		},
		putRawChange: func(t *testing.T, s *Store, job string, id uint64, rec []byte) {
			e := raw(s)
			_, err := e.cli.Put(context.Background(), fmt.Sprintf("%sshards/%s/changes/%016x", e.p, job, id), string(rec))
			must(t, err)
		},
	}
}

// eachImpl runs f against every backend, as subtests named after them.
func eachImpl(t *testing.T, f func(t *testing.T, im impl)) {
	t.Run(boltImpl.name, func(t *testing.T) { f(t, boltImpl) })
	t.Run("etcd", func(t *testing.T) { f(t, etcdImpl(t)) })
}
