package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/consolepb"
)

// Pods runs a job's nodes somewhere other than this machine (Kubernetes:
// scheduler/kube). With Config.Pods set the manager starts no local
// processes: each node is created, replaced and deleted through it.
type Pods interface {
	StartJob(ctx context.Context, s *spec.Spec) error
	StartNode(ctx context.Context, job, role, node string, args []string) error
	// Restart replaces the node's Pod (KILL_RESTART) and names the new one.
	Restart(ctx context.Context, job, node string) (string, error)
	StopNode(ctx context.Context, job, node string) error
	// EndJob deletes every object of the job.
	EndJob(ctx context.Context, job string) error
	// Busy says why the cluster is busy for the job ("" when it is not):
	// Pods stay Pending, so AntDT-ND takes no KILL_RESTART meanwhile.
	Busy(job string) string
}

// podTimeout bounds one call to the cluster.
const podTimeout = 30 * time.Second

// ClusterEvent records what the cluster did to a job's node (a Pod pending
// for long, OOMKilled, evicted, deleted and relaunched) in the job's events.
func (m *Manager) ClusterEvent(job, node, msg string) {
	if _, ok := m.lookup(job); !ok {
		return
	}
	m.event(job, "cluster", node, msg, "")
}

// clusterBusy says why the cluster is busy for the job ("" when it is
// not, or the job is not on a cluster).
func (j *jobState) clusterBusy() string {
	if j.m.cfg.Pods == nil {
		return ""
	}
	return j.m.cfg.Pods.Busy(j.spec.Name)
}

// restartPod carries out a worker's KILL_RESTART on Kubernetes: its Pod is
// replaced by a fresh one, which may land on another machine.
func (m *Manager) restartPod(j *jobState, a *consolepb.Action) {
	ctx, cancel := context.WithTimeout(m.ctx, podTimeout)
	pod, err := m.cfg.Pods.Restart(ctx, j.spec.Name, a.Target)
	cancel()
	j.onActor(func() {
		if err != nil {
			m.transition(j, a, ActFailed, "scheduler", err.Error())
		} else {
			m.transition(j, a, ActApplied, "scheduler", fmt.Sprintf("pod replaced by %s", pod))
		}
	})
	m.persistAction(j, a)
}

// endPods deletes a finished job's Pods and the objects they used.
func (m *Manager) endPods(job string) {
	ctx, cancel := context.WithTimeout(context.Background(), podTimeout)
	defer cancel()
	if err := m.cfg.Pods.EndJob(ctx, job); err != nil {
		m.log.Error("end job's pods", "job", job, "err", err)
	}
}
