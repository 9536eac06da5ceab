package manager

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// TestStaleProposalWithdrawn: AntDT-ND proposes an ADJUST_BS for a
// transient straggler; once the straggler has recovered, the next round of
// the policies no longer proposes it and, once that has held for
// WithdrawGrace, the pending proposal expires with
// the reason in its history, instead of waiting for an operator to approve
// a change for a slowness that is gone.
func TestStaleProposalWithdrawn(t *testing.T) {
	m, j := testJob(t, Config{}, "stale", 4, 1)
	if err := m.SetPolicy("stale", policy.NameAntDTND, ModeApprove, nil, "test"); err != nil {
		t.Fatal(err)
	}
	pauseActor(j)
	j.state = StateRunning
	resumeActor(j)
	start := j.submitted
	feed := func(from, to time.Duration, slow bool) {
		for w := range 4 {
			node := fmt.Sprintf("worker-%d", w)
			for at := from; at < to; at += 100 * time.Millisecond {
				bpt := 100 * time.Millisecond
				if slow && w == 3 {
					bpt = 400 * time.Millisecond
				}
				j.mon.ObserveWorker(node, monitor.WorkerSample{At: at, BPT: bpt, BatchSize: 16, Iteration: int64(at / (100 * time.Millisecond))})
			}
		}
	}
	round := func(at time.Duration) {
		j.runPolicies(j.mon.Snapshot(at), start.Add(at))
	}
	feed(0, 8*time.Second, false)
	feed(8*time.Second, 10*time.Second, true) // worker-3 slow for 2 s: transient
	round(10 * time.Second)
	var id string
	pauseActor(j)
	for _, a := range j.actions {
		if a.Kind == string(policy.KindAdjustBS) && a.State == ActProposed {
			id = a.Id
		}
	}
	resumeActor(j)
	if id == "" {
		t.Fatalf("no ADJUST_BS proposed for worker-3's slowness: %v", j.actions)
	}
	feed(10*time.Second, 20*time.Second, false) // recovered
	round(20 * time.Second)
	// One round without it is not enough: a proposal is withdrawn once
	// its policy has left it out for WithdrawGrace.
	pauseActor(j)
	if a := j.byID[id]; a.State != ActProposed {
		t.Errorf("proposal %s is %s after one round without it; want still proposed (grace %s)", id, a.State, WithdrawGrace)
	}
	resumeActor(j)
	feed(20*time.Second, 20*time.Second+WithdrawGrace+time.Second, false)
	round(20*time.Second + WithdrawGrace + time.Second)
	pauseActor(j)
	defer resumeActor(j)
	a := j.byID[id]
	if a.State != ActExpired {
		t.Fatalf("proposal %s is %s after worker-3 recovered; want expired", id, a.State)
	}
	if note := a.History[len(a.History)-1].Note; !strings.Contains(note, "no longer proposes it under its current parameters (lambda=1.5") {
		t.Errorf("expiry note %q does not say why", note)
	}
}
