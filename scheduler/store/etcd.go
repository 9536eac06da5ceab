package store

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kelpie/kelpie/scheduler/shard"
)

// The etcd backend keeps the same records as the bbolt one under one key
// prefix (default /kelpie/), so that scheduler replicas share them:
//
//	jobs/<job>                       JobRecord
//	nodes/<job>/<node>               NodeRecord
//	actions/<job>/seq                the job's last action sequence
//	actions/<job>/log/<%016x seq>    ActionRecord
//	actions/<job>/id/<action ID>     its log key
//	audit/<hex auditKey>             AuditEntry
//	meta/audit-seq, meta/audit-bytes the audit log's sequence and size
//	policies/<job>                   settings
//	shards/<job>/snapshot            shard.Queue.MarshalBinary
//	shards/<job>/changes/<%016x id>  shard.Shard.MarshalBinary
//	timelines/<job>/<%08x frame>     a recorded frame
//	secrets/<name>                   AES-GCM sealed (secrets.go)
//
// Every write is one etcd transaction. With a fence (EtcdOptions.Fence:
// the scheduler's leadership) the transaction is conditioned on it, so a
// replica that lost its leadership writes nothing: its write fails with
// ErrFenced. Read-modify-writes (an action's history, the audit log's
// sequence) are serialized inside the process; only the leader writes.
//
// etcd bounds a transaction's operations (--max-txn-ops, default 128) and
// a request's size (--max-request-bytes, default 1.5 MiB). Writes of many
// records (shard changes, a timeline rewrite) are split into transactions
// of at most maxOps operations, each fenced; a snapshot of a job's shard
// queue is one value and must fit in a request.

// DefaultEtcdPrefix is the key prefix of the etcd backend.
const DefaultEtcdPrefix = "/kelpie/"

// maxOps is the most operations the etcd backend puts in one transaction
// (etcd's default --max-txn-ops is 128).
const maxOps = 100

// ErrFenced is returned for a write of a scheduler that no longer leads:
// the election key it was fenced with is gone or was created again.
var ErrFenced = errors.New("fenced: this scheduler no longer leads")

// EtcdOptions configure OpenEtcd.
type EtcdOptions struct {
	// Prefix is the key prefix (DefaultEtcdPrefix if empty); several
	// clusters of schedulers can share an etcd under different ones.
	Prefix string
	// Fence, when set, is the condition every write is made under (the
	// election's leader key still being the one this replica created).
	Fence func() clientv3.Cmp
	// Refused, when set, is told of every write the fence refused (what
	// it was), before the writer gets ErrFenced: callers that drop store
	// errors still leave a trace.
	Refused func(what string)
	// SecretKey is the 32-byte AES-256-GCM key secrets are sealed with
	// (Store.Secrets); without one, secrets cannot be stored.
	SecretKey []byte
	// AuditMaxBytes and AuditMaxAge bound the audit log (Options).
	AuditMaxBytes int64
	AuditMaxAge   time.Duration
	// Timeout bounds each etcd request (default 10 s).
	Timeout time.Duration
}

// ParseEtcdURL splits etcd://HOST:PORT[,HOST:PORT…] into endpoints. A
// https:// scheme on the whole URL (etcds://) asks for TLS.
func ParseEtcdURL(u string) (endpoints []string, secure bool, err error) {
	rest, ok := strings.CutPrefix(u, "etcd://")
	if !ok {
		if rest, ok = strings.CutPrefix(u, "etcds://"); !ok {
			return nil, false, fmt.Errorf("store: %q is not etcd://HOST:PORT[,HOST:PORT…] (or etcds:// for TLS)", u)
		}
		secure = true
	}
	for _, e := range strings.Split(rest, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if strings.ContainsAny(e, "/?#@") {
			return nil, false, fmt.Errorf("store: etcd endpoint %q: want HOST:PORT", e)
		}
		endpoints = append(endpoints, e)
	}
	if len(endpoints) == 0 {
		return nil, false, fmt.Errorf("store: %q names no etcd endpoint", u)
	}
	return endpoints, secure, nil
}

// DialEtcd connects to etcd (tlsCfg nil for plaintext). The client is the
// caller's to close.
func DialEtcd(endpoints []string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	scheme := "http://"
	if tlsCfg != nil {
		scheme = "https://"
	}
	eps := make([]string, len(endpoints))
	for i, e := range endpoints {
		eps[i] = scheme + e
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsCfg, DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("store: etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, nil
}

// ProbeEtcd checks that etcd answers a read through cli within timeout.
// When it does not, the error says why for each endpoint, from a
// connection of its own: refused, or what the TLS handshake said (a
// server certificate signed by another CA, a client certificate etcd
// requires and did not get) — the etcd client itself only retries, and a
// scheduler would wait to lead for ever.
func ProbeEtcd(ctx context.Context, cli *clientv3.Client, endpoints []string, tlsCfg *tls.Config, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	_, err := cli.Get(pctx, "kelpie-probe", clientv3.WithCountOnly())
	cancel()
	if err == nil {
		return nil
	}
	var why []string
	for _, ep := range endpoints {
		if e := probeEndpoint(ep, tlsCfg); e != nil {
			why = append(why, ep+": "+e.Error())
		}
	}
	if len(why) == 0 {
		why = append(why, err.Error())
	}
	return fmt.Errorf("store: etcd %s does not answer within %v: %s", strings.Join(endpoints, ","), timeout, strings.Join(why, "; "))
}

// probeEndpoint connects to one etcd endpoint and, with TLS, shakes hands
// and waits briefly for an alert (TLS 1.3 servers reject a client's
// certificate after the client's handshake is done).
func probeEndpoint(ep string, tlsCfg *tls.Config) error {
	conn, err := net.DialTimeout("tcp", ep, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if tlsCfg == nil {
		return nil
	}
	cfg := tlsCfg.Clone()
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(ep)
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		return err
	}
	_ = tc.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := tc.Read(make([]byte, 1)); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // the server waits for the client to speak: accepted
		}
		return err
	}
	return nil
}

// etcdStore is the replicated backend.
type etcdStore struct {
	cli     *clientv3.Client
	p       string
	fence   func() clientv3.Cmp
	refused func(what string)
	timeout time.Duration
	sealer  *sealer // nil: no secret key

	mu  sync.Mutex // serializes read-modify-writes
	now func() time.Time

	auditMaxBytes int64
	auditMaxAge   time.Duration
}

// OpenEtcd opens the state kept in etcd through cli (which stays the
// caller's: Close does not close it). It checks that etcd answers.
func OpenEtcd(cli *clientv3.Client, o EtcdOptions) (*Store, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultEtcdPrefix
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	s := &etcdStore{cli: cli, p: o.Prefix, fence: o.Fence, refused: o.Refused, timeout: o.Timeout, now: time.Now,
		auditMaxBytes: o.AuditMaxBytes, auditMaxAge: o.AuditMaxAge}
	if o.SecretKey != nil {
		var err error
		if s.sealer, err = newSealer(o.SecretKey); err != nil {
			return nil, err
		}
	}
	var version uint64
	ok, err := s.getJSON("open", s.p+"meta/version", &version)
	if err != nil {
		return nil, err
	}
	if ok && version > schemaVersion {
		return nil, fmt.Errorf("store: open %s: schema version %d is newer than this kelpie's %d", s.Path(), version, schemaVersion)
	}
	if !ok {
		if err := s.commit("open", putJSON(s.p+"meta/version", uint64(schemaVersion))); err != nil {
			return nil, err
		}
	}
	return &Store{backend: s}, nil
}

func (s *etcdStore) Close() error { return nil }

func (s *etcdStore) Path() string {
	return "etcd://" + strings.Join(s.cli.Endpoints(), ",") + s.p
}

func (s *etcdStore) setNow(now func() time.Time) { s.now = now }

func (s *etcdStore) stamp(t time.Time) time.Time {
	if t.IsZero() {
		t = s.now()
	}
	return t.UTC().Round(0)
}

// commit runs ops in one transaction, under the fence if there is one.
func (s *etcdStore) commit(what string, ops ...clientv3.Op) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	txn := s.cli.Txn(ctx)
	if s.fence != nil {
		txn = txn.If(s.fence())
	}
	resp, err := txn.Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("store: %s: %w", what, err)
	}
	if !resp.Succeeded {
		if s.refused != nil {
			s.refused(what)
		}
		return fmt.Errorf("store: %s: %w", what, ErrFenced)
	}
	return nil
}

// commitChunks commits ops in transactions of at most maxOps, in order.
func (s *etcdStore) commitChunks(what string, ops []clientv3.Op) error {
	for len(ops) > 0 {
		n := min(len(ops), maxOps)
		if err := s.commit(what, ops[:n]...); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

func (s *etcdStore) get(what, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	resp, err := s.cli.Get(ctx, key, opts...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	return resp, nil
}

// getValue is the value at key; nil if absent.
func (s *etcdStore) getValue(what, key string) ([]byte, error) {
	resp, err := s.get(what, key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	return append([]byte{}, resp.Kvs[0].Value...), nil // present: not nil, even empty
}

func (s *etcdStore) getJSON(what, key string, v any) (bool, error) {
	data, err := s.getValue(what, key)
	if err != nil || data == nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("store: %s: decode %q: %w", what, key, err)
	}
	return true, nil
}

func listJSON[T any](s *etcdStore, what, prefix string) ([]T, error) {
	resp, err := s.get(what, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var x T
		if err := json.Unmarshal(kv.Value, &x); err != nil {
			return nil, fmt.Errorf("store: %s: decode %q: %w", what, kv.Key, err)
		}
		out = append(out, x)
	}
	return out, nil
}

func putJSON(key string, v any) clientv3.Op {
	data, err := json.Marshal(v)
	if err != nil { // the records are plain structs: cannot happen
		panic(err)
	}
	return clientv3.OpPut(key, string(data))
}

func deletePrefix(prefix string) clientv3.Op { return clientv3.OpDelete(prefix, clientv3.WithPrefix()) }

func (s *etcdStore) PutJob(j JobRecord) error {
	if j.Name == "" {
		return ErrEmptyName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	what := "put job " + j.Name
	if j.Submitted.IsZero() {
		var old JobRecord
		if _, err := s.getJSON(what, s.p+"jobs/"+j.Name, &old); err != nil {
			return err
		}
		j.Submitted = old.Submitted
	}
	j.Submitted, j.Updated = s.stamp(j.Submitted), s.stamp(j.Updated)
	if !j.Finished.IsZero() {
		j.Finished = s.stamp(j.Finished)
	}
	return s.commit(what, putJSON(s.p+"jobs/"+j.Name, j))
}

func (s *etcdStore) GetJob(name string) (JobRecord, bool, error) {
	var j JobRecord
	if name == "" {
		return j, false, nil
	}
	ok, err := s.getJSON("get job "+name, s.p+"jobs/"+name, &j)
	return j, ok && err == nil, err
}

func (s *etcdStore) ListJobs() ([]JobRecord, error) {
	return listJSON[JobRecord](s, "list jobs", s.p+"jobs/")
}

func (s *etcdStore) DeleteJob(name string) error {
	if name == "" {
		return ErrEmptyName
	}
	return s.commit("delete job "+name, clientv3.OpDelete(s.p+"jobs/"+name), clientv3.OpDelete(s.p+"policies/"+name),
		deletePrefix(s.p+"nodes/"+name+"/"), deletePrefix(s.p+"actions/"+name+"/"),
		deletePrefix(s.p+"shards/"+name+"/"), deletePrefix(s.p+"timelines/"+name+"/"))
}

func (s *etcdStore) PutNode(job string, n NodeRecord) error {
	if job == "" || n.Name == "" {
		return ErrEmptyName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	what, key := fmt.Sprintf("put node %s/%s", job, n.Name), s.p+"nodes/"+job+"/"+n.Name
	if n.Registered.IsZero() || n.Addr == "" {
		var old NodeRecord
		if _, err := s.getJSON(what, key, &old); err != nil {
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
	return s.commit(what, putJSON(key, n))
}

func (s *etcdStore) SetNodeAddr(job, node, role, addr string) error {
	if job == "" || node == "" {
		return ErrEmptyName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	what, key := fmt.Sprintf("set address of %s/%s", job, node), s.p+"nodes/"+job+"/"+node
	n := NodeRecord{Name: node, Role: role, State: "starting"}
	if _, err := s.getJSON(what, key, &n); err != nil {
		return err
	}
	n.Addr, n.Registered, n.Updated = addr, s.stamp(n.Registered), s.stamp(time.Time{})
	return s.commit(what, putJSON(key, n))
}

func (s *etcdStore) ListNodes(job string) ([]NodeRecord, error) {
	if job == "" {
		return []NodeRecord{}, nil
	}
	return listJSON[NodeRecord](s, "list nodes of "+job, s.p+"nodes/"+job+"/")
}

func (s *etcdStore) DeleteNode(job, name string) error {
	if job == "" || name == "" {
		return ErrEmptyName
	}
	return s.commit(fmt.Sprintf("delete node %s/%s", job, name), clientv3.OpDelete(s.p+"nodes/"+job+"/"+name))
}

func (s *etcdStore) PutAction(job string, a ActionRecord) error {
	if job == "" || a.ID == "" {
		return ErrEmptyName
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	what, base := fmt.Sprintf("put action %s/%s", job, a.ID), s.p+"actions/"+job+"/"
	a.Updated = s.stamp(a.Updated)
	keyb, err := s.getValue(what, base+"id/"+a.ID)
	if err != nil {
		return err
	}
	var ops []clientv3.Op
	var old ActionRecord
	key := string(keyb)
	if keyb == nil {
		var seq uint64
		if _, err := s.getJSON(what, base+"seq", &seq); err != nil {
			return err
		}
		seq++
		key = fmt.Sprintf("%slog/%016x", base, seq)
		ops = append(ops, putJSON(base+"seq", seq), clientv3.OpPut(base+"id/"+a.ID, key))
		a.Created, a.History = s.stamp(a.Created), nil
	} else {
		if _, err := s.getJSON(what, key, &old); err != nil {
			return err
		}
		a.Created, a.History = old.Created, old.History
	}
	if len(a.History) == 0 || old.State != a.State {
		a.History = append(a.History, ActionEvent{State: a.State, At: a.Updated, Actor: a.Actor, Note: a.Note})
	}
	return s.commit(what, append(ops, putJSON(key, a))...)
}

func (s *etcdStore) GetAction(job, id string) (ActionRecord, bool, error) {
	var a ActionRecord
	if job == "" || id == "" {
		return a, false, nil
	}
	what := fmt.Sprintf("get action %s/%s", job, id)
	key, err := s.getValue(what, s.p+"actions/"+job+"/id/"+id)
	if err != nil || key == nil {
		return a, false, err
	}
	ok, err := s.getJSON(what, string(key), &a)
	return a, ok && err == nil, err
}

func (s *etcdStore) ListActions(job string) ([]ActionRecord, error) {
	if job == "" {
		return []ActionRecord{}, nil
	}
	return listJSON[ActionRecord](s, "list actions of "+job, s.p+"actions/"+job+"/log/")
}

func (s *etcdStore) auditKey(at time.Time, seq uint64) string {
	return s.p + "audit/" + hex.EncodeToString(auditKey(at, seq))
}

func (s *etcdStore) Audit(e AuditEntry) (AuditEntry, error) {
	e.At = s.stamp(e.At)
	e.What, e.Reason = truncate(e.What, MaxAuditText), truncate(e.Reason, MaxAuditText)
	s.mu.Lock()
	defer s.mu.Unlock()
	var seq uint64
	var size int64
	if _, err := s.getJSON("audit", s.p+"meta/audit-seq", &seq); err != nil {
		return e, err
	}
	if _, err := s.getJSON("audit", s.p+"meta/audit-bytes", &size); err != nil {
		return e, err
	}
	seq++
	e.Seq = seq
	data, err := json.Marshal(e)
	if err != nil {
		return e, fmt.Errorf("store: audit: %w", err)
	}
	size += int64(len(data))
	ops := []clientv3.Op{clientv3.OpPut(s.auditKey(e.At, seq), string(data)), putJSON(s.p+"meta/audit-seq", seq)}
	// Retention: drop the oldest entries beyond it, at most a
	// transaction's worth per append (the next appends drop the rest).
	var cutoff string
	if s.auditMaxAge > 0 {
		cutoff = s.auditKey(s.now().Add(-s.auditMaxAge), 0)
	}
	if cutoff != "" || s.auditMaxBytes > 0 && size > s.auditMaxBytes {
		resp, err := s.get("audit", s.p+"audit/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(maxOps-3))
		if err != nil {
			return e, err
		}
		for _, kv := range resp.Kvs {
			old := cutoff != "" && string(kv.Key) < cutoff
			over := s.auditMaxBytes > 0 && size > s.auditMaxBytes
			if !old && !over {
				break
			}
			size -= int64(len(kv.Value))
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
		}
	}
	ops = append(ops, putJSON(s.p+"meta/audit-bytes", max(size, 0)))
	return e, s.commit("audit", ops...)
}

func (s *etcdStore) decodeAudit(resp *clientv3.GetResponse) ([]AuditEntry, error) {
	out := make([]AuditEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var e AuditEntry
		if err := jsonDecode(kv.Key, kv.Value, &e); err != nil {
			return nil, fmt.Errorf("store: list audit: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

func (s *etcdStore) ListAudit(since time.Time, limit int) ([]AuditEntry, error) {
	start := s.p + "audit/"
	if !since.IsZero() {
		start = s.auditKey(since, 0)
	}
	opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.p + "audit/")),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	resp, err := s.get("list audit", start, opts...)
	if err != nil {
		return nil, err
	}
	return s.decodeAudit(resp)
}

func (s *etcdStore) LastAudit(n int) ([]AuditEntry, error) {
	if n <= 0 {
		return []AuditEntry{}, nil
	}
	resp, err := s.get("last audit", s.p+"audit/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(n)))
	if err != nil {
		return nil, err
	}
	out, err := s.decodeAudit(resp)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, err
}

func (s *etcdStore) PutPolicies(job string, settings []byte) error {
	if job == "" {
		return ErrEmptyName
	}
	return s.commit("put policies of "+job, clientv3.OpPut(s.p+"policies/"+job, string(settings)))
}

func (s *etcdStore) GetPolicies(job string) ([]byte, bool, error) {
	if job == "" {
		return nil, false, nil
	}
	v, err := s.getValue("get policies of "+job, s.p+"policies/"+job)
	return v, v != nil && err == nil, err
}

func (s *etcdStore) PutShards(job string, snapshot []byte) error {
	if job == "" {
		return ErrEmptyName
	}
	base := s.p + "shards/" + job + "/"
	return s.commit("put shards of "+job, deletePrefix(base+"changes/"), clientv3.OpPut(base+"snapshot", string(snapshot)))
}

func (s *etcdStore) GetShards(job string) ([]byte, bool, error) {
	if job == "" {
		return nil, false, nil
	}
	v, err := s.getValue("get shards of "+job, s.p+"shards/"+job+"/snapshot")
	return v, v != nil && err == nil, err
}

func (s *etcdStore) PutShardChanges(job string, changes []shard.Shard) error {
	if len(changes) == 0 {
		return nil
	}
	what, base := "put shard changes of "+job, s.p+"shards/"+job+"/"
	resp, err := s.get(what, base+"snapshot", clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if resp.Count == 0 {
		return fmt.Errorf("store: %s: %w", what, ErrNoSnapshot)
	}
	ops := make([]clientv3.Op, 0, len(changes))
	for _, sh := range changes {
		rec, err := sh.MarshalBinary()
		if err != nil {
			return fmt.Errorf("store: %s: %w", what, err)
		}
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("%schanges/%016x", base, uint64(sh.ID)), string(rec)))
	}
	return s.commitChunks(what, ops)
}

func (s *etcdStore) shardState(job string) (snap []byte, changes [][]byte, err error) {
	if job == "" {
		return nil, nil, nil
	}
	base := s.p + "shards/" + job + "/"
	// One read at one revision: the snapshot and the log agree.
	resp, err := s.get("load shards of "+job, base, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, nil, err
	}
	for _, kv := range resp.Kvs {
		switch k := string(kv.Key); {
		case k == base+"snapshot":
			snap = kv.Value
		case strings.HasPrefix(k, base+"changes/"):
			changes = append(changes, kv.Value)
		}
	}
	if snap == nil && changes != nil {
		return nil, nil, ErrNoSnapshot
	}
	return snap, changes, nil
}

func (s *etcdStore) timelineKey(job string, i int) string {
	return fmt.Sprintf("%stimelines/%s/%08x", s.p, job, uint32(i))
}

func (s *etcdStore) PutTimeline(job string, from int, frames [][]byte) error {
	if job == "" {
		return ErrEmptyName
	}
	if from < 0 {
		return fmt.Errorf("store: put timeline %s: negative index %d", job, from)
	}
	ops := make([]clientv3.Op, 0, len(frames)+1)
	for i, f := range frames {
		ops = append(ops, clientv3.OpPut(s.timelineKey(job, from+i), string(f)))
	}
	end := clientv3.GetPrefixRangeEnd(s.p + "timelines/" + job + "/")
	ops = append(ops, clientv3.OpDelete(s.timelineKey(job, from+len(frames)), clientv3.WithRange(end)))
	return s.commitChunks("put timeline "+job, ops)
}

func (s *etcdStore) LoadTimeline(job string) ([][]byte, error) {
	if job == "" {
		return nil, nil
	}
	resp, err := s.get("load timeline "+job, s.p+"timelines/"+job+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, kv := range resp.Kvs {
		out = append(out, kv.Value)
	}
	return out, nil
}

func (s *etcdStore) DeleteTimeline(job string) error {
	if job == "" {
		return ErrEmptyName
	}
	return s.commit("delete timeline "+job, deletePrefix(s.p+"timelines/"+job+"/"), deletePrefix(s.p+"stacks/"+job+"/"))
}
