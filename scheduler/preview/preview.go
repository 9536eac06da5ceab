// Package preview says what an action would do before an operator
// approves it: whether the processes or Pods it starts can start now (on
// Kubernetes: the Pods Pending and the namespace's quota; locally: the
// machine's capacity), what it costs (a restart or removal: the shards in
// flight that go back to the queue and the seconds of progress lost with
// them) and the effect its policy predicts. Pure: the manager gathers the
// inputs (the kube launcher answers for the cluster) and shows the result
// in the action's console record (Action.preview).
package preview

import (
	"fmt"
	"strings"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// Cluster is what Kubernetes says now about starting one more Pod.
type Cluster struct {
	Pending []string // Pods of the namespace Pending now
	// Quota is the namespace's ResourceQuota use of what a Pod takes
	// ("pods 9/10"), "" without one; Full says one more Pod exceeds it.
	Quota string
	Full  bool
	Err   string // the cluster could not be asked
}

// Held is a shard a node holds (DOING), with how long ago it was handed out.
type Held struct {
	AgeSeconds float64
}

// Input is what a preview is computed from.
type Input struct {
	Kind, Target string
	TargetRole   string // worker | server, "" for job-wide actions
	// Locally: the machine's CPUs and the nodes running on it now (every
	// job's); Cluster is set instead on Kubernetes.
	CPUs, Running int
	Cluster       *Cluster
	Held          []Held // the target's shards in flight (a worker's restart or removal)
	// The prediction: in words, and the throughput (samples/s) predicted
	// against the job's now (0: none made).
	Predicted                 string
	PredictedThroughput, Rate float64
}

// starts says whether an action of kind starts a process (a Pod).
func starts(kind string) bool {
	switch kind {
	case "KILL_RESTART", "ADD_WORKER", "ADD_SERVER":
		return true
	}
	return false
}

// loses says whether an action of kind on a worker sends its shards in
// flight back to the queue.
func loses(kind, role string) bool {
	return role == "worker" && (kind == "KILL_RESTART" || kind == "REMOVE_WORKER")
}

// Of is the preview of the action in.
func Of(in Input) *consolepb.ActionPreview {
	p := &consolepb.ActionPreview{CanStart: true}
	switch {
	case !starts(in.Kind):
		p.Start = "starts nothing"
	case in.Cluster != nil:
		c := in.Cluster
		p.PendingPods = c.Pending
		var why []string
		switch {
		case c.Err != "":
			p.CanStart = false
			why = append(why, "the cluster cannot be asked: "+c.Err)
		case len(c.Pending) > 0:
			p.CanStart = false
			why = append(why, fmt.Sprintf("%d Pod(s) Pending now (%s): a new Pod would wait too", len(c.Pending), list(c.Pending, 3)))
		}
		if c.Full {
			p.CanStart = false
			why = append(why, "quota full ("+c.Quota+")")
		} else if c.Quota != "" {
			why = append(why, "quota "+c.Quota)
		}
		if len(why) == 0 {
			why = append(why, "no Pod Pending, no quota in the way")
		}
		p.Start = "Kubernetes: " + strings.Join(why, "; ")
	default:
		p.Start = fmt.Sprintf("local: %d nodes running on %d CPUs", in.Running, in.CPUs)
		if in.CPUs > 0 && in.Running+1 > NodesPerCPU*in.CPUs {
			p.CanStart = false
			p.Start += fmt.Sprintf(": one more would oversubscribe the machine beyond %d nodes per CPU", NodesPerCPU)
		}
	}
	if loses(in.Kind, in.TargetRole) {
		p.ShardsRequeued = int64(len(in.Held))
		for _, h := range in.Held {
			p.ProgressLostS = max(p.ProgressLostS, h.AgeSeconds)
		}
		p.Cost = fmt.Sprintf("%d shard(s) back to the queue, ~%.1f s of %s's progress lost", p.ShardsRequeued, p.ProgressLostS, in.Target)
	} else {
		p.Cost = "no shard goes back to the queue"
	}
	p.Predicted = in.Predicted
	if in.PredictedThroughput > 0 && in.Rate > 0 {
		p.Predicted = strings.TrimSpace(fmt.Sprintf("%s (%.0f → %.0f samples/s, %+.0f %%)", in.Predicted, in.Rate,
			in.PredictedThroughput, 100*(in.PredictedThroughput/in.Rate-1)))
	}
	return p
}

// list is the first n of xs, and how many more.
func list(xs []string, n int) string {
	if len(xs) <= n {
		return strings.Join(xs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(xs[:n], ", "), len(xs)-n)
}

// NodesPerCPU is how many kelpie nodes a local machine runs per CPU before
// one more is refused by the preview: a role process keeps about one core
// busy while it computes, and the demo's seven nodes on two cores are
// already a crowd that only stays usable because workers wait on each
// other a good part of each iteration.
const NodesPerCPU = 4
