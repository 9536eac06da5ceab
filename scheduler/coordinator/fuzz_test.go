package coordinator

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/shard"
)

// FuzzRequests decodes arbitrary bytes as each Coordinator request (as
// gRPC would) and hands the result to its handler on a started job: no
// request, however malformed, may panic the scheduler or leave a handler
// blocked (blocking calls get a context that has ended), and the job's shard
// accounting stays exact around it (shardLedger.check): workers have
// fetched and reported shards before the request, and fetch, report and
// release after it.
func FuzzRequests(f *testing.F) {
	seed := func(rpc byte, m proto.Message) {
		b, _ := proto.Marshal(m)
		f.Add(rpc, b)
	}
	seed(0, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "worker-1", Role: coordinatorpb.Role_ROLE_WORKER})
	seed(0, &coordinatorpb.RegisterRequest{Job: "elastic", Node: "server-0", Role: coordinatorpb.Role_ROLE_SERVER, Addr: "127.0.0.1:9"})
	seed(1, &coordinatorpb.ReadyRequest{Job: "elastic", Node: "worker-0"})
	seed(2, &coordinatorpb.ProgressReport{Job: "elastic", Node: "worker-0", Iteration: 3, BptSeconds: []float64{0.1, -1}, Comm: []*coordinatorpb.CommSample{{Server: 9}}})
	seed(3, &coordinatorpb.DoneRequest{Job: "elastic", Node: "worker-1", Left: true})
	seed(4, &coordinatorpb.ResultRequest{Job: "elastic", Node: "worker-0"})
	seed(5, &coordinatorpb.FetchShardRequest{Job: "elastic", Node: "worker-0"})
	seed(6, &coordinatorpb.ReportShardRequest{Job: "elastic", Node: "worker-0", Ids: []int64{0, -1, 1 << 40}, Release: true})
	seed(7, &coordinatorpb.DivergedRequest{Job: "elastic", Node: "worker-0", Divergence: &coordinatorpb.Divergence{Node: "server-0", What: "loss"}})
	f.Fuzz(func(t *testing.T, rpc byte, data []byte) {
		c, j := startedJob(t)
		ctx := context.Background()
		ledger := readLedger(j)
		step := func(what string, do func()) {
			t.Helper()
			do()
			next := readLedger(j)
			if err := ledger.check(next); err != nil {
				t.Fatalf("after %s: %v", what, err)
			}
			ledger = next
		}
		fetch := func(w string) int64 {
			r, err := c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: "elastic", Node: w})
			if err != nil || r.Shard == nil {
				t.Fatalf("%s: FetchShard = %v, %v", w, r, err)
			}
			todo, doing, done := j.counts()
			if r.Todo != int64(todo) || r.Doing != int64(doing) || r.Done != int64(done) || r.Total != int64(j.total()) {
				t.Fatalf("%s: FetchShard counts %d/%d/%d of %d; the queue says %d/%d/%d of %d",
					w, r.Todo, r.Doing, r.Done, r.Total, todo, doing, done, j.total())
			}
			return r.Shard.Id
		}
		report := func(w string, release bool, ids ...int64) {
			_, _ = c.ReportShard(ctx, &coordinatorpb.ReportShardRequest{Job: "elastic", Node: w, Ids: ids, Release: release})
		}
		var first, second, third int64
		step("worker-0 fetches", func() { first = fetch("worker-0") })
		step("worker-0 fetches", func() { second = fetch("worker-0") })
		step("worker-1 fetches", func() { third = fetch("worker-1") })
		step("worker-0 reports", func() { report("worker-0", false, first) })
		step(fmt.Sprintf("request %d %x", rpc%8, data), func() { request(c, rpc, data) })
		// The same workers carry on (a fuzzed request may have removed or
		// re-registered them: their calls may then be refused, but the
		// ledger holds either way).
		step("worker-1 reports", func() { report("worker-1", false, third) })
		step("worker-0 reports twice", func() { report("worker-0", false, second, second) })
		step("worker-1 fetches", func() { _, _ = c.FetchShard(ctx, &coordinatorpb.FetchShardRequest{Job: "elastic", Node: "worker-1"}) })
		step("worker-1 releases", func() { report("worker-1", true) })
	})
}

// request decodes data as the Coordinator request rpc selects and hands it
// to its handler.
func request(c *Coordinator, rpc byte, data []byte) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	var err error
	switch rpc % 8 {
	case 0:
		var r coordinatorpb.RegisterRequest
		if err = proto.Unmarshal(data, &r); err == nil {
			_, _ = c.Register(ctx, &r)
		}
	case 1:
		var r coordinatorpb.ReadyRequest
		if err = proto.Unmarshal(data, &r); err == nil {
			_, _ = c.Ready(ended, &r)
		}
	case 2:
		var r coordinatorpb.ProgressReport
		if err = proto.Unmarshal(data, &r); err == nil {
			_, _ = c.Progress(ctx, &r)
		}
	case 3:
		var r coordinatorpb.DoneRequest
		if err = proto.Unmarshal(data, &r); err == nil {
			_, _ = c.Done(ended, &r)
		}
	case 4:
		var r coordinatorpb.ResultRequest
		if err = proto.Unmarshal(data, &r); err == nil {
			_, _ = c.Result(ctx, &r)
		}
	case 5:
		var r coordinatorpb.FetchShardRequest
		if err = proto.Unmarshal(data, &r); err == nil {
			_, _ = c.FetchShard(ctx, &r)
		}
	case 6:
		var r coordinatorpb.ReportShardRequest
		if err = proto.Unmarshal(data, &r); err == nil {
			_, _ = c.ReportShard(ctx, &r)
		}
	case 7:
		var r coordinatorpb.DivergedRequest
		if err = proto.Unmarshal(data, &r); err == nil {
			_, _ = c.Diverged(ctx, &r)
		}
	}
	_ = err // undecodable bytes are gRPC's to refuse
}

func (j *Job) counts() (todo, doing, done int) {
	j.Queue(func(q *shard.Queue) { todo, doing, done = q.Counts() })
	return todo, doing, done
}

func (j *Job) total() (n int) {
	j.Queue(func(q *shard.Queue) { n = q.Total() })
	return n
}

// shardLedger is what FuzzRequests reads of a job's shard queue.
type shardLedger struct {
	todo, doing, done, total int
	shards                   []shard.Shard
	// held: the DOING shards each owner holds, by the queue's index.
	held map[string][]shard.Shard
}

func readLedger(j *Job) shardLedger {
	var l shardLedger
	j.Queue(func(q *shard.Queue) {
		l.todo, l.doing, l.done = q.Counts()
		l.total = q.Total()
		l.shards = q.Shards()
		l.held = map[string][]shard.Shard{}
		for _, s := range l.shards {
			if s.Owner != "" {
				if _, seen := l.held[s.Owner]; !seen {
					l.held[s.Owner] = q.Held(s.Owner)
				}
			}
		}
	})
	return l
}

// check says how next, read after a request, breaks the shard accounting
// relative to l, read before it: todo+doing+done is the total and each count
// is the number of shards in that state; every shard is listed once, under
// its own ID; a DOING shard is held by its owner and by no one else, and
// nothing else is held; no shard appears or vanishes; and a DONE shard stays
// DONE.
func (l shardLedger) check(next shardLedger) error {
	if next.todo+next.doing+next.done != next.total {
		return fmt.Errorf("todo %d + doing %d + done %d != total %d", next.todo, next.doing, next.done, next.total)
	}
	if next.total != l.total || len(next.shards) != next.total {
		return fmt.Errorf("%d shards listed, total %d; had %d", len(next.shards), next.total, l.total)
	}
	var n [3]int
	holder := map[shard.ID]string{}
	for owner, hs := range next.held {
		for _, h := range hs {
			if other, dup := holder[h.ID]; dup {
				return fmt.Errorf("shard %d held by %s and %s", h.ID, other, owner)
			}
			holder[h.ID] = owner
		}
	}
	for i, s := range next.shards {
		if s.ID != shard.ID(i) {
			return fmt.Errorf("shard listed at %d has ID %d", i, s.ID)
		}
		switch s.State {
		case shard.TODO, shard.DOING, shard.DONE:
			n[s.State-shard.TODO]++
		default:
			return fmt.Errorf("shard %d in state %v", s.ID, s.State)
		}
		if h, ok := holder[s.ID]; (s.State == shard.DOING) != ok || (ok && h != s.Owner) {
			return fmt.Errorf("shard %d is %v (owner %q) but held by %q", s.ID, s.State, s.Owner, h)
		}
		if l.shards != nil && l.shards[i].State == shard.DONE && s.State != shard.DONE {
			return fmt.Errorf("shard %d went from DONE to %v", s.ID, s.State)
		}
	}
	if n != [3]int{next.todo, next.doing, next.done} {
		return fmt.Errorf("counts %d/%d/%d; the shards' states say %d/%d/%d", next.todo, next.doing, next.done, n[0], n[1], n[2])
	}
	return nil
}

// TestShardLedgerCheck: the accounting FuzzRequests checks refuses what it
// must, so a mistake in check cannot silently let everything through.
func TestShardLedgerCheck(t *testing.T) {
	base := func() shardLedger {
		return shardLedger{todo: 1, doing: 1, done: 1, total: 3,
			shards: []shard.Shard{{ID: 0, State: shard.TODO}, {ID: 1, State: shard.DOING, Owner: "w0"}, {ID: 2, State: shard.DONE, Owner: "w1"}},
			held:   map[string][]shard.Shard{"w0": {{ID: 1, State: shard.DOING, Owner: "w0"}}, "w1": nil}}
	}
	tests := []struct {
		name   string
		mutate func(*shardLedger)
		ok     bool
	}{
		{"unchanged", func(*shardLedger) {}, true},
		{"sum off", func(l *shardLedger) { l.todo = 2 }, false},
		{"counts disagree with states", func(l *shardLedger) { l.todo, l.doing = 2, 0 }, false},
		{"shard vanished", func(l *shardLedger) { l.shards = l.shards[:2]; l.total, l.done = 2, 0 }, false},
		{"listed under another ID", func(l *shardLedger) { l.shards[0].ID = 2 }, false},
		{"DOING not held", func(l *shardLedger) { l.held["w0"] = nil }, false},
		{"held by two", func(l *shardLedger) { l.held["w1"] = l.held["w0"] }, false},
		{"TODO held", func(l *shardLedger) { l.held["w1"] = []shard.Shard{{ID: 0}} }, false},
		{"DONE back to TODO", func(l *shardLedger) {
			l.shards[2] = shard.Shard{ID: 2, State: shard.TODO}
			l.todo, l.done = 2, 0
		}, false},
	}
	for _, tc := range tests {
		next := base()
		tc.mutate(&next)
		if err := base().check(next); (err == nil) != tc.ok {
			t.Errorf("%s: check = %v; want ok %v", tc.name, err, tc.ok)
		}
	}
}
