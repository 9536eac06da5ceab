package manager

import (
	"context"
	"runtime"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/preview"
	"github.com/kelpie/kelpie/scheduler/shard"
)

// clusterCapacity is what a Pods launcher that can say whether a new Pod
// of a job would start now implements (scheduler/kube.Launcher).
type clusterCapacity interface {
	Capacity(ctx context.Context, job string) preview.Cluster
}

// PreviewRefresh is how often the preview of an action waiting for
// approval is computed again: what it says (Pending Pods, quota, the
// machine's capacity, the shards a restart would send back) changes while
// it waits.
const PreviewRefresh = 5 * time.Second

// refreshWaiting computes again, each on a goroutine of its own, the
// preview of every action of a live job that waits for approval.
func (m *Manager) refreshWaiting() {
	for _, j := range m.jobList() {
		var waiting []*consolepb.Action
		j.onActor(func() {
			if !j.over() {
				for _, a := range j.actions {
					if a.State == ActProposed {
						waiting = append(waiting, a)
					}
				}
			}
		})
		for _, a := range waiting {
			m.spawn(func() { m.refreshPreview(j, a) })
		}
	}
}

// refreshPreview fills a's preview (scheduler/preview): whether what it
// starts can start now, what it costs and what it is predicted to do. It
// asks the cluster, so it runs off the job's actor (on a goroutine of
// its own when an action is added).
func (m *Manager) refreshPreview(j *jobState, a *consolepb.Action) {
	in := preview.Input{CPUs: runtime.NumCPU()}
	if cc, ok := m.cfg.Pods.(clusterCapacity); ok && m.cfg.Pods != nil {
		ctx, cancel := context.WithTimeout(m.ctx, podTimeout)
		c := cc.Capacity(ctx, j.spec.Name)
		cancel()
		in.Cluster = &c
	} else {
		for _, o := range m.jobList() {
			o.onActor(func() {
				for _, n := range o.nodes {
					if !n.removed && (n.status.State == agentpb.NodeState_NODE_STATE_RUNNING || n.status.State == agentpb.NodeState_NODE_STATE_STARTING) {
						in.Running++
					}
				}
			})
		}
	}
	start := j.coord.Start()
	now := m.now()
	j.onActor(func() {
		in.Kind, in.Target, in.Predicted = a.Kind, a.Target, a.Predicted
		in.PredictedThroughput = a.GetEvidence()["predicted_throughput"]
		in.Rate = j.measuredThroughput(j.mon.Config().LTrans)
		if n := j.nodes[a.Target]; n != nil {
			in.TargetRole = n.role
			if n.role == "worker" && !start.IsZero() {
				since := now.Sub(start)
				j.coord.Queue(func(q *shard.Queue) {
					for _, s := range q.Held(a.Target) {
						in.Held = append(in.Held, preview.Held{AgeSeconds: max(since-s.Since, 0).Seconds()})
					}
				})
			}
		}
		a.Preview = preview.Of(in)
		a.Preview.At = ts(now)
		j.invalidateViews()
	})
}
