package manager

import (
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// TestStallFromReports: the workers' reports (ten iterations of 10 ms
// each, arriving as the last completes) become their iteration timelines,
// and an applied action's stall is the longest extra gap around it:
// worker-1 waits 400 ms in one iteration during the action; an action at a
// quiet time stalls nothing; an action not applied, or outside every
// timeline, has no stall.
func TestStallFromReports(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	m, j := testJob(t, Config{Now: clock}, "stall", 2, 1)
	tenMs := func(n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = 0.010
		}
		return out
	}
	start := clock()
	var changeFrom, changeTo time.Time
	for rep := 1; rep <= 10; rep++ {
		bpt := tenMs(10)
		if rep == 5 {
			bpt[4] = 0.410 // worker-1's fifth iteration of this report waits for blocks
		}
		d := 100 * time.Millisecond
		if rep == 5 {
			d += 400 * time.Millisecond
			changeFrom, changeTo = clock().Add(30*time.Millisecond), clock().Add(200*time.Millisecond)
		}
		advance(d)
		it := int64(rep * 10)
		reportOn(m, j, "worker-0", &coordinatorpb.ProgressReport{Job: "stall", Node: "worker-0", Iteration: it, BatchSize: 4, BptSeconds: tenMs(10)})
		reportOn(m, j, "worker-1", &coordinatorpb.ProgressReport{Job: "stall", Node: "worker-1", Iteration: it, BatchSize: 4, BptSeconds: bpt})
	}
	marks := j.workerMarks()
	if len(marks["worker-1"]) != 100 {
		t.Fatalf("worker-1's timeline has %d marks; want 100", len(marks["worker-1"]))
	}
	action := func(state string, from, to time.Time) *consolepb.Action {
		return &consolepb.Action{State: state, Created: timestamppb.New(from), Updated: timestamppb.New(to)}
	}
	for _, c := range []struct {
		name string
		a    *consolepb.Action
		want float64
		ok   bool
	}{
		{"during worker-1's wait", action(ActApplied, changeFrom, changeTo), 0.400, true},
		{"at a quiet time", action(ActApplied, start.Add(150*time.Millisecond), start.Add(170*time.Millisecond)), 0, true},
		{"not applied", action("failed", changeFrom, changeTo), 0, false},
		{"after every timeline", action(ActApplied, clock().Add(time.Second), clock().Add(2*time.Second)), 0, false},
	} {
		got := actionStalls([]*consolepb.Action{c.a}, marks)[0]
		if (got != nil) != c.ok || (got != nil && (*got-c.want > 1e-6 || c.want-*got > 1e-6)) {
			t.Errorf("%s: actionStalls = %v; want %v (measured: %v)", c.name, deref(got), c.want, c.ok)
		}
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
