// Package policy holds kelpie's straggler policies as pure functions: each
// reads a monitor.Snapshot (and what the scheduler knows of the job) and
// returns a plan, a list of proposed Actions, each carrying the sentence
// and the numbers that justify it and the effect it is predicted to have.
// An empty plan is AntDT's NONE. Nothing here applies an action: the
// approval gate re-checks a plan against fresh state and dispatches it
// (CONVENTIONS §2–3).
//
// The policies and the papers they come from:
//
//   - AntDTND (AntDT §VI-A): transient worker straggler → ADJUST_BS from the
//     integer min-max batch split (Eq. 2–3, MinMaxSplit); persistent worker
//     straggler → KILL_RESTART when the cluster is not busy; persistent
//     server straggler → KILL_RESTART of the server.
//   - AntDTDD (AntDT §VI-B): batch sizes and gradient-accumulation counts
//     for heterogeneous devices (Eq. 4, Accumulation).
//   - BackupWorkers and AdjustLR: the other two actions of AntDT's action
//     set (Table II).
//   - PSLD (PSLD §4): PS speed-variance check, superior set (Alg. 1),
//     ε-greedy block assignment with the exploit cost of Alg. 2
//     (AssignPSLD), scale-out (Alg. 1 lines 11–12) and scale-in.
//   - EPS multi-job scheduling (EPS §4, Alg. 1): AdmitIncoming and
//     GrowRunning work on job sizes, not on one job's snapshot.
//
// Each policy is registered (registry.go) behind the Policy interface: a
// declaration of its parameters with their types, defaults and bounds,
// taken from its paper (core/policydecl), and Propose. The job spec's
// `policies:` section and every live edit are checked against the
// declaration; adding a policy is one file and one line of the registry
// (docs/scheduler.md, "Adding a policy").
//
// Everything is deterministic given its inputs: time is a value inside the
// snapshot, and the one random choice (PSLD's exploration) draws from the
// *rand.Rand the caller passes.
package policy

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kelpie/kelpie/scheduler/monitor"
)

// Kind is what an action does.
type Kind string

// The action kinds. ADJUST_BS, BACKUP_WORKERS, KILL_RESTART and ADJUST_LR
// are AntDT's action set (Table II; NONE is the empty plan); REASSIGN,
// ADD_SERVER and REMOVE_SERVER are PSLD's; ADD_WORKER and REMOVE_WORKER are
// EPS's; SET_SYNC changes the synchronisation model (operator-triggered).
const (
	KindAdjustBS      Kind = "ADJUST_BS"
	KindKillRestart   Kind = "KILL_RESTART"
	KindBackupWorkers Kind = "BACKUP_WORKERS"
	KindAdjustLR      Kind = "ADJUST_LR"
	KindReassign      Kind = "REASSIGN"
	KindAddServer     Kind = "ADD_SERVER"
	KindRemoveServer  Kind = "REMOVE_SERVER"
	KindAddWorker     Kind = "ADD_WORKER"
	KindRemoveWorker  Kind = "REMOVE_WORKER"
	KindSetSync       Kind = "SET_SYNC"
)

// Policy names, as in the job spec's `policies:` section.
const (
	NameAntDTND       = "antdt-nd"
	NameAntDTDD       = "antdt-dd"
	NameBackupWorkers = "backup-workers"
	NameAdjustLR      = "adjust-lr"
	NamePSLD          = "psld"
	NameEPS           = "eps"
)

// Action is one proposed step with its justification. Only the fields of
// its Kind are set.
type Action struct {
	Kind   Kind
	Policy string // the policy that proposed it (Name* constants)
	Target string // the node it acts on, or "" for a job-wide action

	// ADJUST_BS: every worker's local batch size (they sum to the global
	// batch). AntDT-DD adds the gradient-accumulation counts; a worker then
	// processes Accumulation[w] micro-batches of BatchSizes[w] samples per
	// iteration.
	BatchSizes   map[string]int
	Accumulation map[string]int
	// REASSIGN: Assignment[k] is the index in Job.Servers (the snapshot's
	// servers when Job.Servers is empty) of the server that block
	// Job.Blocks[k] is to live on.
	Assignment []int
	// ADJUST_LR: the factor each worker's learning rate is multiplied by.
	LRScale map[string]float64
	// BACKUP_WORKERS: how many of the slowest gradients each iteration
	// drops (0 turns backup workers off).
	Drop int

	// Reason is a sentence with the numbers, for people.
	Reason string
	// Evidence holds the numbers behind Reason, for the TUI and the log.
	// Times are in seconds (keys end in _s), throughputs in samples/s.
	Evidence map[string]float64

	// Predicted describes the predicted effect in words; PredictedBPT and
	// PredictedThroughput are the numbers when the policy has them (zero
	// when it does not).
	Predicted           string
	PredictedBPT        time.Duration
	PredictedThroughput float64

	// Key identifies the proposal: two actions with the same Key propose
	// the same thing, so the gate keeps one.
	Key string
}

// Job is what the scheduler knows of a job beyond the Monitor's snapshot:
// its configuration and current settings.
type Job struct {
	Name        string
	GlobalBatch int // B, fixed for the whole job (AntDT)
	// Throughput is the job's measured throughput: samples trained per
	// wall-clock second over the last window (manager.Throughput, the
	// figure the console shows); 0 before it is known. Predictions of a
	// job's throughput scale it by the predicted change of the time per
	// iteration, so that "before" is what the operator sees — and what the
	// realized-effect judge compares the prediction with, so that
	// prediction and verdict share one baseline. Zero: not measured yet
	// (the model's figure is used).
	Throughput float64
	Workers    []string // live workers; empty: the workers in the snapshot
	Servers    []string // live servers; empty: the servers in the snapshot
	// Current settings; missing entries mean the defaults (the batch size
	// the worker last reported, accumulation 1, learning-rate scale 1).
	BatchSizes   map[string]int
	Accumulation map[string]int
	LRScale      map[string]float64
	Drop         int // backup workers in effect (0: none)
	// Busy says the cluster is busy: a relaunched node would wait long in
	// the queue, so AntDT-ND takes no KILL_RESTART of a worker (§VI-A 4).
	Busy   bool
	Blocks []BlockInfo // the parameter blocks and where they live
	// LiveServers are the servers PSLD may move blocks to (those with an
	// address, in job order; nil: Servers) and ServerIndex[i] the index in
	// the job of LiveServers[i], the number the block table names a
	// server by (empty: a REASSIGN's Assignment indexes the servers as
	// they are).
	LiveServers []string
	ServerIndex []int
	// Aggregating says the sync model sums a barrier's gradients, so
	// that dropping the slowest ones (BACKUP_WORKERS) means something.
	Aggregating bool
	// Applied counts the job's applied actions by the policy that
	// proposed them.
	Applied map[string]int
	// Outcomes are the realized effects of the job's applied actions, in
	// the order they were measured; Restarts is each node's restart count
	// now. AntDT-ND learns from its misses through them (outcome.go).
	Outcomes []Outcome
	Restarts map[string]int
	// Awaiting are the job's applied actions whose effect is not measured
	// yet (and may still be): a policy that learns from its outcomes does
	// not repeat a change before it knows what the last one did.
	Awaiting []Awaiting
	// TimelineBPT is each node's BPT (seconds) over the long window as
	// the job's timeline records it — time-weighted, the figure the
	// realized-effect judge takes as a restart's "before" and "after" —
	// where the timeline has it. A restart predicts from it, so that
	// its prediction and its verdict share one baseline (the Monitor's
	// per-sample means, which classify, weigh a slow spell less).
	TimelineBPT map[string]float64
	// TimelineBPTOf, when TimelineBPT is nil, makes it on first use: it
	// reads the long window's frames of every node (400,000 entries a
	// tick at 20,000 nodes) and is read only about a straggler. A Job's
	// copies share what it made.
	TimelineBPTOf func() map[string]float64
}

// timelineBPT is j.TimelineBPT, made by TimelineBPTOf if need be.
func (j Job) timelineBPT() map[string]float64 {
	if j.TimelineBPT == nil && j.TimelineBPTOf != nil {
		return j.TimelineBPTOf()
	}
	return j.TimelineBPT
}

// throughputs is the job's throughput before and after a change that
// takes the modelled time per iteration from before to after (seconds):
// the measured throughput and the same scaled by before/after, or, with
// no measurement, the model's own global/before and global/after.
func (j Job) throughputs(global int, before, after float64) (now, then float64, measured bool) {
	if j.Throughput > 0 && before > 0 && after > 0 {
		return j.Throughput, j.Throughput * before / after, true
	}
	return float64(global) / before, float64(global) / after, false
}

// throughputText writes a predicted throughput change, saying which
// baseline it starts from.
func throughputText(now, then float64, measured bool) string {
	if measured {
		return fmt.Sprintf("throughput %s → %s samples/s (the measured %s/s, scaled by the modelled time per iteration)", num(now), num(then), num(now))
	}
	return fmt.Sprintf("throughput %s → %s samples/s (modelled: no measured throughput yet)", num(now), num(then))
}

// Awaiting is an applied action whose outcome is still to come.
type Awaiting struct {
	Policy  string
	Kind    Kind
	Targets []string // its target node, if it has one
	At      time.Time
}

// BlockInfo is one parameter block of the job.
type BlockInfo struct {
	ID     int
	Bytes  int64
	Server string // the server holding it now
}

// workers returns the job's workers in order, with their stats (zero
// WorkerStat with only Node set when the snapshot has none).
func jobWorkers(s monitor.Snapshot, j Job) []monitor.WorkerStat {
	if len(j.Workers) == 0 {
		return slices.Clone(s.Workers)
	}
	out := make([]monitor.WorkerStat, len(j.Workers))
	for i, name := range j.Workers {
		w, ok := s.Worker(name)
		if !ok {
			w = monitor.WorkerStat{Node: name}
		}
		out[i] = w
	}
	return out
}

// jobServers does for servers what jobWorkers does for workers.
func jobServers(s monitor.Snapshot, j Job) []monitor.ServerStat {
	if len(j.Servers) == 0 {
		return slices.Clone(s.Servers)
	}
	out := make([]monitor.ServerStat, len(j.Servers))
	for i, name := range j.Servers {
		v, ok := s.Server(name)
		if !ok {
			v = monitor.ServerStat{Node: name}
		}
		out[i] = v
	}
	return out
}

// currentBatch is the batch size worker w runs now: the job's setting, else
// the size it last reported, else an even share of the global batch.
func currentBatch(j Job, w monitor.WorkerStat, n int) int {
	if b, ok := j.BatchSizes[w.Node]; ok {
		return b
	}
	if w.BatchSize > 0 {
		return w.BatchSize
	}
	if n > 0 {
		return j.GlobalBatch / n
	}
	return 0
}

// secs formats seconds with three significant digits, in ms below a
// second as the console's tables are: "2.49ms", "198ms", "1.25s".
func secs(x float64) string {
	if math.Abs(x) < 1 && x != 0 {
		return num(x*1000) + "ms"
	}
	return num(x) + "s"
}

// dsecs formats a duration as secs does.
func dsecs(d time.Duration) string { return secs(d.Seconds()) }

// num formats a number with three significant digits, and numbers of a
// thousand or more as whole numbers: "0.138", "2156".
func num(x float64) string {
	if math.Abs(x) >= 1000 && !math.IsInf(x, 0) {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'g', 3, 64)
}

// list joins names as "a, b and c".
func list(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// plural returns "1 worker" or "2 workers".
func plural(n int, what string) string {
	if n == 1 || n == -1 {
		return strconv.Itoa(n) + " " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
