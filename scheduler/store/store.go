// Package store is kelpie's durable scheduler state: jobs and their specs,
// the node registry, actions with their history, the audit log, policy
// settings, the data-shard queues and the recorded timelines. A scheduler
// that restarts reopens it and loses no job and no shard state.
//
// Two backends keep the same records (Store, backend.go): one bbolt file
// (Open; this file and records.go, shards.go, timeline.go), the embedded
// default, and an etcd cluster (OpenEtcd, etcd.go) that scheduler replicas
// share, each write fenced by the writer's leadership, with secrets sealed
// at rest (secrets.go). What follows describes the bbolt file.
//
// Every write is one bbolt transaction, committed (fsynced) before the call
// returns; a process killed at any point leaves each write either wholly in
// the file or not at all. A Store is safe for concurrent use. Values are
// JSON (the shard queue keeps its own compact binary form), keys are chosen
// so cursors list in a useful order: jobs and nodes by name, actions in the
// order they were first stored, the audit log by time.
//
// Layout (buckets):
//
//	meta                          "version" → schema version; "audit-bytes" → the audit log's size
//	jobs                          name → JobRecord
//	nodes/<job>                   node name → NodeRecord
//	actions/<job>/log             8-byte sequence → ActionRecord
//	actions/<job>/id              action ID → its sequence key
//	audit                         8-byte time ‖ 8-byte sequence → AuditEntry
//	policies                      job → settings (opaque bytes)
//	shards/<job>                  "snapshot" → shard.Queue.MarshalBinary
//	shards/<job>/changes          8-byte shard ID → shard.Shard.MarshalBinary
//	timelines/<job>               4-byte frame index → a recorded frame (timeline.go)
package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// schemaVersion is the layout above. A file written by a newer kelpie is
// refused rather than misread.
const schemaVersion = 1

var (
	bucketMeta     = []byte("meta")
	bucketJobs     = []byte("jobs")
	bucketNodes    = []byte("nodes")
	bucketActions  = []byte("actions")
	bucketAudit    = []byte("audit")
	bucketPolicies = []byte("policies")
	bucketShards   = []byte("shards")

	keyVersion    = []byte("version")
	keyAuditBytes = []byte("audit-bytes")
	keyLog        = []byte("log")
	keyIndex      = []byte("id")
	keySnapshot   = []byte("snapshot")
	keyChanges    = []byte("changes")
)

// DefaultTimeout is how long Open waits for another process to release the
// file before it fails.
const DefaultTimeout = time.Second

// Options tune Open.
type Options struct {
	// Timeout is how long to wait for the file lock held by another opener
	// (DefaultTimeout if zero). bbolt holds an exclusive flock while open,
	// so a second scheduler on the same file fails instead of corrupting it.
	Timeout time.Duration
	// AuditMaxBytes and AuditMaxAge bound the audit log (zero: unbounded):
	// each append drops the oldest entries while the log's entries add up
	// to more than AuditMaxBytes or are older than AuditMaxAge, so no
	// caller can grow the file without bound (bbolt reuses the freed
	// pages).
	AuditMaxBytes int64
	AuditMaxAge   time.Duration
}

// boltStore is the embedded backend: one bbolt file.
type boltStore struct {
	db   *bolt.DB
	path string
	now  func() time.Time // fills zero timestamps; replaced in tests

	auditMaxBytes int64
	auditMaxAge   time.Duration
}

// Open opens (creating if needed, with its directory) the state file at
// path with default options.
func Open(path string) (*Store, error) { return OpenWith(path, Options{}) }

// OpenWith opens the state file at path.
func OpenWith(path string, o Options) (*Store, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: open %s: %w", path, err)
		}
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.Timeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("store: open %s: file is locked by another process (waited %v)", path, o.Timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketJobs, bucketNodes, bucketActions, bucketAudit, bucketPolicies, bucketShards, bucketTimelines} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyVersion); v != nil {
			if len(v) != 8 || binary.BigEndian.Uint64(v) > schemaVersion {
				return fmt.Errorf("schema version %x is newer than this kelpie's %d", v, schemaVersion)
			}
			return nil
		}
		return meta.Put(keyVersion, u64(schemaVersion))
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return &Store{backend: &boltStore{db: db, path: path, now: time.Now, auditMaxBytes: o.AuditMaxBytes, auditMaxAge: o.AuditMaxAge}}, nil
}

// Close closes the file, releasing its lock.
func (s *boltStore) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	return nil
}

// Path is the file's path.
func (s *boltStore) Path() string { return s.path }

func (s *boltStore) setNow(now func() time.Time) { s.now = now }

// ErrEmptyName is returned for an empty job, node or action name: bbolt
// keys cannot be empty.
var ErrEmptyName = errors.New("store: empty name")

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// put stores v as JSON under key.
func put(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, data)
}

// get decodes the JSON under key into v; false when the key is absent.
func get(b *bolt.Bucket, key []byte, v any) (bool, error) {
	if b == nil {
		return false, nil
	}
	data := b.Get(key)
	if data == nil {
		return false, nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("decode %q: %w", key, err)
	}
	return true, nil
}

// list decodes every value of b in key order.
func list[T any](b *bolt.Bucket) ([]T, error) {
	out := []T{}
	if b == nil {
		return out, nil
	}
	err := b.ForEach(func(k, v []byte) error {
		if v == nil { // a nested bucket
			return nil
		}
		var x T
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("decode %q: %w", k, err)
		}
		out = append(out, x)
		return nil
	})
	return out, err
}

// sub is the nested bucket name of parent, created when create is set; nil
// when it is absent and not created.
func sub(tx *bolt.Tx, parent []byte, name string, create bool) (*bolt.Bucket, error) {
	p := tx.Bucket(parent)
	if !create {
		return p.Bucket([]byte(name)), nil
	}
	return p.CreateBucketIfNotExists([]byte(name))
}

func (s *boltStore) update(what string, fn func(tx *bolt.Tx) error) error {
	if err := s.db.Update(fn); err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	return nil
}

func (s *boltStore) view(what string, fn func(tx *bolt.Tx) error) error {
	if err := s.db.View(fn); err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	return nil
}

// stamp is t in UTC without its monotonic reading, or now if t is zero.
func (s *boltStore) stamp(t time.Time) time.Time {
	if t.IsZero() {
		t = s.now()
	}
	return t.UTC().Round(0)
}
