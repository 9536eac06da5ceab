package manager

import (
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// Reports are taken in on the job's actor, like every agent message: a
// report's work there is O(1) in the job's size — its node's progress, the
// servers it exchanged with (their heatmap cells and sparklines), the
// Monitor's queue, the goodput ledger, the coordinator's samples ledger —
// and nothing of the job is copied or rebuilt per report: the console's
// views are built from rows the actor freezes at most once per view TTL
// (views.go), the job's facts are published once per batch (facts.go).
// Before, reports were taken in on their streams side by side under the
// job's lock held for reading: every write of the job (an agent
// connecting, a tick's writes) waited for the reports in flight and held
// the next ones back — 53% of the lock contention and a 3.5 s ingest p99
// in a 5,000-agent profile.

// report takes in a worker's progress report, on the job's actor: the
// samples ledger, then the node's progress, the Monitor and the heatmap.
// The first report of a job moves it from starting to running. It returns
// the ledger's refusal (an unknown node, bytes between regions the
// topology does not have).
func (m *Manager) report(j *jobState, node string, r *coordinatorpb.ProgressReport) error {
	now := m.now()
	ledgerErr := j.coord.Observe(r) // the samples ledger
	var servers []string
	if len(r.Comm) > 0 {
		servers = j.coord.SharedServerNames() // read only
	}
	if !j.observe(node, r, now, servers) {
		return ledgerErr
	}
	j.goodputReport(node, r, now, servers)
	j.wakeWaiters()
	if j.state == StateStarting {
		j.state = StateRunning
		j.invalidateViews()
	}
	return ledgerErr
}
