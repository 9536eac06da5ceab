package manager

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/timelinepb"
	"github.com/kelpie/kelpie/scheduler/store"
)

// testClock is a settable time for a manager whose loop the test drives.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// historyJob is a job of four workers on a manager that launches nothing,
// on a clock the test moves; report sends one second of every worker's
// reports (ten iterations of BPT bpt[w] at batch 16) and ticks the job.
func historyJob(t *testing.T, path string, clk *testClock) (*Manager, *jobState, func(bpt map[string]float64)) {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Store: st, NoLaunch: true, Tick: time.Hour, LogDir: t.TempDir(), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		st.Close()
	})
	_, restored := m.jobList()["hist"]
	if !restored {
		s, err := spec.Parse("hist.yaml", []byte("name: hist\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\n"+
			"train: {global_batch: 64}\ncluster: {workers: 4, servers: 1}\n"+
			"policies: {antdt-nd: {mode: off, window_transient: 3s, window_persistent: 6s}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.SubmitSpec(s, "test"); err != nil {
			t.Fatal(err)
		}
	}
	j := m.jobList()["hist"]
	for _, w := range []string{"worker-0", "worker-1", "worker-2", "worker-3"} {
		if restored {
			break
		}
		// Registered, so that the samples ledger takes their reports in
		// (the job's throughput is counted from it).
		if _, err := m.Coordinator().Register(context.Background(), &coordinatorpb.RegisterRequest{Job: "hist", Node: w,
			Role: coordinatorpb.Role_ROLE_WORKER, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	iter := map[string]int64{}
	report := func(bpt map[string]float64) {
		clk.add(time.Second)
		for _, w := range []string{"worker-0", "worker-1", "worker-2", "worker-3"} {
			b, ok := bpt[w]
			if !ok {
				continue
			}
			iter[w] += 10
			r := &coordinatorpb.ProgressReport{Job: "hist", Node: w, Iteration: iter[w], Samples: iter[w] * 16, BatchSize: 16, Loss: 0.5}
			for range 10 {
				r.BptSeconds = append(r.BptSeconds, b)
			}
			takeOn(m, j, j.nodes[w], &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Report{Report: r}})
		}
		j.tick(clk.now())
	}
	return m, j, report
}

// TestHistoryAndRealized: a job's timeline is recorded per bucket and
// served in pages; an applied ADJUST_BS that did not move its straggler is
// measured as a miss (an event, a stored record, an outcome for the
// policies) and survives a scheduler restart with the timeline.
func TestHistoryAndRealized(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kelpie.db")
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, path, clk)
	slow := map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.028, "worker-3": 0.002}
	for range 10 {
		report(slow)
	}
	// AntDT-ND's batch cut of worker-2, applied now.
	at := clk.now()
	pauseActor(j)
	throughput := j.thr.rate()
	a := &consolepb.Action{Id: "a-1", Job: "hist", Kind: "ADJUST_BS", Policy: "antdt-nd", State: ActApplied,
		BatchSizes: map[string]int32{"worker-0": 18, "worker-1": 18, "worker-2": 10, "worker-3": 18},
		Evidence:   map[string]float64{"predicted_throughput": 2 * throughput},
		Created:    timestamppb.New(at.Add(-time.Second)), Updated: timestamppb.New(at),
		History: []*consolepb.ActionTransition{{State: ActProposed, At: timestamppb.New(at.Add(-time.Second))},
			{State: ActApplied, At: timestamppb.New(at)}}}
	j.actions = append(j.actions, a)
	j.byID[a.Id] = a
	resumeActor(j)
	m.persistAction(j, a)
	for range 3 {
		report(slow) // the after-window (3 s) is not over: not measured yet
	}
	pauseActor(j)
	if a.Realized != nil {
		t.Errorf("measured before its window was over: %v", a.Realized)
	}
	resumeActor(j)
	for range 4 {
		report(slow)
	}
	pauseActor(j)
	r := a.Realized
	outcomes := j.outcomes()
	resumeActor(j)
	if r == nil {
		t.Fatal("not measured after its window")
	}
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	if !r.GetMiss() || !near(r.GetBptBeforeS(), 0.028) || !near(r.GetBptAfterS(), 0.028) || strings.Join(r.GetTargets(), ",") != "worker-2" ||
		r.GetWindowS() != 3 || r.GetBatchesBefore()["worker-2"] != 16 || !strings.HasSuffix(r.GetVerdict(), "✗") {
		t.Errorf("realized = %v; want a miss on worker-2 at 28 ms over 3 s windows, batch 16 before", r)
	}
	if len(outcomes) != 1 || !outcomes[0].Miss || !near(outcomes[0].BPTAfter, 0.028) || outcomes[0].BatchesBefore["worker-0"] != 16 {
		t.Errorf("outcomes = %+v; want the miss", outcomes)
	}
	var missEvent bool
	evs, _ := m.EventsSince(0, 1000)
	for _, e := range evs {
		missEvent = missEvent || e.Kind == "miss" && strings.Contains(e.Message, "ADJUST_BS (antdt-nd) realized: predicted")
	}
	if !missEvent {
		t.Errorf("no miss event among %v", evs)
	}

	res, err := m.History("hist", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	total := int(res.GetFramesTotal())
	if total < 15 || len(res.GetFrames()) != total || len(res.GetActions()) != 1 || len(res.GetEvents()) == 0 {
		t.Fatalf("history = %d of %d frames, %d actions, %d events; want every second recorded, the action, events",
			len(res.GetFrames()), total, len(res.GetActions()), len(res.GetEvents()))
	}
	for i, f := range res.GetFrames()[1:] {
		if prev := res.GetFrames()[i]; !f.Start().Equal(prev.GetTime().AsTime()) {
			t.Fatalf("frame %d starts at %v, the one before ends at %v: a gap", i+1, f.Start(), prev.GetTime().AsTime())
		}
	}
	page, err := m.History("hist", 5, 4)
	if err != nil || page.GetFramesFrom() != 5 || len(page.GetFrames()) != 4 || len(page.GetActions()) != 0 {
		t.Errorf("page from 5 of 4 = from %d, %d frames, %d actions, %v", page.GetFramesFrom(), len(page.GetFrames()), len(page.GetActions()), err)
	}
	if _, err := m.History("nope", 0, 0); err == nil {
		t.Error("history of an unknown job: no error")
	}
	j.flushHistory(clk.now(), true)

	// A scheduler restart on the same store: the action keeps its
	// realized effect, the timeline its frames.
	m.Close()
	m.cfg.Store.Close()
	m2, _, _ := historyJob(t, path, clk)
	j2, _ := m2.lookup("hist")
	pauseActor(j2)
	a2 := j2.byID["a-1"]
	resumeActor(j2)
	if a2 == nil || a2.GetRealized() == nil || !a2.GetRealized().GetMiss() {
		t.Errorf("restored action = %v; want its realized miss", a2)
	}
	res2, err := m2.History("hist", 0, 0)
	if err != nil || int(res2.GetFramesTotal()) != total {
		t.Errorf("restored history: %d frames, %v; want %d", res2.GetFramesTotal(), err, total)
	}
}

// TestRealizedResultJSON: the result's actions carry their realized effect
// under the names of issue 16, a figure that could not be measured as null.
func TestRealizedResultJSON(t *testing.T) {
	r := realizedOf(&timelinepb.Realized{WindowS: 5, BptBeforeS: 0.028, BptAfterS: math.NaN(), ThroughputBefore: 17400,
		ThroughputAfter: 12300, PredictedThroughput: 21000, PredictionError: (12300 - 21000) / 21000.0, Miss: true})
	b, err := json.Marshal(ActionResult{Kind: "ADJUST_BS", Realized: r})
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Realized map[string]any `json:"realized"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"window_s", "bpt_before_s", "bpt_after_s", "throughput_before", "throughput_after", "predicted_throughput", "prediction_error"} {
		if _, ok := back.Realized[k]; !ok {
			t.Errorf("realized has no %q: %s", k, b)
		}
	}
	if back.Realized["bpt_after_s"] != nil || back.Realized["miss"] != true {
		t.Errorf("realized = %s; want bpt_after_s null and miss true", b)
	}
}
