package manager

import (
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// Reports are taken in on their agent's stream, side by side: a report
// writes only its node's progress (and a server's, for its pushes and
// pulls), under that node's own lock, the Monitor's queue and the
// heatmap's lock-free buckets. It holds the job's lock for reading,
// so that the job's shape (nodes, coordinator, Monitor) does not change
// under it, and waits only for a writer's short section, never for
// another report, a view being built or the job's actor. At 5,000 agents
// a report queued behind a batch of others and a view build (the actor
// took them in under the manager's lock, which then guarded every job)
// waited tens of milliseconds.

// report takes in a worker's progress report: the samples ledger, then the
// node's progress, the Monitor and the heatmap. The first report of a job
// moves it from starting to running. It returns the ledger's refusal (an
// unknown node, bytes between regions the topology does not have). The
// job's move to running is written by write (the job's actor: j.onActor
// from the agent's stream, j.locked on the actor itself).
func (m *Manager) report(j *jobState, node string, r *coordinatorpb.ProgressReport, write func(func())) error {
	now := m.now()
	j.mu.RLock()
	ledgerErr := j.coord.Observe(r) // the samples ledger
	var servers []string
	if len(r.Comm) > 0 {
		servers = j.coord.SharedServerNames() // read only
	}
	taken := j.observe(node, r, now, servers)
	j.mu.RUnlock()
	if !taken {
		return ledgerErr
	}
	j.wakeWaiters()
	if !j.running.Load() {
		write(func() {
			if j.state == StateStarting {
				j.state = StateRunning
				j.invalidateViews()
			}
			j.running.Store(true)
		})
	}
	return ledgerErr
}

// reportTimed takes in a report that arrived at t0 and records its ingest
// time.
func (m *Manager) reportTimed(j *jobState, node string, r *coordinatorpb.ProgressReport, write func(func())) {
	t0 := m.clk.Now()
	m.report(j, node, r, write)
	ingest.Observe(clock.Since(m.clk, t0).Seconds())
}
