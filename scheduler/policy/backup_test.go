package policy

import (
	"strings"
	"testing"

	"github.com/kelpie/kelpie/scheduler/monitor"
)

func TestBackupWorkers(t *testing.T) {
	transient := workerScenario(slowAfter(25*s, 400*ms), 10*ms)
	healthy := workerScenario(steadyAt(100*ms), 10*ms)
	tests := []struct {
		name string
		snap monitor.Snapshot
		p    BackupWorkers
		have int // Job.Drop
		want []string
		drop int
	}{
		{"straggler: drop one", transient, BackupWorkers{}, 0, []string{"BACKUP_WORKERS"}, 1},
		{"already dropping one", transient, BackupWorkers{Drop: 1}, 1, []string{}, 0},
		{"drop capped at n−1", transient, BackupWorkers{Drop: 9}, 0, []string{"BACKUP_WORKERS"}, 3},
		{"healthy, nothing dropped", healthy, BackupWorkers{}, 0, []string{}, 0},
		{"healthy again: stop dropping", healthy, BackupWorkers{}, 1, []string{"BACKUP_WORKERS"}, 0},
	}
	for _, tt := range tests {
		job := ndJob(false, nil)
		job.Drop = tt.have
		acts := tt.p.Propose(tt.snap, job)
		if got := plan(acts); strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%s: Propose = %q; want %q", tt.name, got, tt.want)
			continue
		}
		if len(acts) == 1 && acts[0].Drop != tt.drop {
			t.Errorf("%s: Drop = %d; want %d", tt.name, acts[0].Drop, tt.drop)
		}
	}
	// With one dropped, the iteration waits for the third fastest worker
	// (100 ms) instead of worker-3 (250 ms on average).
	a := BackupWorkers{}.Propose(transient, ndJob(false, nil))[0]
	if a.PredictedBPT != 100*ms || a.Evidence["current_bpt_s"] != 0.25 {
		t.Errorf("predicted BPT %v from %v s; want 100ms from 0.25 s", a.PredictedBPT, a.Evidence["current_bpt_s"])
	}
}
