package manager

import (
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
	"github.com/kelpie/kelpie/scheduler/rollback"
)

// TestUndoSurvivesRestart: an operator's ADJUST_BS records, when it is
// dispatched, the batch split in force before it (its undo); the scheduler
// restarts on the same store, and the restored action still has it: once
// measured a miss, it is due a rollback that restores the old split.
func TestUndoSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kelpie.db")
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, path, clk)
	for range 3 {
		report(map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.002, "worker-3": 0.002})
	}
	split := map[string]int32{"worker-0": 20, "worker-1": 20, "worker-2": 4, "worker-3": 20}
	id, err := m.Trigger("hist", &consolepb.Action{Kind: "ADJUST_BS", BatchSizes: split}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int32{"worker-0": 16, "worker-1": 16, "worker-2": 16, "worker-3": 16}
	var undo *consolepb.ActionUndo
	j.onActor(func() { undo = j.byID[id].GetUndo() })
	if !maps.Equal(undo.GetBatchSizes(), before) {
		t.Fatalf("undo after dispatch = %v; want the split before, %v", undo, before)
	}

	m.Close()
	m.cfg.Store.Close()
	m2, _, _ := historyJob(t, path, clk)
	j2, _ := m2.lookup("hist")
	var a *consolepb.Action
	j2.onActor(func() { a = j2.byID[id] })
	if a == nil || !maps.Equal(a.GetUndo().GetBatchSizes(), before) {
		t.Fatalf("restored action %v; want its undo %v", a, before)
	}
	// Measured a miss (as the realized-effect judge would), it is due a
	// rollback to the split before.
	a.Realized = &timelinepb.Realized{Miss: true, ThroughputBefore: 1000, ThroughputAfter: 600}
	due, why := rollback.Due(a)
	if !due {
		t.Fatalf("restored action not due a rollback")
	}
	if r := rollback.Of(a, why); !maps.Equal(r.BatchSizes, before) {
		t.Errorf("its rollback sets %v; want %v", r.BatchSizes, before)
	}
}
