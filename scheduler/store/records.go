package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// JobRecord is a submitted job.
type JobRecord struct {
	Name        string    `json:"name"`
	SpecYAML    string    `json:"spec_yaml"`
	State       string    `json:"state"` // the job manager's state: pending, running, completed, failed, stopped…
	Error       string    `json:"error,omitempty"`
	SubmittedBy string    `json:"submitted_by,omitempty"`
	Submitted   time.Time `json:"submitted"`
	Updated     time.Time `json:"updated"`
	Finished    time.Time `json:"finished,omitzero"`
	Result      []byte    `json:"result,omitempty"` // the job's result object (JSON), once it has one
}

// PutJob creates or replaces the job j.Name. A zero Submitted keeps the
// stored one (or is now, for a new job); a zero Updated is now.
func (s *boltStore) PutJob(j JobRecord) error {
	if j.Name == "" {
		return ErrEmptyName
	}
	return s.update("put job "+j.Name, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketJobs)
		if j.Submitted.IsZero() {
			var old JobRecord
			if _, err := get(b, []byte(j.Name), &old); err != nil {
				return err
			}
			j.Submitted = old.Submitted
		}
		j.Submitted, j.Updated = s.stamp(j.Submitted), s.stamp(j.Updated)
		if !j.Finished.IsZero() {
			j.Finished = s.stamp(j.Finished)
		}
		return put(b, []byte(j.Name), j)
	})
}

// GetJob is job name; false if there is none.
func (s *boltStore) GetJob(name string) (JobRecord, bool, error) {
	var j JobRecord
	var ok bool
	err := s.view("get job "+name, func(tx *bolt.Tx) (err error) {
		ok, err = get(tx.Bucket(bucketJobs), []byte(name), &j)
		return err
	})
	return j, ok && err == nil, err
}

// ListJobs is every job, by name.
func (s *boltStore) ListJobs() ([]JobRecord, error) {
	var out []JobRecord
	err := s.view("list jobs", func(tx *bolt.Tx) (err error) {
		out, err = list[JobRecord](tx.Bucket(bucketJobs))
		return err
	})
	return out, err
}

// DeleteJob removes job name with its nodes, actions, policies and shard
// state. The audit log keeps its entries. Deleting a job that does not
// exist is not an error.
func (s *boltStore) DeleteJob(name string) error {
	if name == "" {
		return ErrEmptyName
	}
	return s.update("delete job "+name, func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucketJobs).Delete([]byte(name)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketPolicies).Delete([]byte(name)); err != nil {
			return err
		}
		for _, parent := range [][]byte{bucketNodes, bucketActions, bucketShards, bucketTimelines} {
			err := tx.Bucket(parent).DeleteBucket([]byte(name))
			if err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return err
			}
		}
		return nil
	})
}

// NodeRecord is one node (server or worker process) of a job.
type NodeRecord struct {
	Name       string    `json:"name"` // server-0, worker-3…
	Role       string    `json:"role"`
	Addr       string    `json:"addr,omitempty"`
	Host       string    `json:"host,omitempty"`
	Pid        int       `json:"pid,omitempty"`
	State      string    `json:"state"` // starting, running, lost, removed…
	Restarts   int       `json:"restarts,omitempty"`
	BatchSize  int       `json:"batch_size,omitempty"`
	Registered time.Time `json:"registered"`
	Updated    time.Time `json:"updated"`
}

// PutNode creates or replaces node n.Name of job. A zero Registered keeps
// the stored one (or is now); an empty Addr keeps the stored one (state
// changes do not know it: SetNodeAddr sets it); a zero Updated is now.
func (s *boltStore) PutNode(job string, n NodeRecord) error {
	if job == "" || n.Name == "" {
		return ErrEmptyName
	}
	return s.update(fmt.Sprintf("put node %s/%s", job, n.Name), func(tx *bolt.Tx) error {
		b, err := sub(tx, bucketNodes, job, true)
		if err != nil {
			return err
		}
		if n.Registered.IsZero() || n.Addr == "" {
			var old NodeRecord
			if _, err := get(b, []byte(n.Name), &old); err != nil {
				return err
			}
			if n.Registered.IsZero() {
				n.Registered = old.Registered
			}
			if n.Addr == "" {
				n.Addr = old.Addr
			}
		}
		n.Registered, n.Updated = s.stamp(n.Registered), s.stamp(n.Updated)
		return put(b, []byte(n.Name), n)
	})
}

// SetNodeAddr records the address node (of role) of job serves on — a
// server that registered again after a restart, or was added — keeping the
// rest of its record (a new record is in state starting).
func (s *boltStore) SetNodeAddr(job, node, role, addr string) error {
	if job == "" || node == "" {
		return ErrEmptyName
	}
	return s.update(fmt.Sprintf("set address of %s/%s", job, node), func(tx *bolt.Tx) error {
		b, err := sub(tx, bucketNodes, job, true)
		if err != nil {
			return err
		}
		n := NodeRecord{Name: node, Role: role, State: "starting"}
		if _, err := get(b, []byte(node), &n); err != nil {
			return err
		}
		n.Addr, n.Registered, n.Updated = addr, s.stamp(n.Registered), s.stamp(time.Time{})
		return put(b, []byte(node), n)
	})
}

// ListNodes is the nodes of job, by name.
func (s *boltStore) ListNodes(job string) ([]NodeRecord, error) {
	var out []NodeRecord
	err := s.view("list nodes of "+job, func(tx *bolt.Tx) error {
		b, err := sub(tx, bucketNodes, job, false)
		if err == nil {
			out, err = list[NodeRecord](b)
		}
		return err
	})
	return out, err
}

// DeleteNode removes node name of job (a worker scaled away).
func (s *boltStore) DeleteNode(job, name string) error {
	if job == "" || name == "" {
		return ErrEmptyName
	}
	return s.update(fmt.Sprintf("delete node %s/%s", job, name), func(tx *bolt.Tx) error {
		b, _ := sub(tx, bucketNodes, job, false)
		if b == nil {
			return nil
		}
		return b.Delete([]byte(name))
	})
}

// ActionRecord is one action a policy proposed or an operator triggered,
// with the reason and numbers behind it and every state it went through.
type ActionRecord struct {
	ID        string             `json:"id"`
	Kind      string             `json:"kind"` // KILL_RESTART, ADJUST_BS, BACKUP_WORKERS, SCALE_OUT…
	Node      string             `json:"node,omitempty"`
	Reason    string             `json:"reason"`
	Predicted string             `json:"predicted,omitempty"` // predicted effect, in words
	Numbers   map[string]float64 `json:"numbers,omitempty"`   // the figures behind the reason
	Params    map[string]string  `json:"params,omitempty"`
	State     string             `json:"state"` // proposed, approved, rejected, dispatched, applied, failed…
	Actor     string             `json:"actor,omitempty"`
	Note      string             `json:"note,omitempty"`
	Iteration int64              `json:"iteration,omitempty"` // target or applied iteration
	Created   time.Time          `json:"created"`
	Updated   time.Time          `json:"updated"`
	// History is kept by the store: one event per state the action
	// entered. What the caller passes here is ignored.
	History []ActionEvent `json:"history"`
	// Realized is what the action did once applied, as the scheduler
	// measured it (opaque JSON: the console plane's Realized).
	Realized json.RawMessage `json:"realized,omitempty"`
}

// ActionEvent is one state change of an action.
type ActionEvent struct {
	State string    `json:"state"`
	At    time.Time `json:"at"`
	Actor string    `json:"actor,omitempty"`
	Note  string    `json:"note,omitempty"`
}

// PutAction creates or updates action a.ID of job. The first put fixes
// Created (now if zero) and the action's place in ListActions; every put
// whose State differs from the stored one appends an event (State,
// Updated, Actor, Note) to History. A zero Updated is now.
func (s *boltStore) PutAction(job string, a ActionRecord) error {
	if job == "" || a.ID == "" {
		return ErrEmptyName
	}
	return s.update(fmt.Sprintf("put action %s/%s", job, a.ID), func(tx *bolt.Tx) error {
		b, err := sub(tx, bucketActions, job, true)
		if err != nil {
			return err
		}
		logb, err := b.CreateBucketIfNotExists(keyLog)
		if err != nil {
			return err
		}
		idx, err := b.CreateBucketIfNotExists(keyIndex)
		if err != nil {
			return err
		}
		a.Updated = s.stamp(a.Updated)
		key := idx.Get([]byte(a.ID))
		var old ActionRecord
		if key == nil {
			seq, err := logb.NextSequence()
			if err != nil {
				return err
			}
			key = u64(seq)
			if err := idx.Put([]byte(a.ID), key); err != nil {
				return err
			}
			a.Created, a.History = s.stamp(a.Created), nil
		} else {
			key = bytes.Clone(key)
			if _, err := get(logb, key, &old); err != nil {
				return err
			}
			a.Created, a.History = old.Created, old.History
		}
		if len(a.History) == 0 || old.State != a.State {
			a.History = append(a.History, ActionEvent{State: a.State, At: a.Updated, Actor: a.Actor, Note: a.Note})
		}
		return put(logb, key, a)
	})
}

// GetAction is action id of job; false if there is none.
func (s *boltStore) GetAction(job, id string) (ActionRecord, bool, error) {
	var a ActionRecord
	var ok bool
	err := s.view(fmt.Sprintf("get action %s/%s", job, id), func(tx *bolt.Tx) error {
		b, _ := sub(tx, bucketActions, job, false)
		if b == nil || id == "" {
			return nil
		}
		key := b.Bucket(keyIndex).Get([]byte(id))
		if key == nil {
			return nil
		}
		var err error
		ok, err = get(b.Bucket(keyLog), key, &a)
		return err
	})
	return a, ok && err == nil, err
}

// ListActions is the actions of job in the order they were first stored.
func (s *boltStore) ListActions(job string) ([]ActionRecord, error) {
	var out []ActionRecord
	err := s.view("list actions of "+job, func(tx *bolt.Tx) error {
		b, _ := sub(tx, bucketActions, job, false)
		if b == nil {
			out = []ActionRecord{}
			return nil
		}
		var err error
		out, err = list[ActionRecord](b.Bucket(keyLog))
		return err
	})
	return out, err
}

// AuditEntry is one operator or policy request and the gate's decision.
type AuditEntry struct {
	At      time.Time `json:"at"`
	Who     string    `json:"who"`
	Role    string    `json:"role"` // viewer, operator, admin, policy…
	What    string    `json:"what"` // the request: "approve action a-12", "submit job mnist"
	Job     string    `json:"job,omitempty"`
	Allowed bool      `json:"allowed"`
	Reason  string    `json:"reason,omitempty"`
	// Seq is set by the store: the entry's place among all entries, which
	// orders entries of the same At.
	Seq uint64 `json:"seq"`
}

// auditKey orders entries by At, then by insertion. Times are biased by
// 2^63 so those before 1970 sort first too.
func auditKey(at time.Time, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(at.UnixNano())^(1<<63))
	return binary.BigEndian.AppendUint64(k, seq)
}

// MaxAuditText bounds an audit entry's What and Reason (bytes): callers
// bound what they pass, this keeps one entry from being large whatever
// they do.
const MaxAuditText = 4096

// Audit appends e to the audit log; a zero At is now. It returns the entry
// as stored. With a retention (Options.AuditMaxBytes, AuditMaxAge) it then
// drops the oldest entries beyond it.
func (s *boltStore) Audit(e AuditEntry) (AuditEntry, error) {
	e.At = s.stamp(e.At)
	e.What, e.Reason = truncate(e.What, MaxAuditText), truncate(e.Reason, MaxAuditText)
	err := s.update("audit", func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAudit)
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		e.Seq = seq
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if err := b.Put(auditKey(e.At, seq), data); err != nil {
			return err
		}
		return s.pruneAudit(tx, int64(len(data)))
	})
	return e, err
}

// pruneAudit keeps the audit log within its retention after an entry of
// added bytes was appended. The log's size is kept in meta, with or
// without a retention (counted once by a scan when absent: a file written
// by an older kelpie).
func (s *boltStore) pruneAudit(tx *bolt.Tx, added int64) error {
	meta, b := tx.Bucket(bucketMeta), tx.Bucket(bucketAudit)
	var size int64
	if v := meta.Get(keyAuditBytes); len(v) == 8 {
		size = int64(binary.BigEndian.Uint64(v)) + added
	} else {
		_ = b.ForEach(func(_, v []byte) error {
			size += int64(len(v))
			return nil
		})
	}
	var cutoff []byte
	if s.auditMaxAge > 0 {
		cutoff = auditKey(s.now().Add(-s.auditMaxAge), 0)
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.First() {
		old := cutoff != nil && bytes.Compare(k, cutoff) < 0
		over := s.auditMaxBytes > 0 && size > s.auditMaxBytes
		if !old && !over {
			break
		}
		size -= int64(len(v))
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return meta.Put(keyAuditBytes, u64(uint64(max(size, 0))))
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ListAudit is the entries at or after since, oldest first, at most limit
// of them (all if limit ≤ 0). To page, pass the last entry's At again and
// skip the entries with a Seq already seen.
func (s *boltStore) ListAudit(since time.Time, limit int) ([]AuditEntry, error) {
	out := []AuditEntry{}
	err := s.view("list audit", func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		start := auditKey(since, 0)
		if since.IsZero() {
			start = nil
		}
		k, v := c.Seek(start)
		if start == nil {
			k, v = c.First()
		}
		for ; k != nil && (limit <= 0 || len(out) < limit); k, v = c.Next() {
			var e AuditEntry
			if err := jsonDecode(k, v, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// LastAudit is the newest n entries (n > 0), oldest first.
func (s *boltStore) LastAudit(n int) ([]AuditEntry, error) {
	out := []AuditEntry{}
	err := s.view("last audit", func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Last(); k != nil && len(out) < n; k, v = c.Prev() {
			var e AuditEntry
			if err := jsonDecode(k, v, &e); err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, err
}

// PutPolicies stores the policy settings of job (opaque to the store).
// Cluster-wide settings can use a reserved name that no job takes.
func (s *boltStore) PutPolicies(job string, settings []byte) error {
	if job == "" {
		return ErrEmptyName
	}
	return s.update("put policies of "+job, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPolicies).Put([]byte(job), settings)
	})
}

// GetPolicies is the policy settings of job; false if none were stored.
func (s *boltStore) GetPolicies(job string) ([]byte, bool, error) {
	var out []byte
	var ok bool
	err := s.view("get policies of "+job, func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketPolicies).Get([]byte(job))
		out, ok = bytes.Clone(v), v != nil
		return nil
	})
	return out, ok && err == nil, err
}

func jsonDecode(k, v []byte, x any) error {
	if err := json.Unmarshal(v, x); err != nil {
		return fmt.Errorf("decode %x: %w", k, err)
	}
	return nil
}
