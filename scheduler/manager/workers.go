package manager

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/store"
)

// Hot worker changes (EPS §3): ADD_WORKER launches a new worker that joins
// the servers' barriers where the job is and starts taking shards; then
// every worker switches, at one target iteration, to a batch split that
// gives it a share of the global batch. REMOVE_WORKER gives the leaving
// worker's share to the others at a target iteration; at that iteration the
// leaving worker hands back the shard it has started, leaves the barriers
// and exits. The global batch B stays fixed throughout (AntDT Eq. 2).

// workerJoinTimeout bounds how long an added worker may take to come up
// (process start, data loading, first report).
const workerJoinTimeout = 2 * time.Minute

// newNode makes the state of a node added while the job runs.
func (j *jobState) newNode(name, role string) *nodeState {
	cols := j.m.cfg.Columns
	n := &nodeState{name: name, role: role, cells: newBuckets(cols)}
	n.status.State = agentpb.NodeState_NODE_STATE_STARTING
	return n
}

// servers counts the job's servers: those registered and not removed,
// or the spec's count before they have registered.
func (j *jobState) servers() int {
	if n := len(j.activeServers()); n > 0 {
		return n
	}
	return j.spec.Cluster.Servers
}

// liveWorkers lists the workers still in the job, in index order.
func (j *jobState) liveWorkers() []string {
	var out []string
	for _, n := range j.nodes {
		if n.role == "worker" && !n.removed {
			out = append(out, n.name)
		}
	}
	sortByNode(out, func(name string) (string, string) { return "worker", name })
	return out
}

// liveWorkerCount is len(liveWorkers()) without listing them.
func (j *jobState) liveWorkerCount() int {
	k := 0
	for _, n := range j.nodes {
		if n.role == "worker" && !n.removed {
			k++
		}
	}
	return k
}

// workerChanging says whether a worker change or a batch split is under
// way (they all re-split the global batch, so one at a time).
func (j *jobState) workerChanging(except *consolepb.Action) *consolepb.Action {
	for _, a := range j.actions {
		if a == except || (a.State != ActApproved && a.State != ActDispatched) {
			continue
		}
		if d := defOf(a); d != nil && d.resplit {
			return a
		}
	}
	return nil
}

// validateWorkerChange checks what ADD_WORKER and REMOVE_WORKER have in
// common (each kind's validate checks the rest: validateAddWorker,
// validateRemoveWorker).
func (j *jobState) validateWorkerChange(a *consolepb.Action) error {
	if j.spec.Cluster.Elasticity == spec.ElasticityCheckpointRestart {
		return status.Errorf(codes.FailedPrecondition, "%s: job %s changes workers only hot (cluster.elasticity is %s)",
			a.Kind, j.spec.Name, j.spec.Cluster.Elasticity)
	}
	if j.state != StateRunning {
		return status.Errorf(codes.FailedPrecondition, "%s: job %s is %s, not running", a.Kind, j.spec.Name, j.state)
	}
	if other := j.workerChanging(a); other != nil {
		return status.Errorf(codes.FailedPrecondition, "%s: %s %s is still under way", a.Kind, other.Kind, other.Id)
	}
	return nil
}

// validateAddWorker checks an ADD_WORKER.
func (j *jobState) validateAddWorker(a *consolepb.Action) error {
	if err := j.validateWorkerChange(a); err != nil {
		return err
	}
	if live := j.liveWorkerCount(); live+1 > j.spec.Train.GlobalBatch {
		return status.Errorf(codes.FailedPrecondition, "ADD_WORKER: %d workers cannot share a global batch of %d",
			live+1, j.spec.Train.GlobalBatch)
	}
	if j.launcher == nil {
		return status.Errorf(codes.FailedPrecondition, "ADD_WORKER: job %s was adopted after a scheduler restart; this scheduler cannot launch its nodes", j.spec.Name)
	}
	return nil
}

// validateRemoveWorker checks a REMOVE_WORKER.
func (j *jobState) validateRemoveWorker(a *consolepb.Action) error {
	if err := j.validateWorkerChange(a); err != nil {
		return err
	}
	live := j.liveWorkers()
	n, ok := j.nodes[a.Target]
	if !ok || n.role != "worker" || n.removed {
		return status.Errorf(codes.InvalidArgument, "REMOVE_WORKER: %q is not a worker of job %s", a.Target, j.spec.Name)
	}
	if len(live) < 2 {
		return status.Errorf(codes.FailedPrecondition, "REMOVE_WORKER: %s is the job's last worker", a.Target)
	}
	return nil
}

// resplit shares the global batch among names: the workers in current keep
// their proportions, a worker missing from it gets an even share first
// (largest remainder; everyone at least 1).
func resplit(total int, names []string, current map[string]int) map[string]int {
	n := len(names)
	out := make(map[string]int, n)
	if n == 0 {
		return out
	}
	weights := make([]float64, n)
	var sum float64
	var fresh int
	for i, w := range names {
		if b := current[w]; b > 0 {
			weights[i] = float64(b)
			sum += weights[i]
		} else {
			fresh++
		}
	}
	// A new worker counts as an average one.
	avg := float64(total) / float64(n)
	if sum > 0 {
		scale := (float64(total) - avg*float64(fresh)) / sum
		for i := range weights {
			if weights[i] > 0 {
				weights[i] *= scale
			}
		}
	}
	for i := range weights {
		if weights[i] == 0 {
			weights[i] = avg
		}
	}
	given := 0
	rem := make([]float64, n)
	for i, w := range names {
		b := max(int(weights[i]), 1)
		out[w] = b
		given += b
		rem[i] = weights[i] - float64(int(weights[i]))
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rem[order[a]] > rem[order[b]] })
	for k := 0; given < total; k = (k + 1) % n {
		out[names[order[k]]]++
		given++
	}
	for changed := true; given > total && changed; {
		// Take back from the smallest fractions; nobody goes below 1 (so
		// more workers than samples cannot be split: validation refuses it).
		changed = false
		for k := n - 1; k >= 0 && given > total; k-- {
			if w := names[order[k]]; out[w] > 1 {
				out[w]--
				given--
				changed = true
			}
		}
	}
	return out
}

// currentBatches is every live worker's batch size now.
func (j *jobState) currentBatches() map[string]int {
	out := map[string]int{}
	for _, w := range j.liveWorkers() {
		out[w] = j.nodes[w].progress().batch
	}
	return out
}

// splitCommands sends a re-split action (ADJUST_BS, ADD_WORKER,
// REMOVE_WORKER) to every live worker through a primary agent, to apply at
// one target iteration ahead of the fastest; each must ack it (AntDT Fig.
// 6).
func (m *Manager) splitCommands(j *jobState, a *consolepb.Action) sendList {
	live := j.liveWorkers()
	a.TargetIteration = j.aheadIteration(m.now())
	j.await(a, live)
	return m.broadcastTo(j, a, live)
}

// removeWorker dispatches a REMOVE_WORKER: the others take its share.
func (m *Manager) removeWorker(j *jobState, a *consolepb.Action, who string) sendList {
	var rest []string
	for _, w := range j.liveWorkers() {
		if w != a.Target {
			rest = append(rest, w)
		}
	}
	a.BatchSizes = map[string]int32{}
	for w, b := range resplit(j.spec.Train.GlobalBatch, rest, j.currentBatches()) {
		a.BatchSizes[w] = int32(b)
	}
	sends := m.splitCommands(j, a)
	m.transition(j, a, ActDispatched, who, fmt.Sprintf("%s leaves at iteration %d", a.Target, a.TargetIteration))
	return sends
}

// addWorker runs an ADD_WORKER: it launches the worker, waits for its
// first report (it has joined the barriers), then re-splits the batch.
func (m *Manager) addWorker(j *jobState, a *consolepb.Action) {
	fail := func(err error) { m.failChange(j, a, err) }
	name, _ := j.coord.AddWorker()
	n := j.newNode(name, "worker")
	j.onActor(func() {
		a.Target = name
		j.nodes[name] = n
		j.invalidateViews()
	})
	if err := j.startAgent("worker", name); err != nil {
		j.onActor(func() { n.removed = true })
		if err := j.coord.DropWorker(name); err != nil {
			m.log.Warn("hand back the shards of a worker given up on", "job", j.spec.Name, "node", name, "err", err)
		}
		fail(err)
		return
	}
	err := m.await(j, workerJoinTimeout, j.changed, func() bool {
		joined := false
		j.onActor(func() { joined = n.progress().reported && n.conn != nil })
		return joined
	})
	switch {
	case errors.Is(err, errClosing):
		return
	case errors.Is(err, errJobEnded):
		fail(fmt.Errorf("job %s ended before %s joined", j.spec.Name, name))
		return
	case err != nil:
		j.onActor(func() { n.removed = true })
		if err := j.coord.DropWorker(name); err != nil {
			m.log.Warn("hand back the shards of a worker given up on", "job", j.spec.Name, "node", name, "err", err)
		}
		fail(fmt.Errorf("%s did not join within %s", name, workerJoinTimeout))
		return
	}
	var sends sendList
	j.onActor(func() {
		a.BatchSizes = map[string]int32{}
		cur := j.currentBatches()
		cur[name] = 0
		for w, b := range resplit(j.spec.Train.GlobalBatch, j.liveWorkers(), cur) {
			a.BatchSizes[w] = int32(b)
		}
		sends = m.splitCommands(j, a)
		m.event(j.spec.Name, "action", name, fmt.Sprintf("%s joined at iteration %d; batch %d from iteration %d",
			name, n.progress().iteration, a.BatchSizes[name], a.TargetIteration), "scheduler")
	})
	m.persistAction(j, a)
	sends.run()
}

// applySplit records a re-split that every worker has acked: the
// coordinator's plan (for workers that restart or join later) and the
// nodes' batch sizes.
func (m *Manager) applySplit(j *jobState, a *consolepb.Action) {
	workers := j.coord.Workers()
	local := make([]int, len(workers))
	j.accum = map[string]int{}
	for i, w := range workers {
		c := max(int(a.Accumulation[w]), 1)
		local[i] = int(a.BatchSizes[w]) * c
		if n := j.nodes[w]; n != nil && !n.removed {
			n.setBatch(local[i])
			j.accum[w] = c
		}
	}
	if err := j.coord.AddSplit(a.AppliedIteration, local); err != nil {
		m.log.Error("record batch split", "job", j.spec.Name, "err", err)
	}
}

// applyRemoveWorker records an applied REMOVE_WORKER: its re-split
// (applySplit) and the worker's removal; on a cluster its Pod goes once the
// worker has left.
func (m *Manager) applyRemoveWorker(j *jobState, a *consolepb.Action) {
	m.applySplit(j, a)
	if n := j.nodes[a.Target]; n != nil {
		n.removed = true
		n.setBatch(0)
		_ = j.m.cfg.Store.PutNode(j.spec.Name, store.NodeRecord{Name: n.name, Role: n.role, Host: n.host,
			Pid: int(n.status.Pid), State: nodeRemoved, Restarts: int(n.status.Restarts)})
	}
	j.mon.Forget(a.Target)
	j.invalidateViews()
	if pods, n := m.cfg.Pods, j.nodes[a.Target]; pods != nil && n != nil {
		job, node := j.spec.Name, a.Target
		m.spawn(func() {
			// Every worker acked the command when it took it, before
			// its iteration: the removed worker still has to reach it
			// and leave the servers' barriers. Its Pod goes once its
			// agent says the role has ended (or after
			// removedWorkerGrace): deleting it at once could kill the
			// worker before it leaves, and the others would wait at
			// the barrier for its gradient for ever.
			err := m.await(j, removedWorkerGrace, nil, func() bool {
				var st agentpb.NodeState
				j.onActor(func() { st = n.status.State })
				switch st {
				case agentpb.NodeState_NODE_STATE_DONE, agentpb.NodeState_NODE_STATE_FAILED,
					agentpb.NodeState_NODE_STATE_STOPPED, agentpb.NodeState_NODE_STATE_LOST:
					return true
				}
				return false
			})
			if errors.Is(err, errClosing) {
				return
			}
			ctx, cancel := context.WithTimeout(m.ctx, podTimeout)
			defer cancel()
			if err := pods.StopNode(ctx, job, node); err != nil {
				m.log.Error("delete removed worker's pod", "job", job, "node", node, "err", err)
			}
		})
	}
}

// removedWorkerGrace bounds the wait for a removed worker to leave the
// barriers and end before its Pod is deleted.
const removedWorkerGrace = 2 * time.Minute

// nodeRemoved is the stored state of a worker taken out of its job.
const nodeRemoved = "removed"
