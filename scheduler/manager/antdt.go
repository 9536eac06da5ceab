package manager

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/timeline"
)

// AntDT's worker-side policies in the job manager: AntDT-ND (ADJUST_BS,
// KILL_RESTART), AntDT-DD (ADJUST_BS with accumulation counts),
// BACKUP_WORKERS and ADJUST_LR (AntDT Table II). Each reads the Monitor's
// snapshot and what the job runs now (batch sizes, accumulation counts,
// dropped gradients, learning-rate scales).

// policyJob is what the policies know of the job beyond the snapshot,
// its Workers in the nodes' order. The caller is the job's actor.
func (j *jobState) policyJob() policy.Job {
	pj := j.policyJobUnsorted()
	sortWorkers(pj.Workers)
	return pj
}

// policyJobUnsorted is policyJob with its Workers in no order. The
// caller is the job's actor.
func (j *jobState) policyJobUnsorted() policy.Job {
	f := j.freezePolicyJob()
	pj := f.job0
	f.fill(&pj)
	return pj
}

// frozenPolicyJob is policyJob as taken on the job's actor, its per-node
// maps not yet made (frozenPolicyJob.fill makes them, off the actor): a
// slice of the nodes in one pass. It runs on the actor every tick, and at
// 20,000 workers the sort of the workers (sortWorkers) and then the three
// maps of every node, made on the actor, held the reports back.
type frozenPolicyJob struct {
	job0  policy.Job // without Workers, BatchSizes, Accumulation, Restarts and LRScale
	nodes []policyNode
}

// policyNode is what policyJob reads of one node.
type policyNode struct {
	name     string
	worker   bool // a worker, not removed
	batch    int  // its micro-batch: the samples of an iteration over its accumulation count
	accum    int
	restarts int
	lr       float64
	hasLR    bool
}

// freezePolicyJob is what policyJob is made of. The caller is the job's
// actor.
func (j *jobState) freezePolicyJob() frozenPolicyJob {
	f := frozenPolicyJob{job0: policy.Job{Name: j.spec.Name, GlobalBatch: j.spec.Train.GlobalBatch, Drop: j.drop,
		Busy: j.clusterBusy() != "", Throughput: j.thr.rate()}, nodes: make([]policyNode, 0, len(j.nodes))}
	f.job0.Outcomes, f.job0.Awaiting = j.outcomes(), j.awaiting()
	f.job0.Applied = j.appliedByPolicy()
	for _, n := range j.nodes {
		pn := policyNode{name: n.name, restarts: int(n.status.Restarts), worker: n.role == "worker" && !n.removed}
		if pn.worker {
			w := n.name
			c := 1
			if len(j.accum) > 0 {
				c = max(j.accum[w], 1)
			}
			// A worker reports the samples of an iteration: C_i micro-batches
			// of B_i.
			pn.batch, pn.accum = n.prog.batch/c, c
			if len(j.lrScale) > 0 {
				pn.lr, pn.hasLR = j.lrScale[w]
			}
		}
		f.nodes = append(f.nodes, pn)
	}
	return f
}

// fill sets pj's per-node fields to the nodes' f was taken of: Workers
// (in no order), BatchSizes, Accumulation, Restarts and LRScale.
func (f *frozenPolicyJob) fill(pj *policy.Job) {
	size := len(f.nodes)
	pj.BatchSizes, pj.Accumulation, pj.LRScale = make(map[string]int, size), make(map[string]int, size), map[string]float64{}
	pj.Restarts, pj.Workers = make(map[string]int, size), make([]string, 0, size)
	for _, n := range f.nodes {
		pj.Restarts[n.name] = n.restarts
		if !n.worker {
			continue
		}
		pj.Workers = append(pj.Workers, n.name)
		pj.BatchSizes[n.name] = n.batch
		pj.Accumulation[n.name] = n.accum
		if n.hasLR {
			pj.LRScale[n.name] = n.lr
		}
	}
}

// sortWorkers orders worker names as the nodes' order does.
func sortWorkers(names []string) {
	sortByNode(names, func(name string) (string, string) { return "worker", name })
}

// measuredThroughput is the job's throughput over the last window of its
// timeline: the span-weighted samples per second of the frames, the figure
// the realized-effect judge (timeline.Realize) takes as an action's
// "before", so that a policy's prediction starts from the same baseline.
// Zero when no frame covers the window yet. Called on the job's actor.
func (j *jobState) measuredThroughput(window time.Duration) float64 {
	if j.hist.rec == nil || window <= 0 {
		return 0
	}
	frames := j.hist.rec.Frames()
	if len(frames) == 0 {
		return 0
	}
	end := frames[len(frames)-1].Time()
	return timeline.MeanThroughput(frames, timeline.Later(end.Add(-window), timeline.FirstTrained(frames)), end)
}

// timelineBPT is each node's BPT over the last window of the job's
// timeline, span-weighted over the frames in which it reported — what the
// realized-effect judge reads as a restart's "before" (timeline.Realize).
// frames are the timeline's (Recorder.Frames: a copy of the list, the
// frames never change once recorded), so it runs off the actor: at 20,000
// nodes it reads some 400,000 node entries a tick.
func timelineBPT(frames []*timeline.Frame, window time.Duration) map[string]float64 {
	if window <= 0 || len(frames) == 0 {
		return nil
	}
	from := frames[len(frames)-1].Time().Add(-window)
	sum, w := map[string]float64{}, map[string]float64{}
	for i := len(frames) - 1; i >= 0 && frames[i].Time().After(from); i-- {
		f := frames[i]
		for n := range f.NodeCount() {
			if x, ok := f.NodeValue(n); ok {
				sum[f.NodeName(n)] += x * f.SpanSeconds()
				w[f.NodeName(n)] += f.SpanSeconds()
			}
		}
	}
	out := make(map[string]float64, len(sum))
	for name, s := range sum {
		if w[name] > 0 {
			out[name] = s / w[name]
		}
	}
	return out
}

// awaiting lists the job's applied actions whose effect is still to be
// measured (history.go judges them; one it gave up on is not awaited).
// Called on the job's actor.
func (j *jobState) awaiting() []policy.Awaiting {
	var out []policy.Awaiting
	for _, a := range j.actions {
		if a.State != ActApplied || a.Realized != nil || j.hist.unjudged[a.Id] {
			continue
		}
		w := policy.Awaiting{Policy: a.Policy, Kind: policy.Kind(a.Kind), At: a.GetUpdated().AsTime()}
		if a.Target != "" {
			w.Targets = []string{a.Target}
		}
		out = append(out, w)
	}
	return out
}

// appliedByPolicy counts the job's applied actions by the policy that
// proposed them (AntDT-DD acts once: §VI-B).
func (j *jobState) appliedByPolicy() map[string]int {
	out := map[string]int{}
	for _, a := range j.actions {
		if a.Policy != "" && a.State == ActApplied {
			out[a.Policy]++
		}
	}
	return out
}

// validateLR checks an ADJUST_LR.
func (j *jobState) validateLR(a *consolepb.Action) error {
	scales := lrScales(a)
	if len(scales) == 0 {
		return status.Errorf(codes.InvalidArgument, "ADJUST_LR: no worker's scale (adjustLr.lrScale, or target and params.lr_scale, or params lr_scale/<worker>)")
	}
	for w, f := range scales {
		n, ok := j.nodes[w]
		if !ok || n.role != "worker" || n.removed {
			return status.Errorf(codes.InvalidArgument, "ADJUST_LR: %q is not a worker of job %s", w, j.spec.Name)
		}
		if !(f > 0 && f <= 10) {
			return status.Errorf(codes.InvalidArgument, "ADJUST_LR: %s's learning-rate scale must be in (0, 10], got %g", w, f)
		}
	}
	return nil
}

// dispatchLR sends an ADJUST_LR to the workers it names, through a primary
// agent; it applies once each has acked.
func (m *Manager) dispatchLR(j *jobState, a *consolepb.Action, who string) sendList {
	scales := lrScales(a)
	names := make([]string, 0, len(scales))
	for w := range scales {
		names = append(names, w)
	}
	sort.Slice(names, func(x, y int) bool { return nodeLess(names[x], names[y]) })
	j.await(a, names)
	sends := m.broadcastTo(j, a, names)
	m.transition(j, a, ActDispatched, who, fmt.Sprintf("to %s", strings.Join(names, ", ")))
	return sends
}

// fromProposalParams carries a proposal's typed arguments (and the params
// the console shows for them).
func fromProposalParams(p policy.Action, a *consolepb.Action) {
	if d, _ := kindOf(string(p.Kind)); d != nil && d.fromProposal != nil {
		d.fromProposal(p, a)
	}
	if len(p.Accumulation) > 0 {
		a.Accumulation = map[string]int32{}
		for w, c := range p.Accumulation {
			a.Accumulation[w] = int32(c)
		}
	}
}
