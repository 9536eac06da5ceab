package manager

import (
	"context"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// TestAheadOfTheLastTable: a global action is placed ahead of the workers'
// reported progress and never at or before the iteration the last table
// change took effect at, which every worker has passed even when its last
// report is older (a REMOVE_SERVER a second after a REASSIGN applied at
// iteration 18 was placed at 18 and the job hung).
func TestAheadOfTheLastTable(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, j := testJob(t, Config{Clock: clk}, "ps", 2, 2)
	for w := range 2 {
		name := spec.WorkerName(w)
		if _, err := m.Coordinator().Register(context.Background(), &coordinatorpb.RegisterRequest{Job: "ps", Node: name,
			Role: coordinatorpb.Role_ROLE_WORKER, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
		if err := reportOn(m, j, name, &coordinatorpb.ProgressReport{Job: "ps", Node: name, Iteration: 13, BatchSize: 32,
			BptSeconds: []float64{0.01}}); err != nil {
			t.Fatal(err)
		}
	}
	ahead := func() int64 {
		pauseActor(j)
		defer resumeActor(j)
		return j.aheadIteration(clk.Now())
	}
	base := ahead()
	if base <= 13 {
		t.Fatalf("ahead of reports at 13: %d; want past 13", base)
	}
	// A table change took effect at an iteration past what the reports say.
	at := base + 10
	j.coord.BeginTable(blocks.Table{Version: 2}, nil, at, "a-1")
	j.coord.CommitTable()
	if got := ahead(); got <= at {
		t.Errorf("after a table change at %d (reports still at 13): next global action at %d; want after %d", at, got, at)
	}
}

// TestAheadOfBunchedReports: reports that arrive a millisecond apart (an
// agent's backlog after an outage) advance the pace no faster than their
// iterations' own measured time, so the next global action is placed near
// where the workers are, not tens of thousands of iterations ahead.
func TestAheadOfBunchedReports(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, j := testJob(t, Config{Clock: clk}, "ps", 2, 1)
	name := spec.WorkerName(0)
	if _, err := m.Coordinator().Register(context.Background(), &coordinatorpb.RegisterRequest{Job: "ps", Node: name,
		Role: coordinatorpb.Role_ROLE_WORKER, Addr: "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	// 20 iterations per report, each 10 ms of BPT and 5 ms held: 300 ms of
	// training per report, at most ~67 iterations/s.
	bpt, wait := make([]float64, 20), make([]float64, 20)
	for i := range bpt {
		bpt[i], wait[i] = 0.010, 0.005
	}
	for r := range 10 {
		if err := reportOn(m, j, name, &coordinatorpb.ProgressReport{Job: "ps", Node: name, Iteration: int64(20 * (r + 1)),
			BatchSize: 32, BptSeconds: bpt, WaitSeconds: wait}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Millisecond)
	}
	pauseActor(j)
	rate := j.nodes[name].progress().rate
	ahead := j.aheadIteration(clk.Now())
	resumeActor(j)
	if rate > 70 {
		t.Errorf("pace from bunched reports: %.0f iterations/s; the iterations ran at most 67/s", rate)
	}
	if ahead > 200+60 {
		t.Errorf("next global action at iteration %d for a worker at 200 running ≤ 67 iterations/s; want within a second of it", ahead)
	}
}
