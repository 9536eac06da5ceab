package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/kelpie/kelpie/scheduler/shard"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// openTemp opens a bbolt store in a fresh directory, with a clock that
// starts at t0 and ticks a second per reading.
func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	return boltImpl.open(t, Options{})
}

func TestJobs(t *testing.T) { eachImpl(t, testJobs) }

func testJobs(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	mnist := JobRecord{Name: "mnist", SpecYAML: "name: mnist\n", State: "running", SubmittedBy: "alice",
		Submitted: t0.Add(-time.Hour), Updated: t0.Add(-time.Minute)}
	ctr := JobRecord{Name: "ctr", SpecYAML: "name: ctr\n", State: "pending"} // times filled in
	for _, j := range []JobRecord{mnist, ctr} {
		if err := s.PutJob(j); err != nil {
			t.Fatal(err)
		}
	}
	got, ok, err := s.GetJob("mnist")
	if !ok || err != nil || !reflect.DeepEqual(got, mnist) {
		t.Errorf("GetJob(mnist) = %+v, %v, %v; want %+v", got, ok, err, mnist)
	}
	got, _, _ = s.GetJob("ctr")
	if !got.Submitted.Equal(t0.Add(time.Second)) || !got.Updated.Equal(t0.Add(2*time.Second)) {
		t.Errorf("GetJob(ctr) times = %v, %v; want the clock's t0+1s, t0+2s", got.Submitted, got.Updated)
	}

	// An update without Submitted keeps it; the result is stored.
	done := JobRecord{Name: "mnist", SpecYAML: mnist.SpecYAML, State: "completed", Updated: t0, Finished: t0,
		Result: []byte(`{"jct_seconds": 12.5}`)}
	if err := s.PutJob(done); err != nil {
		t.Fatal(err)
	}
	want := done
	want.Submitted = mnist.Submitted
	if got, _, _ := s.GetJob("mnist"); !reflect.DeepEqual(got, want) {
		t.Errorf("GetJob(mnist) after update = %+v; want %+v", got, want)
	}

	list, err := s.ListJobs()
	if err != nil || len(list) != 2 || list[0].Name != "ctr" || list[1].Name != "mnist" {
		t.Errorf("ListJobs() = %+v, %v; want ctr, mnist", list, err)
	}
	if _, ok, err := s.GetJob("nope"); ok || err != nil {
		t.Errorf("GetJob(nope) = %v, %v; want false, nil", ok, err)
	}
	if err := s.PutJob(JobRecord{}); !errors.Is(err, ErrEmptyName) {
		t.Errorf("PutJob(no name) = %v; want ErrEmptyName", err)
	}
}

func TestNonUTCTimesComeBackEqual(t *testing.T) { eachImpl(t, testNonUTCTimesComeBackEqual) }

func testNonUTCTimesComeBackEqual(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	at := time.Now() // local, with a monotonic reading
	if err := s.PutJob(JobRecord{Name: "j", Submitted: at, Updated: at}); err != nil {
		t.Fatal(err)
	}
	got, _, _ := s.GetJob("j")
	if !got.Submitted.Equal(at) || got.Submitted.Location() != time.UTC {
		t.Errorf("Submitted = %v; want %v in UTC", got.Submitted, at)
	}
}

func TestDeleteJobCascades(t *testing.T) { eachImpl(t, testDeleteJobCascades) }

func testDeleteJobCascades(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	q, _ := shard.New(shard.Config{Samples: 100, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 1})
	for _, job := range []string{"a", "b"} {
		must(t, s.PutJob(JobRecord{Name: job}))
		must(t, s.PutNode(job, NodeRecord{Name: "worker-0"}))
		must(t, s.PutAction(job, ActionRecord{ID: "1", State: "proposed"}))
		must(t, s.PutPolicies(job, []byte("{}")))
		must(t, s.SaveShards(job, q))
	}
	if _, err := s.Audit(AuditEntry{Who: "bob", What: "delete job a", Job: "a", Allowed: true}); err != nil {
		t.Fatal(err)
	}
	must(t, s.DeleteJob("a"))
	must(t, s.DeleteJob("never-was"))
	if _, ok, _ := s.GetJob("a"); ok {
		t.Error("job a still there after DeleteJob")
	}
	if n, _ := s.ListNodes("a"); len(n) != 0 {
		t.Errorf("ListNodes(a) after delete = %v", n)
	}
	if a, _ := s.ListActions("a"); len(a) != 0 {
		t.Errorf("ListActions(a) after delete = %v", a)
	}
	if _, ok, _ := s.GetPolicies("a"); ok {
		t.Error("policies of a still there after DeleteJob")
	}
	if _, ok, _ := s.LoadShards("a"); ok {
		t.Error("shards of a still there after DeleteJob")
	}
	// b is untouched and the audit log keeps its entry.
	if _, ok, _ := s.GetJob("b"); !ok {
		t.Error("job b gone after deleting a")
	}
	if n, _ := s.ListNodes("b"); len(n) != 1 {
		t.Errorf("ListNodes(b) = %v; want 1 node", n)
	}
	if e, _ := s.ListAudit(time.Time{}, 0); len(e) != 1 {
		t.Errorf("audit log after delete = %v; want its 1 entry", e)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestNodes(t *testing.T) { eachImpl(t, testNodes) }

func testNodes(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	w1 := NodeRecord{Name: "worker-1", Role: "worker", Addr: "127.0.0.1:7001", Pid: 42, State: "running",
		BatchSize: 64, Registered: t0, Updated: t0}
	s0 := NodeRecord{Name: "server-0", Role: "server", State: "running", Registered: t0, Updated: t0}
	must(t, s.PutNode("job", w1))
	must(t, s.PutNode("job", s0))
	must(t, s.PutNode("other", NodeRecord{Name: "worker-9"}))
	restarted := NodeRecord{Name: "worker-1", Role: "worker", Pid: 43, State: "running", Restarts: 1, Updated: t0.Add(time.Minute)}
	must(t, s.PutNode("job", restarted))
	want := []NodeRecord{s0, restarted}
	// A state change keeps when the node registered and its address.
	want[1].Registered, want[1].Addr = t0, w1.Addr
	got, err := s.ListNodes("job")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ListNodes(job) = %+v, %v; want %+v", got, err, want)
	}
	must(t, s.DeleteNode("job", "server-0"))
	must(t, s.DeleteNode("nojob", "x"))
	if got, _ := s.ListNodes("job"); len(got) != 1 || got[0].Name != "worker-1" {
		t.Errorf("ListNodes(job) after DeleteNode = %+v; want worker-1 only", got)
	}
	if got, err := s.ListNodes("nojob"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("ListNodes(nojob) = %#v, %v; want empty", got, err)
	}
	if err := s.PutNode("", w1); !errors.Is(err, ErrEmptyName) {
		t.Errorf("PutNode(no job) = %v; want ErrEmptyName", err)
	}
}

// TestSetNodeAddr: a server's new address (a restart, an addition) is
// recorded without touching the rest of its record, and survives the state
// changes written after it.
func TestSetNodeAddr(t *testing.T) { eachImpl(t, testSetNodeAddr) }

func testSetNodeAddr(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	s0 := NodeRecord{Name: "server-0", Role: "server", Addr: "10.0.0.1:1", Pid: 7, State: "running", Restarts: 2, Registered: t0, Updated: t0}
	must(t, s.PutNode("job", s0))
	must(t, s.SetNodeAddr("job", "server-0", "server", "10.0.0.1:2"))
	must(t, s.SetNodeAddr("job", "server-1", "server", "10.0.0.2:1"))
	must(t, s.PutNode("job", NodeRecord{Name: "server-0", Role: "server", Pid: 8, State: "running", Restarts: 3}))
	got, err := s.ListNodes("job")
	if err != nil || len(got) != 2 {
		t.Fatalf("ListNodes = %+v, %v", got, err)
	}
	if g := got[0]; g.Addr != "10.0.0.1:2" || g.Pid != 8 || g.Restarts != 3 || !g.Registered.Equal(t0) {
		t.Errorf("server-0 = %+v; want the new address, the later state, registered at %v", g, t0)
	}
	if g := got[1]; g.Addr != "10.0.0.2:1" || g.Role != "server" || g.State != "starting" {
		t.Errorf("server-1 = %+v; want a new server record with its address", g)
	}
	if err := s.SetNodeAddr("job", "", "server", "x"); !errors.Is(err, ErrEmptyName) {
		t.Errorf("SetNodeAddr(no node) = %v; want ErrEmptyName", err)
	}
}

func TestActions(t *testing.T) { eachImpl(t, testActions) }

func testActions(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	puts := []struct {
		a ActionRecord
	}{
		{ActionRecord{ID: "b-restart", Kind: "KILL_RESTART", Node: "worker-2", Reason: "BPT 3.1× the mean for 10 min",
			Numbers: map[string]float64{"bpt_ratio": 3.1}, State: "proposed", Actor: "policy:antdt-nd", Updated: at(0)}},
		{ActionRecord{ID: "a-batch", Kind: "ADJUST_BS", Reason: "throughput skew", State: "proposed",
			Params: map[string]string{"worker-0": "96"}, Actor: "policy:antdt-dd", Updated: at(1)}},
		{ActionRecord{ID: "b-restart", Kind: "KILL_RESTART", Node: "worker-2", Reason: "BPT 3.1× the mean for 10 min",
			State: "approved", Actor: "alice", Note: "go", Updated: at(2),
			History: []ActionEvent{{State: "forged"}}}}, // ignored: the store keeps the history
		{ActionRecord{ID: "b-restart", Kind: "KILL_RESTART", Node: "worker-2", State: "approved", Note: "same state", Updated: at(3)}},
		{ActionRecord{ID: "b-restart", Kind: "KILL_RESTART", Node: "worker-2", State: "applied", Iteration: 1200, Actor: "agent", Updated: at(4)}},
	}
	for _, p := range puts {
		must(t, s.PutAction("job", p.a))
	}
	got, ok, err := s.GetAction("job", "b-restart")
	wantHist := []ActionEvent{
		{State: "proposed", At: at(0), Actor: "policy:antdt-nd"},
		{State: "approved", At: at(2), Actor: "alice", Note: "go"},
		{State: "applied", At: at(4), Actor: "agent"},
	}
	if !ok || err != nil || !reflect.DeepEqual(got.History, wantHist) {
		t.Errorf("GetAction(b-restart).History = %+v, %v, %v; want %+v", got.History, ok, err, wantHist)
	}
	if got.State != "applied" || got.Iteration != 1200 || !got.Created.Equal(t0.Add(time.Second)) || !got.Updated.Equal(at(4)) {
		t.Errorf("GetAction(b-restart) = %+v; want applied at 1200, created at the first put", got)
	}
	list, err := s.ListActions("job")
	if err != nil || len(list) != 2 || list[0].ID != "b-restart" || list[1].ID != "a-batch" {
		t.Errorf("ListActions(job) = %+v, %v; want b-restart then a-batch (first-stored order)", list, err)
	}
	if list[1].Params["worker-0"] != "96" || len(list[1].History) != 1 {
		t.Errorf("a-batch = %+v; want its params and one history event", list[1])
	}
	if _, ok, err := s.GetAction("job", "zzz"); ok || err != nil {
		t.Errorf("GetAction(zzz) = %v, %v; want false, nil", ok, err)
	}
	if _, ok, err := s.GetAction("nojob", "b-restart"); ok || err != nil {
		t.Errorf("GetAction(nojob, …) = %v, %v; want false, nil", ok, err)
	}
	if got, err := s.ListActions("nojob"); err != nil || len(got) != 0 {
		t.Errorf("ListActions(nojob) = %v, %v; want empty", got, err)
	}
	if err := s.PutAction("job", ActionRecord{}); !errors.Is(err, ErrEmptyName) {
		t.Errorf("PutAction(no id) = %v; want ErrEmptyName", err)
	}
}

func TestAudit(t *testing.T) { eachImpl(t, testAudit) }

func testAudit(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	entries := []AuditEntry{
		{At: t0.Add(2 * time.Minute), Who: "alice", Role: "operator", What: "approve b-restart", Job: "job", Allowed: true},
		{At: t0, Who: "bob", Role: "viewer", What: "approve b-restart", Job: "job", Reason: "viewers cannot approve"},
		{At: t0.Add(2 * time.Minute), Who: "policy:antdt-nd", Role: "policy", What: "propose KILL_RESTART worker-2", Allowed: true},
		{At: time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC), Who: "eagle", What: "land", Allowed: true},
		{Who: "carol", Role: "admin", What: "set policy", Allowed: true}, // At from the clock: t0+1s
	}
	for i, e := range entries {
		got, err := s.Audit(e)
		if err != nil || got.Seq != uint64(i+1) {
			t.Fatalf("Audit(%+v) = %+v, %v; want seq %d", e, got, err, i+1)
		}
		entries[i] = got
	}
	if !entries[4].At.Equal(t0.Add(time.Second)) {
		t.Errorf("zero At stored as %v; want the clock's %v", entries[4].At, t0.Add(time.Second))
	}
	byTime := []AuditEntry{entries[3], entries[1], entries[4], entries[0], entries[2]}
	tests := []struct {
		since time.Time
		limit int
		want  []AuditEntry
	}{
		{time.Time{}, 0, byTime},
		{time.Time{}, 2, byTime[:2]},
		{t0, 0, byTime[1:]},
		{t0.Add(time.Millisecond), 0, byTime[2:]},
		{t0.Add(2 * time.Minute), 1, byTime[3:4]},
		{t0.Add(time.Hour), 0, []AuditEntry{}},
	}
	for _, tt := range tests {
		got, err := s.ListAudit(tt.since, tt.limit)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ListAudit(%v, %d) = %+v, %v; want %+v", tt.since, tt.limit, got, err, tt.want)
		}
	}
	if got, err := s.LastAudit(2); err != nil || !reflect.DeepEqual(got, byTime[3:]) {
		t.Errorf("LastAudit(2) = %+v, %v; want %+v", got, err, byTime[3:])
	}
	if got, _ := s.LastAudit(10); !reflect.DeepEqual(got, byTime) {
		t.Errorf("LastAudit(10) = %+v; want all %d", got, len(byTime))
	}
}

func TestPolicies(t *testing.T) { eachImpl(t, testPolicies) }

func testPolicies(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	settings := []byte(`{"antdt_nd": {"lambda": 1.5}}`)
	must(t, s.PutPolicies("job", settings))
	must(t, s.PutPolicies("empty", []byte{}))
	if got, ok, err := s.GetPolicies("job"); !ok || err != nil || string(got) != string(settings) {
		t.Errorf("GetPolicies(job) = %q, %v, %v; want %q", got, ok, err, settings)
	}
	if got, ok, err := s.GetPolicies("empty"); !ok || err != nil || len(got) != 0 {
		t.Errorf("GetPolicies(empty) = %q, %v, %v; want empty, true", got, ok, err)
	}
	if _, ok, err := s.GetPolicies("none"); ok || err != nil {
		t.Errorf("GetPolicies(none) = %v, %v; want false, nil", ok, err)
	}
}

// sameShards compares two queues by their full durable form.
func sameShards(t *testing.T, got, want *shard.Queue) {
	t.Helper()
	g, _ := got.MarshalBinary()
	w, _ := want.MarshalBinary()
	if string(g) != string(w) {
		t.Fatalf("loaded queue differs from the live one")
	}
	gt, gd, gn := got.Counts()
	wt, wd, wn := want.Counts()
	if gt != wt || gd != wd || gn != wn {
		t.Fatalf("loaded Counts() = %d, %d, %d; live %d, %d, %d", gt, gd, gn, wt, wd, wn)
	}
}

func TestShards(t *testing.T) { eachImpl(t, testShards) }

func testShards(t *testing.T, im impl) {
	s, _ := im.open(t, Options{})
	q, err := shard.New(shard.Config{Samples: 60000, Epochs: 2, GlobalBatch: 256, BatchesPerShard: 10, Seed: 1})
	must(t, err)
	if err := s.PutShardChanges("job", []shard.Shard{{}}); !errors.Is(err, ErrNoSnapshot) {
		t.Errorf("PutShardChanges before a snapshot = %v; want ErrNoSnapshot", err)
	}
	if _, ok, err := s.LoadShards("job"); ok || err != nil {
		t.Errorf("LoadShards(no state) = %v, %v; want false, nil", ok, err)
	}
	must(t, s.SaveShards("job", q))
	now := time.Duration(0)
	for i := range 30 {
		now += time.Second
		w := fmt.Sprintf("worker-%d", i%3)
		sh, _ := q.Fetch(w, now)
		if i%4 != 3 {
			must(t, q.Report(w, sh.ID, now))
		}
		if i == 20 {
			q.Release("worker-1", now)
		}
		must(t, s.PutShardChanges("job", q.Changes()))
	}
	got, ok, err := s.LoadShards("job")
	if !ok || err != nil {
		t.Fatalf("LoadShards = %v, %v", ok, err)
	}
	sameShards(t, got, q)

	// A new snapshot clears the log.
	must(t, s.SaveShards("job", q))
	snap, ok, _ := s.GetShards("job")
	if want, _ := q.MarshalBinary(); !ok || string(snap) != string(want) {
		t.Errorf("GetShards = %d bytes, %v; want the snapshot's %d", len(snap), ok, len(want))
	}
	if n := im.changeRecords(t, s, "job"); n != 0 {
		t.Errorf("%d change records still there after SaveShards", n)
	}
	got, _, _ = s.LoadShards("job")
	sameShards(t, got, q)

	// A corrupt change record is reported, not loaded.
	im.putRawChange(t, s, "job", 3, []byte("garbage"))
	if _, ok, err := s.LoadShards("job"); ok || err == nil || !strings.Contains(err.Error(), "change") {
		t.Errorf("LoadShards with a corrupt change = %v, %v; want an error naming the change", ok, err)
	}
}

func TestReopenKeepsEverything(t *testing.T) { eachImpl(t, testReopenKeepsEverything) }

func testReopenKeepsEverything(t *testing.T, im impl) {
	s, path := im.open(t, Options{})
	q, _ := shard.New(shard.Config{Samples: 1000, Epochs: 1, GlobalBatch: 10, BatchesPerShard: 1, Seed: 3})
	job := JobRecord{Name: "j", SpecYAML: "name: j\n", State: "running", Submitted: t0, Updated: t0}
	node := NodeRecord{Name: "worker-0", Role: "worker", State: "running", Registered: t0, Updated: t0}
	must(t, s.PutJob(job))
	must(t, s.PutNode("j", node))
	must(t, s.PutAction("j", ActionRecord{ID: "x", State: "proposed", Updated: t0}))
	must(t, s.PutAction("j", ActionRecord{ID: "x", State: "approved", Updated: t0.Add(time.Second)}))
	entry, err := s.Audit(AuditEntry{At: t0, Who: "alice", What: "submit j", Allowed: true})
	must(t, err)
	must(t, s.PutPolicies("j", []byte("lambda: 1.5")))
	must(t, s.SaveShards("j", q))
	sh, _ := q.Fetch("worker-0", 1)
	must(t, s.PutShardChanges("j", q.Changes()))
	must(t, q.Report("worker-0", sh.ID, 2))
	must(t, s.PutShardChanges("j", q.Changes()))
	wantAction, _, _ := s.GetAction("j", "x")
	must(t, s.Close())

	s2, err := im.reopen(t, path, Options{})
	must(t, err)
	defer s2.Close()
	if got, ok, _ := s2.GetJob("j"); !ok || !reflect.DeepEqual(got, job) {
		t.Errorf("after reopen GetJob = %+v; want %+v", got, job)
	}
	if got, _ := s2.ListNodes("j"); !reflect.DeepEqual(got, []NodeRecord{node}) {
		t.Errorf("after reopen ListNodes = %+v; want %+v", got, node)
	}
	if got, _, _ := s2.GetAction("j", "x"); !reflect.DeepEqual(got, wantAction) || len(got.History) != 2 {
		t.Errorf("after reopen GetAction = %+v; want %+v with 2 events", got, wantAction)
	}
	if got, _ := s2.ListAudit(time.Time{}, 0); !reflect.DeepEqual(got, []AuditEntry{entry}) {
		t.Errorf("after reopen ListAudit = %+v; want %+v", got, entry)
	}
	if got, _, _ := s2.GetPolicies("j"); string(got) != "lambda: 1.5" {
		t.Errorf("after reopen GetPolicies = %q", got)
	}
	got, ok, err := s2.LoadShards("j")
	if !ok || err != nil {
		t.Fatalf("after reopen LoadShards = %v, %v", ok, err)
	}
	sameShards(t, got, q)
	if _, _, done := got.Counts(); done != 1 {
		t.Errorf("after reopen %d shards DONE; want 1", done)
	}
	// The sequences go on: a new action lists after the old one.
	must(t, s2.PutAction("j", ActionRecord{ID: "a", State: "proposed"}))
	if list, _ := s2.ListActions("j"); len(list) != 2 || list[1].ID != "a" {
		t.Errorf("after reopen ListActions = %+v; want x then a", list)
	}
}

func TestSecondOpenerFails(t *testing.T) {
	s, path := openTemp(t)
	start := time.Now()
	s2, err := OpenWith(path, Options{Timeout: 100 * time.Millisecond})
	if err == nil {
		s2.Close()
		t.Fatal("second Open of a held file succeeded")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "locked") {
		t.Errorf("second Open error = %q; want it to name %s and say it is locked", err, path)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("second Open took %v; want about the 100ms timeout", d)
	}
	must(t, s.Close())
	s3, err := OpenWith(path, Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	s3.Close()
}

func TestNewerSchemaRefused(t *testing.T) {
	s, path := openTemp(t)
	must(t, s.backend.(*boltStore).db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersion, binary.BigEndian.AppendUint64(nil, schemaVersion+1))
	}))
	must(t, s.Close())
	if s2, err := Open(path); err == nil || !strings.Contains(err.Error(), "newer") {
		if err == nil {
			s2.Close()
		}
		t.Errorf("Open of a newer schema = %v; want an error saying it is newer", err)
	}
}

func TestOpenBadPath(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("Open(a directory) = %v; want an error naming it", err)
	}
}

// BenchmarkShardStep is the durable cost of one shard: Fetch, Report and
// the change written (one transaction, fsynced).
func BenchmarkShardStep(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "kelpie.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	cfg := shard.Config{Samples: 100_000 * 512 * 100, Epochs: 1, GlobalBatch: 512, BatchesPerShard: 100}
	q, _ := shard.New(cfg)
	if err := s.SaveShards("job", q); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		sh, ok := q.Fetch("w", 1)
		if !ok {
			b.Fatal("queue exhausted")
		}
		if err := q.Report("w", sh.ID, 2); err != nil {
			b.Fatal(err)
		}
		if err := s.PutShardChanges("job", q.Changes()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadShards recovers a 100,000-shard queue from a snapshot taken
// halfway plus a change log of the other half.
func BenchmarkLoadShards(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "kelpie.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	q, _ := shard.New(shard.Config{Samples: 100_000 * 512 * 100, Epochs: 1, GlobalBatch: 512, BatchesPerShard: 100})
	for i := 0; ; i++ {
		sh, ok := q.Fetch("worker-1", 1)
		if !ok {
			break
		}
		q.Report("worker-1", sh.ID, 2)
		if i == 50_000 {
			if err := s.SaveShards("job", q); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.PutShardChanges("job", q.Changes()); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := s.LoadShards("job"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAuditRetention: with a retention the audit log keeps its newest
// entries within the byte bound and drops those older than the age bound,
// one entry's text is bounded whatever the caller passes, and the file
// stops growing.
func TestAuditRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kelpie.db")
	s, err := OpenWith(path, Options{AuditMaxBytes: 64 << 10, AuditMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s.setNow(func() time.Time { return now })
	if _, err := s.Audit(AuditEntry{At: now.Add(-2 * time.Hour), Who: "old"}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("r", 1<<20)
	var sizes []int64
	for i := range 200 {
		e, err := s.Audit(AuditEntry{At: now, Who: fmt.Sprint("u", i), What: "approve", Reason: big})
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Reason) > MaxAuditText+len("…") {
			t.Fatalf("an entry's reason was stored with %d bytes", len(e.Reason))
		}
		if i%50 == 49 {
			fi, _ := os.Stat(path)
			sizes = append(sizes, fi.Size())
		}
	}
	all, err := s.ListAudit(time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, e := range all {
		if e.Who == "old" {
			t.Errorf("an entry older than the retention is still there")
		}
		total += len(e.Reason) + len(e.What) + 100
	}
	if total > 64<<10+8<<10 || len(all) < 5 {
		t.Errorf("%d entries of about %d bytes kept; want the newest within 64 KiB", len(all), total)
	}
	if last := all[len(all)-1]; last.Who != "u199" {
		t.Errorf("the newest entry is %s; want u199", last.Who)
	}
	if sizes[len(sizes)-1] > sizes[0]+256<<10 {
		t.Errorf("the file grew from %d to %d bytes under a 64 KiB retention", sizes[0], sizes[len(sizes)-1])
	}
}
