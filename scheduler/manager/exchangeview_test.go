package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/topology"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
)

// racksSpec is a job of 8 workers on 2 racks of 4 (worker-0..3 on r0)
// summing gradients with exchange (ring or rat).
func racksSpec(t testing.TB, name, exchange string) *spec.Spec {
	t.Helper()
	topo := "{"
	for w := range 8 {
		topo += fmt.Sprintf("worker-%d: {rack: r%d}, ", w, w/4)
	}
	s, err := spec.Parse(name+".yaml", []byte("name: "+name+"\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\n"+
		"train: {global_batch: 64}\ncluster: {workers: 8, exchange: "+exchange+", topology: "+topo+"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// short is worker-3's short name, w3.
func short(name string) string { return "w" + strings.TrimPrefix(name, "worker-") }

// treeText is a tree as one line: "root: level agg←members · …".
func treeText(tr *consolepb.ExchangeTree) string {
	var parts []string
	for _, a := range tr.Aggregations {
		var ms []string
		for _, m := range a.Members {
			ms = append(ms, short(m))
		}
		parts = append(parts, fmt.Sprintf("%s %s←%s", a.Level, short(a.Aggregator), strings.Join(ms, " ")))
	}
	return short(tr.Root) + ": " + strings.Join(parts, " · ")
}

func racksText(ex *consolepb.ExchangeTopology) string {
	var out []string
	for _, r := range ex.Racks {
		var ms []string
		for _, m := range r.Members {
			ms = append(ms, short(m))
		}
		out = append(out, r.Region+" "+strings.Join(ms, " "))
	}
	return strings.Join(out, " | ")
}

// TestExchangeViewAfterRemoveWorker: a RAT job on 2 racks × 4 has its 8
// workers' trees in the view; an operator's REMOVE_WORKER of worker-5,
// acked by every worker for its target iteration, changes nothing before
// that iteration and, once a worker reports reaching it, the view carries
// the trees of the 7 left (rebuilt at the iteration boundary, as the
// workers rebuild theirs). A PS job's view carries no exchange.
func TestExchangeViewAfterRemoveWorker(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := testManager(t, Config{Clock: clk})
	if _, err := m.SubmitSpec(racksSpec(t, "rat", spec.ExchangeRAT), "test"); err != nil {
		t.Fatal(err)
	}
	j := m.jobList()["rat"]
	for w := range 8 {
		if _, err := m.Coordinator().Register(context.Background(), &coordinatorpb.RegisterRequest{Job: "rat", Node: spec.WorkerName(w),
			Role: coordinatorpb.Role_ROLE_WORKER, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	conns := map[string]*agentConn{}
	pauseActor(j)
	for w := range 8 {
		c := &agentConn{out: make(chan *agentpb.SchedulerMessage, 8), done: make(chan struct{})}
		conns[spec.WorkerName(w)] = c
		j.nodes[spec.WorkerName(w)].conn = c
	}
	resumeActor(j)
	reach := func(it int64) {
		t.Helper()
		for w := range 8 {
			name := spec.WorkerName(w)
			if err := reportOn(m, j, name, &coordinatorpb.ProgressReport{Job: "rat", Node: name, Iteration: it, BatchSize: 8,
				BptSeconds: []float64{0.01}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	exchange := func() *consolepb.ExchangeTopology {
		t.Helper()
		clk.Advance(ViewTTL) // the published view expires
		v := m.View([]string{"rat"}, 10)
		if len(v) != 1 || v[0].Exchange == nil {
			t.Fatalf("views %v: want the job's, with its exchange", v)
		}
		return v[0].Exchange
	}

	reach(20)
	ex := exchange()
	if ex.Mode != "rat" || ex.Iteration != 20 || ex.TreesTotal != 8 || len(ex.Trees) != 8 || len(ex.RingOrder) != 0 {
		t.Fatalf("before: mode %q at %d, %d trees of %d, ring %v; want rat at 20, 8 of 8, no ring", ex.Mode, ex.Iteration, len(ex.Trees), ex.TreesTotal, ex.RingOrder)
	}
	if got, want := racksText(ex), "/r0 w0 w1 w2 w3 | /r1 w4 w5 w6 w7"; got != want {
		t.Errorf("before: racks %q; want %q", got, want)
	}
	if got, want := treeText(ex.Trees[5]), "w5: rack w5←w4 w6 w7 · pod w5←w1 · rack w1←w0 w2 w3"; got != want {
		t.Errorf("before: tree 5 %q; want %q", got, want)
	}

	id, err := m.Trigger("rat", &consolepb.Action{Kind: string(policy.KindRemoveWorker), Target: "worker-5"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	var at int64
	for name, c := range conns {
		var cmd *agentpb.ActionCommand
		select {
		case msg := <-c.out:
			cmd = msg.GetCommand()
		case <-time.After(10 * time.Second):
			t.Fatalf("%s got no command", name)
		}
		if cmd.GetActionId() != id || cmd.GetTargetIteration() <= 20 {
			t.Fatalf("%s got %v; want action %s for an iteration after 20", name, cmd, id)
		}
		at = cmd.GetTargetIteration()
		takeOn(m, j, j.nodes[name], &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Ack{Ack: &agentpb.ActionAck{
			ActionId: id, Applied: true, AppliedIteration: at}}})
	}
	if got := j.coord.Plan().LocalOf(at, 5); got != 0 {
		t.Fatalf("the coordinator's split gives worker-5 %d samples at %d; want the removal recorded", got, at)
	}

	reach(at - 1)
	if ex := exchange(); ex.Iteration != at-1 || ex.TreesTotal != 8 || !strings.Contains(racksText(ex), "w5") {
		t.Errorf("at %d, before the boundary: %d trees, racks %q; want worker-5 still summing", at-1, ex.TreesTotal, racksText(ex))
	}
	reach(at)
	ex = exchange()
	if got, want := racksText(ex), "/r0 w0 w1 w2 w3 | /r1 w4 w6 w7"; got != want || ex.Iteration != at {
		t.Errorf("after: racks %q at %d; want %q at %d", got, ex.Iteration, want, at)
	}
	var got []string
	for _, tr := range ex.Trees {
		got = append(got, treeText(tr))
	}
	// RAT's trees for the 7 (reduceplan.RAT; the root adds its rack and
	// the other rack's aggregator, which adds its own rack).
	want := []string{
		"w0: rack w0←w1 w2 w3 · pod w0←w4 · rack w4←w6 w7",
		"w1: rack w1←w0 w2 w3 · pod w1←w6 · rack w6←w4 w7",
		"w2: rack w2←w0 w1 w3 · pod w2←w7 · rack w7←w4 w6",
		"w3: rack w3←w0 w1 w2 · pod w3←w4 · rack w4←w6 w7",
		"w4: rack w4←w6 w7 · pod w4←w0 · rack w0←w1 w2 w3",
		"w6: rack w6←w4 w7 · pod w6←w1 · rack w1←w0 w2 w3",
		"w7: rack w7←w4 w6 · pod w7←w2 · rack w2←w0 w1 w3",
	}
	if ex.TreesTotal != 7 || !slices.Equal(got, want) {
		t.Errorf("after: %d trees\n%s\nwant 7\n%s", ex.TreesTotal, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A PS job has no exchange to draw.
	if _, err := m.SubmitSpec(racksSpec(t, "ps", spec.ExchangePS), "test"); err != nil {
		t.Fatal(err)
	}
	if v := m.View([]string{"ps"}, 10); len(v) != 1 || v[0].Exchange != nil {
		t.Errorf("PS job's view: %v; want no exchange", v)
	}
}

// TestExchangeViewPlans: the view's ring and trees are the runtime's own
// plans for the members of the split in force — every member once in the
// ring, crossing each rack boundary once each way; a single member sums
// nothing; a big RAT job shows its first trees only, the same as the full
// plan's.
func TestExchangeViewPlans(t *testing.T) {
	plan := func(local ...int) job.Plan { return job.Plan{GlobalBatch: 64, Local: local} }
	ring := racksSpec(t, "ring", spec.ExchangeRing)

	ex := exchangeView(ring, plan(8, 8, 8, 0, 8, 8, 8, 16), 3)
	if want := []string{"worker-0", "worker-1", "worker-2", "worker-4", "worker-5", "worker-6", "worker-7"}; ex.Mode != "ring" || !slices.Equal(ex.RingOrder, want) || len(ex.Trees) != 0 {
		t.Errorf("ring: mode %q, order %v, %d trees; want ring, %v, none", ex.Mode, ex.RingOrder, len(ex.Trees), want)
	}
	if ex := exchangeView(ring, plan(64, 0, 0, 0, 0, 0, 0, 0), 0); len(ex.RingOrder) != 0 || racksText(ex) != "/r0 w0" {
		t.Errorf("one member: order %v, racks %q; want no ring, /r0 w0", ex.RingOrder, racksText(ex))
	}

	// 40 workers, 4 racks of 10, in pods of two racks.
	s := &spec.Spec{}
	s.Cluster.Exchange = spec.ExchangeRAT
	s.Cluster.Topology = map[string]spec.Labels{}
	local := make([]int, 40)
	topo := make(topology.Topology, 40)
	for w := range 40 {
		local[w] = 1
		l := spec.Labels{Rack: fmt.Sprintf("r%d", w/10), Pod: fmt.Sprintf("p%d", w/20)}
		s.Cluster.Topology[spec.WorkerName(w)] = l
		topo[w] = topology.Place{Rack: l.Rack, Pod: l.Pod}
	}
	ex = exchangeView(s, plan(local...), 0)
	full := reduceplan.RAT(40, 1<<12, topo, 0)
	if ex.TreesTotal != 40 || len(ex.Trees) != maxViewTrees {
		t.Fatalf("%d trees of %d; want %d of 40", len(ex.Trees), ex.TreesTotal, maxViewTrees)
	}
	levels := map[string]bool{}
	for c, tr := range ex.Trees {
		root, children := full.Tree(c)
		if tr.Root != spec.WorkerName(root) {
			t.Errorf("tree %d: root %s; the full plan's is worker-%d", c, tr.Root, root)
		}
		got := map[string][]string{}
		for _, a := range tr.Aggregations {
			got[a.Aggregator] = append(got[a.Aggregator], a.Members...)
			levels[a.Level] = true
		}
		for agg, kids := range children {
			var names []string
			for _, k := range kids {
				names = append(names, spec.WorkerName(k))
			}
			slices.Sort(names)
			g := slices.Clone(got[spec.WorkerName(agg)])
			slices.Sort(g)
			if !slices.Equal(g, names) {
				t.Errorf("tree %d: worker-%d adds %v; the full plan's adds %v", c, agg, g, names)
			}
		}
		if len(got) != len(children) {
			t.Errorf("tree %d: %d aggregators; the full plan has %d", c, len(got), len(children))
		}
	}
	if len(levels) != 3 {
		t.Errorf("levels %v; want rack, pod and cluster on racks in pods", levels)
	}
}

// BenchmarkExchangeView: planning a RAT job's exchange for a view, at 8
// members (the netns experiments), 64 and 1,000 on 10 racks.
func BenchmarkExchangeView(b *testing.B) {
	for _, n := range []int{8, 64, 1000} {
		s := &spec.Spec{}
		s.Cluster.Exchange = spec.ExchangeRAT
		s.Cluster.Topology = map[string]spec.Labels{}
		local := make([]int, n)
		for w := range n {
			local[w] = 1
			s.Cluster.Topology[spec.WorkerName(w)] = spec.Labels{Rack: fmt.Sprintf("r%d", w*10/n)}
		}
		plan := job.Plan{GlobalBatch: n, Local: local}
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				exchangeView(s, plan, 0)
			}
		})
	}
}

// BenchmarkExchangeShareOfView: a whole detail view of an 8-worker RAT
// job on 2 racks (exchange included), beside planning its exchange alone,
// in the same run: the exchange's share of building the view.
func BenchmarkExchangeShareOfView(b *testing.B) {
	st, err := store.Open(filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(Config{Store: st, NoLaunch: true, Tick: time.Hour, LogDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		m.Close()
		st.Close()
	}()
	s := racksSpec(b, "share", spec.ExchangeRAT)
	if _, err := m.SubmitSpec(s, "test"); err != nil {
		b.Fatal(err)
	}
	j := m.jobList()["share"]
	for w := range 8 {
		name := spec.WorkerName(w)
		_ = reportOn(m, j, name, &coordinatorpb.ProgressReport{Job: "share", Node: name, Iteration: 10, BatchSize: 8, BptSeconds: []float64{0.01}})
	}
	b.Run("view", func(b *testing.B) {
		for b.Loop() {
			j.view(viewKey{detail: true, columns: 60})
		}
	})
	b.Run("exchange", func(b *testing.B) {
		plan := j.coord.Plan()
		for b.Loop() {
			exchangeView(s, plan, 10)
		}
	})
}

// TestExchangeCache: a view of the same members shares the last view's
// plan (at its own iteration); other members, or a changed spec, are
// planned afresh — as exchangeView plans them.
func TestExchangeCache(t *testing.T) {
	plan := func(local ...int) job.Plan { return job.Plan{GlobalBatch: 64, Local: local} }
	rat := racksSpec(t, "rat", spec.ExchangeRAT)
	var c exchangeCache
	a := c.view(rat, plan(8, 8, 8, 8, 8, 8, 8, 8), 3)
	b := c.view(rat, plan(8, 8, 8, 8, 8, 8, 8, 8), 4)
	if b.Iteration != 4 || len(b.Trees) == 0 || &b.Trees[0] != &a.Trees[0] {
		t.Errorf("same members: iteration %d, trees shared %v; want 4, shared", b.Iteration, len(b.Trees) > 0 && &b.Trees[0] == &a.Trees[0])
	}
	seven := plan(8, 8, 8, 0, 8, 8, 8, 16)
	if got, want := c.view(rat, seven, 5), exchangeView(rat, seven, 5); !proto.Equal(got, want) {
		t.Errorf("other members: %v; want %v", got, want)
	}
	ring := racksSpec(t, "ring", spec.ExchangeRing)
	if got := c.view(ring, seven, 5); got.Mode != "ring" || len(got.RingOrder) != 7 {
		t.Errorf("another spec: mode %q, ring of %d; want ring of 7", got.Mode, len(got.RingOrder))
	}
}
