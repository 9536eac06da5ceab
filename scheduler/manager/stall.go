package manager

import (
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/timeline"
)

// Every applied action's stall — how long the workers stopped making
// progress around it — is read off the workers' iteration timelines, the
// same way whatever the action did (timeline.Stall): a hot table change
// and the checkpoint-and-restart baseline are measured alike, unlike
// paused_seconds, which each measures its own way (the servers' wait for
// blocks in transit; the scheduler's clock from stopping the workers to
// their first report after the relaunch).

// Bounds of the workers' iteration timelines.
const (
	// MarksBudget is how many iteration marks a job's workers keep in
	// all (32 bytes each: 16 MiB).
	MarksBudget = 1 << 19
	// MinMarks is the least each worker keeps, however many workers.
	MinMarks = 64
)

// marksPerWorker is how many marks each worker of s keeps: a change older
// than a worker's last marksPerWorker iterations is not covered by its
// record (its stall is then unknown).
func marksPerWorker(s *spec.Spec) int {
	w := max(s.Cluster.Workers, s.Cluster.MaxWorkers, 1)
	return max(MinMarks, MarksBudget/w)
}

// workerMarks copies the workers' iteration timelines. The caller is
// the job's actor.
func (j *jobState) workerMarks() map[string][]timeline.Mark {
	out := map[string][]timeline.Mark{}
	for name, n := range j.nodes {
		if n.role != "worker" {
			continue
		}
		if n.marks != nil {
			out[name] = n.marks.All()
		}
	}
	return out
}

// actionStalls is each action's stall in seconds (by its position in
// actions, which are in the order they were made), from its creation to
// its application; nil for an action not applied, or one no worker's
// timeline covers. A gap that overlaps several applied actions is charged
// to one of them (timeline.Stalls).
func actionStalls(actions []*consolepb.Action, marks map[string][]timeline.Mark) []*float64 {
	out := make([]*float64, len(actions))
	var windows []timeline.Window
	var at []int
	for i, a := range actions {
		if a.State != ActApplied || a.Created == nil || a.Updated == nil {
			continue
		}
		windows = append(windows, timeline.Window{From: a.Created.AsTime(), To: a.Updated.AsTime()})
		at = append(at, i)
	}
	stall, ok := timeline.JobStalls(marks, windows)
	for k, i := range at {
		if ok[k] {
			s := stall[k].Seconds()
			out[i] = &s
		}
	}
	return out
}
