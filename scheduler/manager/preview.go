package manager

import (
	"context"
	"runtime"

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
		j.invalidateViews()
	})
}
