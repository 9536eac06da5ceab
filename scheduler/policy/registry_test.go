package policy

import (
	"math/rand/v2"
	"testing"

	"github.com/kelpie/kelpie/core/policydecl"
)

// TestRegisteredPropose: each builtin policy, run through the registry as
// the job manager runs it, reads its declared parameters and the job's
// conditions the manager used to check for it (BACKUP_WORKERS needs an
// aggregating sync model, AntDT-DD acts once, PSLD names servers by their
// index in the job).
func TestRegisteredPropose(t *testing.T) {
	transient := workerScenario(slowAfter(25*s, 400*ms), 10*ms)
	run := func(name string, job Job, params policydecl.Values) []Action {
		p, ok := Lookup(name)
		if !ok {
			t.Fatalf("%s is not registered", name)
		}
		if params == nil {
			params = p.Decl().Defaults()
		}
		return p.Propose(Snapshot{Monitor: transient, Job: job, Params: params}, rand.New(rand.NewPCG(1, 2)))
	}
	job := ndJob(false, nil)
	if acts := run(NameBackupWorkers, job, nil); len(acts) != 0 {
		t.Errorf("backup-workers without an aggregating sync model proposed %s", plan(acts))
	}
	job.Aggregating = true
	if acts := run(NameBackupWorkers, job, policydecl.Values{"drop": 2}); len(acts) != 1 || acts[0].Drop != 2 {
		t.Errorf("backup-workers (drop 2) = %s; want BACKUP_WORKERS dropping 2", plan(acts))
	}
	if acts := run(NameAntDTND, job, nil); len(acts) == 0 {
		t.Error("antdt-nd at its default λ proposed nothing for a transient straggler")
	}
	if acts := run(NameAntDTND, job, policydecl.Values{"lambda": 10}); len(acts) != 0 {
		t.Errorf("antdt-nd at λ 10 = %s; want nothing (the straggler is 2.5× the mean)", plan(acts))
	}
	if acts := run(NameAdjustLR, job, nil); len(acts) != 1 || acts[0].Kind != KindAdjustLR {
		t.Errorf("adjust-lr = %s; want one ADJUST_LR", plan(acts))
	}
	dd := ndJob(false, map[string]int{"worker-0": 100, "worker-1": 100, "worker-2": 100, "worker-3": 100})
	p, _ := Lookup(NameAntDTDD)
	snap := Snapshot{Monitor: ddSnapshot(400, 400, 200, 100), Job: dd, Params: p.Decl().Defaults()}
	if acts := p.Propose(snap, nil); len(acts) != 1 {
		t.Fatalf("antdt-dd = %s; want one ADJUST_BS", plan(acts))
	}
	snap.Job.Applied = map[string]int{NameAntDTDD: 1}
	if acts := p.Propose(snap, nil); len(acts) != 0 {
		t.Errorf("antdt-dd after its split applied = %s; want nothing (it acts once)", plan(acts))
	}
}
