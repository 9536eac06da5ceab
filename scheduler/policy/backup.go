package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/kelpie/kelpie/core/policydecl"
	"github.com/kelpie/kelpie/scheduler/monitor"
)

// BackupWorkers proposes AntDT's BACKUP_WORKERS (Table II, after
// Sync-OPT): while some worker straggles, each iteration goes ahead with the
// first n − Drop gradients and drops the rest, whose shards go back to the
// queue (at-least-once). When no worker straggles any more it proposes
// Drop 0, waiting for every worker again.
type BackupWorkers struct {
	Drop   int     // b, the gradients dropped per iteration; zero means 1
	Lambda float64 // as AntDTND.Lambda
}

// Propose returns the BACKUP_WORKERS plan.
func (p BackupWorkers) Propose(s monitor.Snapshot, j Job) []Action {
	lambda := lambdaOf(p.Lambda, s)
	workers := jobWorkers(s, j)
	n := len(workers)
	ev := map[string]float64{"lambda": lambda}
	var why []string
	var bpts []float64 // short-window BPTs of the judged workers
	for _, w := range workers {
		if c := classify(w, lambda); c == monitor.Transient || c == monitor.Persistent {
			why = append(why, straggling(s, w, c, lambda, ev))
		}
		if w.SamplesTrans > 0 {
			bpts = append(bpts, w.BPTTrans.Seconds())
		}
	}
	if len(why) == 0 {
		if j.Drop == 0 {
			return nil
		}
		ev["drop"] = 0
		return []Action{{
			Kind:      KindBackupWorkers,
			Policy:    NameBackupWorkers,
			Reason:    fmt.Sprintf("no worker straggles (λ = %s): stop dropping the %s, wait for every worker again", num(lambda), plural(j.Drop, "slowest gradient")),
			Evidence:  ev,
			Predicted: "no gradient is dropped",
			Key:       NameBackupWorkers + "/" + string(KindBackupWorkers) + "/0",
		}}
	}
	drop := max(p.Drop, 1)
	if drop > n-1 {
		drop = n - 1
	}
	if drop < 1 || drop == j.Drop {
		return nil
	}
	ev["drop"] = float64(drop)
	a := Action{
		Kind:   KindBackupWorkers,
		Policy: NameBackupWorkers,
		Drop:   drop,
		Reason: fmt.Sprintf("%s: go ahead with the first %d of %d gradients each iteration and drop the %s; their shards go back to the queue",
			strings.Join(why, "; "), n-drop, n, plural(drop, "slowest")),
		Evidence: ev,
		Key:      fmt.Sprintf("%s/%s/%d", NameBackupWorkers, KindBackupWorkers, drop),
	}
	if len(bpts) >= n-drop && len(bpts) > 0 {
		// BSP then waits for the (n−b)-th fastest worker.
		slices.Sort(bpts)
		t := bpts[n-drop-1]
		wait := bpts[len(bpts)-1]
		ev["current_bpt_s"] = wait
		ev["predicted_bpt_s"] = t
		a.Predicted = fmt.Sprintf("each iteration waits for the %d fastest workers only: BPT %s → %s", n-drop, secs(wait), secs(t))
		a.PredictedBPT = time.Duration(t * float64(time.Second))
	}
	return []Action{a}
}

// BackupDrop is BACKUP_WORKERS' one parameter.
var BackupDrop = policydecl.Param{Name: "drop", Type: policydecl.Int, Default: 1, Min: 1, Max: math.Inf(1),
	Source: "AntDT Table II (BACKUP_WORKERS, after Sync-OPT): b gradients dropped per iteration, 1 ≤ b < workers"}

// backupWorkersPolicy is BACKUP_WORKERS in the registry. It proposes only
// under a sync model that sums a barrier's gradients (Job.Aggregating),
// and with the Monitor's λ (AntDT-ND's).
type backupWorkersPolicy struct{}

func (backupWorkersPolicy) Decl() policydecl.Policy {
	return policydecl.Policy{Name: NameBackupWorkers, Doc: "AntDT Table II: drop the slowest gradients of each iteration while workers straggle",
		Params: []policydecl.Param{BackupDrop},
		Rules: func(v policydecl.Values, c policydecl.Context) []policydecl.Violation {
			if d := v.Int(BackupDrop); c.Workers > 0 && d >= c.Workers {
				return []policydecl.Violation{{Param: BackupDrop.Key(), Msg: fmt.Sprintf("must be less than the job's %s, not %d (AntDT Table II: the iteration goes ahead with the first n − b gradients)",
					plural(c.Workers, "worker"), d)}}
			}
			return nil
		}}
}

func (backupWorkersPolicy) Propose(s Snapshot, _ *rand.Rand) []Action {
	if !s.Job.Aggregating {
		return nil
	}
	return BackupWorkers{Drop: s.Params.Int(BackupDrop), Lambda: s.Monitor.Config.Lambda}.Propose(s.Monitor, s.Job)
}
