package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/shard"
)

const testSpec = `
name: elastic
model: {kind: sparse-lr}
data: {kind: synthetic-ctr, epochs: 1, samples: 4096, test_samples: 512, features: 1000, fields: 4, seed: 7}
train: {global_batch: 64, lr: 0.02, optimizer: adam}
cluster: {servers: 1, workers: 2}
`

// startedJob registers and readies server-0, worker-0 and worker-1.
func startedJob(t *testing.T) (*Coordinator, *Job) {
	t.Helper()
	s, err := spec.Parse("test.yaml", []byte(testSpec))
	if err != nil {
		t.Fatal(err)
	}
	c := New(nil)
	j, err := c.AddJob(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nodes := map[string]coordinatorpb.Role{"server-0": coordinatorpb.Role_ROLE_SERVER, "worker-0": coordinatorpb.Role_ROLE_WORKER, "worker-1": coordinatorpb.Role_ROLE_WORKER}
	var wg sync.WaitGroup
	for name, role := range nodes {
		if _, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: name, Role: role, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Ready(ctx, &coordinatorpb.ReadyRequest{Job: "elastic", Node: name}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	return c, j
}

// TestWorkersAddedAndRemoved: a worker slot added while the job runs may
// register (no other late worker may); a removed worker's Done neither
// waits nor evaluates, and the others stop waiting for it; servers that
// register later count only the workers still in the job.
func TestWorkersAddedAndRemoved(t *testing.T) {
	c, j := startedJob(t)
	ctx := context.Background()
	if _, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "worker-2", Role: coordinatorpb.Role_ROLE_WORKER}); err == nil {
		t.Error("worker-2 registered without an ADD_WORKER")
	}
	name, idx := j.AddWorker()
	if name != "worker-2" || idx != 2 {
		t.Fatalf("AddWorker() = %s, %d; want worker-2, 2", name, idx)
	}
	if err := j.AddSplit(10, []int{32, 16, 16}); err != nil {
		t.Fatal(err)
	}
	reg, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "worker-2", Role: coordinatorpb.Role_ROLE_WORKER})
	if err != nil {
		t.Fatalf("added worker-2: %v", err)
	}
	if reg.Index != 2 || len(reg.Splits) != 1 || !slices.Equal(reg.Splits[0].Local, []int32{32, 16, 16}) {
		t.Errorf("worker-2's registration: index %d, splits %v; want 2 and the split from 10", reg.Index, reg.Splits)
	}
	if len(reg.Workers) != 0 {
		// Only servers have a barrier: a list of every worker sent to
		// every worker made registrations O(workers²).
		t.Errorf("worker-2 was told a barrier of %d workers; want none", len(reg.Workers))
	}
	// worker-0 is removed: it does not wait for the others.
	done, err := c.Done(ctx, &coordinatorpb.DoneRequest{Job: "elastic", Node: "worker-0", Left: true})
	if err != nil || done.Evaluate {
		t.Fatalf("Done(worker-0, left) = %v, %v; want no evaluation", done, err)
	}
	srv, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER, Addr: "127.0.0.1:2"})
	if err != nil || !slices.Equal(srv.Workers, []int32{1, 2}) {
		t.Errorf("restarted server's barrier = %v, %v; want [1 2]", srv.GetWorkers(), err)
	}
	if _, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "worker-0", Role: coordinatorpb.Role_ROLE_WORKER}); err == nil {
		t.Error("a removed worker registered again")
	}
	// The barrier a registration is told is kept between registrations
	// (members): each change of the membership is seen.
	srv, err = c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER, Addr: "127.0.0.1:3"})
	if err != nil || !slices.Equal(srv.Workers, []int32{1, 2}) {
		t.Errorf("server's barrier registering again = %v, %v; want [1 2] still", srv.GetWorkers(), err)
	}
	name3, _ := j.AddWorker()
	srv, err = c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER, Addr: "127.0.0.1:4"})
	if err != nil || !slices.Equal(srv.Workers, []int32{1, 2, 3}) {
		t.Errorf("server's barrier after %s was added = %v, %v; want [1 2 3]", name3, srv.GetWorkers(), err)
	}
	if err := j.DropWorker(name3); err != nil { // added, never came up
		t.Fatal(err)
	}
	srv, err = c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER, Addr: "127.0.0.1:5"})
	if err != nil || !slices.Equal(srv.Workers, []int32{1, 2}) {
		t.Errorf("server's barrier after %s was added and dropped = %v, %v; want [1 2]", name3, srv.GetWorkers(), err)
	}
	// worker-1 waits for worker-2, then one of them evaluates.
	got := make(chan *coordinatorpb.DoneResponse, 1)
	go func() {
		r, err := c.Done(ctx, &coordinatorpb.DoneRequest{Job: "elastic", Node: "worker-1"})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("worker-1's Done returned before worker-2 was done")
	case <-time.After(100 * time.Millisecond):
	}
	r2, err := c.Done(ctx, &coordinatorpb.DoneRequest{Job: "elastic", Node: "worker-2"})
	if err != nil {
		t.Fatal(err)
	}
	r1 := <-got
	if r1.Evaluate == r2.Evaluate {
		t.Errorf("evaluate: worker-1 %v, worker-2 %v; want exactly one", r1.Evaluate, r2.Evaluate)
	}
}

// TestDropWorker: an added worker that never comes up is dropped; the
// others do not wait for it.
func TestDropWorker(t *testing.T) {
	c, j := startedJob(t)
	ctx := context.Background()
	name, _ := j.AddWorker()
	go func() {
		time.Sleep(50 * time.Millisecond)
		if err := j.DropWorker(name); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range []string{"worker-0", "worker-1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Done(ctx, &coordinatorpb.DoneRequest{Job: "elastic", Node: w}); err != nil {
				t.Errorf("Done(%s): %v", w, err)
			}
		}()
	}
	wg.Wait()
}

// TestProgressRetired: the agent-less Progress call is gone (a worker's
// reports come on its agent's stream): it answers Unimplemented, saying
// so, and counts nothing in the samples ledger.
func TestProgressRetired(t *testing.T) {
	c, j := startedJob(t)
	r := &coordinatorpb.ProgressReport{Job: "elastic", Node: "worker-0", Iteration: 5, Samples: 160, BatchSize: 32}
	_, err := c.Progress(context.Background(), r)
	if status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), "agent") {
		t.Errorf("Progress = %v; want Unimplemented, pointing at the agent", err)
	}
	for _, n := range j.Nodes() {
		if n.Samples != 0 {
			t.Errorf("%s's ledger after Progress: %d samples; want 0", n.Name, n.Samples)
		}
	}
}

// TestPendingTable: a table change is pending, for the action that made
// it, from BeginTable to CommitTable.
func TestPendingTable(t *testing.T) {
	_, j := startedJob(t)
	next := j.Table()
	next.Version++
	if j.PendingTable("a-1") != nil {
		t.Fatal("a table is pending before any change")
	}
	j.BeginTable(next, nil, 40, "a-1")
	if p := j.PendingTable("a-1"); p == nil || p.Version != next.Version {
		t.Errorf("PendingTable(a-1) = %v; want version %d", p, next.Version)
	}
	if j.PendingTable("a-2") != nil {
		t.Error("PendingTable(a-2) is set for a change a-1 made")
	}
	j.CommitTable()
	if j.PendingTable("a-1") != nil || j.Table().Version != next.Version {
		t.Errorf("after commit: pending %v, table v%d; want none, v%d", j.PendingTable("a-1"), j.Table().Version, next.Version)
	}
}

// TestAllreducePeers: an allreduce job (no servers) starts when its workers
// are ready, and each learns every worker's peer address by index; each
// worker's Done records the bytes it sent across regions; a PS job's
// workers get no peers.
func TestAllreducePeers(t *testing.T) {
	s, err := spec.Parse("ar.yaml", []byte("name: ar\nmodel: {kind: softmax}\ncluster: {exchange: rat, workers: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := New(nil)
	if _, err := c.AddJob(s); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	addrs := []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}
	var wg sync.WaitGroup
	peers := make([][]string, 3)
	for i, name := range s.WorkerNames() {
		if _, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "ar", Node: name, Role: coordinatorpb.Role_ROLE_WORKER, Addr: addrs[i]}); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Ready(ctx, &coordinatorpb.ReadyRequest{Job: "ar", Node: name})
			if err != nil {
				t.Error(err)
				return
			}
			peers[i] = r.Peers
		}()
	}
	wg.Wait()
	for i, p := range peers {
		if !slices.Equal(p, addrs) {
			t.Errorf("worker-%d got peers %v; want %v", i, p, addrs)
		}
	}
	// Done returns once every worker is done.
	for i, name := range s.WorkerNames() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Done(ctx, &coordinatorpb.DoneRequest{Job: "ar", Node: name, Iterations: 5, CrossRegionBytes: int64(100 * (i + 1))}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var sum int64
	for _, n := range c.jobs["ar"].Nodes() {
		sum += n.CrossRegionBytes
	}
	if sum != 600 {
		t.Errorf("cross-region bytes recorded %d; want 600", sum)
	}
	_, j := startedJob(t)
	if r := j.readyResponse(); len(r.Peers) != 0 {
		t.Errorf("a PS job's workers got peers %v", r.Peers)
	}
}

// TestPersistFailureUndoes: a fetch or report whose shard changes cannot
// be persisted (a full disk) fails Unavailable and changes nothing, so the
// worker's retry gets the same shard and no shard stays DOING for a worker
// that was never told of it.
func TestPersistFailureUndoes(t *testing.T) {
	c, j := startedJob(t)
	ctx := context.Background()
	full := errors.New("no space left on device")
	var fail error
	var persisted int
	j.Persist = func(ch []shard.Shard) error {
		if fail != nil {
			return fail
		}
		persisted += len(ch)
		return nil
	}
	fetch := func() (*coordinatorpb.FetchShardResponse, error) {
		return c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: "elastic", Node: "worker-0"})
	}
	first, err := fetch()
	if err != nil || first.Shard == nil {
		t.Fatalf("fetch: %v %v", first, err)
	}
	fail = full
	if r, err := fetch(); status.Code(err) != codes.Unavailable {
		t.Fatalf("fetch on a full disk = %v, %v; want Unavailable", r, err)
	}
	if _, err := c.ReportShard(ctx, &coordinatorpb.ReportShardRequest{Job: "elastic", Node: "worker-0", Ids: []int64{first.Shard.Id}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("report on a full disk: %v; want Unavailable", err)
	}
	if _, doing, done, _ := j.ShardCounts(); doing != 1 || done != 0 {
		t.Fatalf("after the failed calls: doing %d done %d; want the one shard fetched before, not done", doing, done)
	}
	fail = nil
	second, err := fetch()
	if err != nil || second.Shard == nil {
		t.Fatalf("fetch after the disk has room: %v %v", second, err)
	}
	if second.Doing != 2 {
		t.Errorf("doing %d after the retried fetch; want 2", second.Doing)
	}
	if _, err := c.ReportShard(ctx, &coordinatorpb.ReportShardRequest{Job: "elastic", Node: "worker-0", Ids: []int64{first.Shard.Id, second.Shard.Id}}); err != nil {
		t.Fatal(err)
	}
	if _, doing, done, _ := j.ShardCounts(); doing != 0 || done != 2 {
		t.Errorf("doing %d done %d after the reports; want 0 and 2", doing, done)
	}
	if persisted != 4 {
		t.Errorf("%d shard records persisted; want 4 (two fetches, two reports)", persisted)
	}
}

// TestServerAddressPersisted: a restarted server's new address is made
// durable before its registration is acknowledged; when that fails, the
// registration fails Unavailable and workers are still handed the old
// address until the server registers again.
func TestServerAddressPersisted(t *testing.T) {
	c, j := startedJob(t)
	ctx := context.Background()
	var persisted []string
	var fail error
	j.PersistAddr = func(node, addr string) error {
		if fail != nil {
			return fail
		}
		persisted = append(persisted, node+"="+addr)
		return nil
	}
	register := func(addr string) error {
		_, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER, Addr: addr})
		return err
	}
	fail = errors.New("no space left on device")
	if err := register("127.0.0.1:2"); status.Code(err) != codes.Unavailable {
		t.Fatalf("a restarted server's registration on a full disk: %v; want Unavailable", err)
	}
	if a := j.ServerAddrs(); a[0] != "127.0.0.1:1" {
		t.Errorf("server addresses %v after the failed registration; want the old one", a)
	}
	fail = nil
	if err := register("127.0.0.1:2"); err != nil {
		t.Fatal(err)
	}
	if a := j.ServerAddrs(); a[0] != "127.0.0.1:2" || !slices.Equal(persisted, []string{"server-0=127.0.0.1:2"}) {
		t.Errorf("server addresses %v, persisted %v; want the new one, persisted once", a, persisted)
	}
}

// TestTableAndPlanReadWhileChanged: the manager reads the block table and
// the batch plan (views, PSLD, EPS, the elastic sequence) while a table
// change commits and a new split is recorded; under -race this fails if
// either is read without the job's lock, and every read sees a whole
// table or plan, never a mix.
func TestTableAndPlanReadWhileChanged(t *testing.T) {
	_, j := startedJob(t)
	next := j.Table()
	next.Version++
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if tb := j.Table(); tb.Version != next.Version-1 && tb.Version != next.Version {
				t.Errorf("table version %d, want %d or %d", tb.Version, next.Version-1, next.Version)
				return
			}
			if p := j.Plan(); len(p.Changes) > 1 {
				t.Errorf("plan has %d splits, want at most 1", len(p.Changes))
				return
			}
		}
	}()
	j.BeginTable(next, nil, 10, "a-1")
	j.CommitTable()
	if err := j.AddSplit(20, []int{40, 24}); err != nil {
		t.Error(err)
	}
	close(done)
	wg.Wait()
	if got := j.Table().Version; got != next.Version {
		t.Errorf("table version %d after the commit, want %d", got, next.Version)
	}
	if got := j.Plan().LocalOf(20, 0); got != 40 {
		t.Errorf("worker-0's batch from iteration 20 is %d, want 40", got)
	}
}

// TestSharedServerNames: the shared list a caller holds keeps its names
// when a server is added, and a caller's append does not reach the job's.
func TestSharedServerNames(t *testing.T) {
	_, j := startedJob(t)
	held := j.SharedServerNames()
	before := slices.Clone(held)
	name, _ := j.AddServer()
	if !slices.Equal(held, before) {
		t.Errorf("held names changed to %v after adding %s", held, name)
	}
	now := j.SharedServerNames()
	if len(now) != len(before)+1 || now[len(now)-1] != name {
		t.Errorf("names %v after adding %s", now, name)
	}
	_ = append(now, "intruder")
	if got := j.ServerNames(); !slices.Equal(got, now) {
		t.Errorf("a caller's append reached the job: %v", got)
	}
	if _, idx := j.AddServer(); j.ServerNames()[idx] == "intruder" {
		t.Error("the job's next server took a caller's appended name")
	}
}

// TestRegisterAddress: a node registers a host:port its peers can dial; an
// address with an escape sequence, a path or no port, or one longer than
// any host:port, is refused before it is stored or shown.
func TestRegisterAddress(t *testing.T) {
	c, _ := startedJob(t)
	ctx := context.Background()
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:4000", true},
		{"[::1]:4000", true},
		{"worker-0.kelpie.svc:4000", true},
		{"", true},
		{"127.0.0.1:4000\x1b]0;pwned\x07", false},
		{"10.6.6.6", false},
		{"/tmp/sock:1", false},
		{strings.Repeat("a", 400) + ":1", false},
	} {
		_, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "worker-0", Role: coordinatorpb.Role_ROLE_WORKER, Addr: tt.addr})
		if (err == nil) != tt.ok || (err != nil && status.Code(err) != codes.InvalidArgument) {
			t.Errorf("Register(addr %q) = %v; want ok=%v (InvalidArgument when refused)", tt.addr, err, tt.ok)
		}
	}
}

// TestFetchRedeliversALostShard: a fetch whose answer is lost (recorded,
// the shard DOING, but the worker never got it: a failover or a broken
// connection) and is made again, saying what the worker holds, gets the
// same shard, not a new one; nothing is left DOING that no worker knows
// of. A worker that holds the shard it was given gets the next one, and an
// older worker that says nothing of what it holds gets a new shard each
// time, as before.
func TestFetchRedeliversALostShard(t *testing.T) {
	c, j := startedJob(t)
	ctx := context.Background()
	fetch := func(held []int64, known bool) *coordinatorpb.ShardInfo {
		t.Helper()
		r, err := c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: "elastic", Node: "worker-0", Held: held, HeldKnown: known})
		if err != nil || r.Shard == nil {
			t.Fatalf("fetch: %v %v", r, err)
		}
		return r.Shard
	}
	lost := fetch(nil, true) // its answer never arrives
	again := fetch(nil, true)
	if again.Id != lost.Id || !slices.Equal(again.Order, lost.Order) {
		t.Fatalf("the fetch made again got shard %d; want the lost one, %d, again", again.Id, lost.Id)
	}
	if _, doing, _, _ := j.ShardCounts(); doing != 1 {
		t.Fatalf("%d shards DOING after a lost fetch made again; want 1", doing)
	}
	next := fetch([]int64{again.Id}, true)
	if next.Id == again.Id {
		t.Fatalf("a worker holding shard %d got it again", again.Id)
	}
	if _, err := c.ReportShard(ctx, &coordinatorpb.ReportShardRequest{Job: "elastic", Node: "worker-0", Ids: []int64{again.Id, next.Id}}); err != nil {
		t.Fatal(err)
	}
	old1, old2 := fetch(nil, false), fetch(nil, false)
	if old1.Id == old2.Id {
		t.Fatalf("an older worker's two fetches got shard %d twice", old1.Id)
	}
	if _, doing, done, _ := j.ShardCounts(); doing != 2 || done != 2 {
		t.Fatalf("doing %d, done %d; want 2 and 2", doing, done)
	}
}

// TestNoCompletionWithAShardDoing: a job whose workers have all finished
// while a shard is still DOING fails, naming the shard and its holder,
// instead of completing without it (issue 29's seed 7: a job completed with
// 187 of 188 shards DONE and one DOING).
func TestNoCompletionWithAShardDoing(t *testing.T) {
	c, j := startedJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: "elastic", Node: "worker-1"})
	if err != nil || r.Shard == nil {
		t.Fatalf("fetch: %v %v", r, err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := c.Done(ctx, &coordinatorpb.DoneRequest{Job: "elastic", Node: "worker-0"})
		first <- err
	}()
	_, err = c.Done(ctx, &coordinatorpb.DoneRequest{Job: "elastic", Node: "worker-1"})
	want := fmt.Sprintf("shard %d (worker-1)", r.Shard.Id)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Done with shard %d DOING: %v; want the job failed naming %q", r.Shard.Id, err, want)
	}
	if err := <-first; err == nil || status.Code(err) != codes.Aborted {
		t.Errorf("the other worker's Done: %v; want Aborted (the job failed)", err)
	}
	select {
	case <-j.Failed():
	default:
		t.Fatal("the job did not fail")
	}
	select {
	case <-j.Finished():
		t.Fatal("the job finished")
	default:
	}
}

// TestDropWorkerHandsBackItsShards: a worker given up on (it registered and
// fetched, then never joined) leaves its shards in the queue for the
// others, and the job completes with none DOING.
func TestDropWorkerHandsBackItsShards(t *testing.T) {
	c, j := startedJob(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name, _ := j.AddWorker()
	if _, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "elastic", Node: name, Role: coordinatorpb.Role_ROLE_WORKER}); err != nil {
		t.Fatal(err)
	}
	r, err := c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: "elastic", Node: name})
	if err != nil || r.Shard == nil {
		t.Fatalf("fetch: %v %v", r, err)
	}
	if err := j.DropWorker(name); err != nil {
		t.Fatal(err)
	}
	if _, doing, _, _ := j.ShardCounts(); doing != 0 {
		t.Fatalf("%d shards DOING after %s was dropped; want 0", doing, name)
	}
	got, err := c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: "elastic", Node: "worker-0"})
	if err != nil || got.Shard == nil || got.Shard.Id != r.Shard.Id {
		t.Fatalf("next fetch: %v %v; want shard %d, which %s held", got, err, r.Shard.Id, name)
	}
}

// TestRoleIndex: a node's slot, found by its number or, for a name not of
// the ROLE-i form, by search; a name of the form whose slot holds another
// name, or of another role, is refused.
func TestRoleIndex(t *testing.T) {
	s, err := spec.Parse("test.yaml", []byte(testSpec))
	if err != nil {
		t.Fatal(err)
	}
	j, err := New(nil).AddJob(s)
	if err != nil {
		t.Fatal(err)
	}
	j.workers = append(j.workers, "odd-name", "worker-7") // slot 2, and slot 3 named for another
	w, srv := coordinatorpb.Role_ROLE_WORKER, coordinatorpb.Role_ROLE_SERVER
	for _, c := range []struct {
		node string
		role coordinatorpb.Role
		want int // -1: refused
	}{
		{"worker-0", w, 0}, {"worker-1", w, 1}, {"odd-name", w, 2}, {"worker-7", w, 3},
		{"server-0", srv, 0},
		{"worker-2", w, -1}, {"worker-9", w, -1}, {"worker--1", w, -1}, {"worker-0", srv, -1}, {"server-0", w, -1}, {"", w, -1},
	} {
		got, err := j.roleIndex(c.node, c.role)
		if c.want < 0 {
			if err == nil {
				t.Errorf("roleIndex(%q, %v) = %d; want refused", c.node, c.role, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("roleIndex(%q, %v) = %d, %v; want %d", c.node, c.role, got, err, c.want)
		}
	}
}
