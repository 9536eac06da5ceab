package manager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/blocks"
	"github.com/kelpie/kelpie/runtime/job"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
)

// tableKinds are the actions that change the block table.
func tableKind(kind string) bool {
	switch kind {
	case string(policy.KindReassign), string(policy.KindAddServer), string(policy.KindRemoveServer):
		return true
	}
	return false
}

// activeServers lists the servers that hold or may hold blocks.
func (j *jobState) activeServers() []int {
	var out []int
	for i, a := range j.coord.ServerAddrs() {
		if a != "" {
			out = append(out, i)
		}
	}
	return out
}

// validateTable checks a table-changing action against the job.
func (j *jobState) validateTable(a *kelpiepb.Action) error {
	if todo, doing, _, total := j.coord.ShardCounts(); total > 0 && todo+doing == 0 {
		// The workers are leaving or evaluating: nobody would switch.
		return status.Errorf(codes.FailedPrecondition, "%s: job %s has no data left to train", a.Kind, j.spec.Name)
	}
	active := j.activeServers()
	switch a.Kind {
	case string(policy.KindRemoveServer):
		n, ok := j.nodes[a.Target]
		if !ok || n.role != "server" {
			return status.Errorf(codes.InvalidArgument, "REMOVE_SERVER: %q is not a server of job %s", a.Target, j.spec.Name)
		}
		idx := nodeIndex(a.Target)
		found := false
		for _, r := range active {
			found = found || r == idx
		}
		if !found {
			return status.Errorf(codes.FailedPrecondition, "REMOVE_SERVER: %s is already removed", a.Target)
		}
		if len(active) < 2 {
			return status.Errorf(codes.FailedPrecondition, "REMOVE_SERVER: %s is the job's last server", a.Target)
		}
	case string(policy.KindReassign):
		if len(a.Assignment) > 0 {
			if len(a.Assignment) != len(j.coord.Table.Blocks) {
				return status.Errorf(codes.InvalidArgument, "REASSIGN: %d entries for %d blocks", len(a.Assignment), len(j.coord.Table.Blocks))
			}
			ok := map[int]bool{}
			for _, r := range active {
				ok[r] = true
			}
			for b, r := range a.Assignment {
				if !ok[int(r)] {
					return status.Errorf(codes.InvalidArgument, "REASSIGN: block %d to server %d, which is not active", b, r)
				}
			}
		}
	}
	return nil
}

// retable carries out a table change: it starts a new server (ADD_SERVER),
// computes the new table, moves every server to it from an iteration ahead
// of every worker, tells the workers, waits for their acks and for the
// blocks to settle, and records the time the job waited for them.
func (m *Manager) retable(j *jobState, a *kelpiepb.Action) {
	fail := func(err error) {
		m.mu.Lock()
		m.transition(j, a, ActFailed, "scheduler", err.Error())
		m.mu.Unlock()
		m.persistAction(j, a)
	}
	var newIdx = -1
	replaced := ""
	if j.serverRestart(a) {
		replaced = a.Target
	}
	baseline := j.spec.Cluster.Elasticity == "checkpoint-restart" && replaced == ""
	if a.Kind == string(policy.KindAddServer) || replaced != "" {
		name, idx := j.coord.AddServer()
		newIdx = idx
		m.mu.Lock()
		if replaced == "" {
			a.Target = name
		}
		j.nodes[name] = j.newNode(name, "server")
		m.mu.Unlock()
		if baseline {
			// Started with the others when the job is relaunched.
		} else if j.launcher != nil {
			if err := j.startAgent("server", name); err != nil {
				fail(err)
				return
			}
		}
		deadline := time.Now().Add(90 * time.Second)
		for !baseline && j.coord.ServerAddrs()[idx] == "" {
			if time.Now().After(deadline) {
				fail(fmt.Errorf("%s did not register within 90s", name))
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	addrs := j.coord.ServerAddrs()
	active := j.activeServers()
	if baseline && newIdx >= 0 {
		active = append(active, newIdx)
	}
	var removed []int
	if a.Kind == string(policy.KindRemoveServer) || replaced != "" {
		idx := nodeIndex(a.Target)
		removed = []int{idx}
		keep := active[:0]
		for _, r := range active {
			if r != idx {
				keep = append(keep, r)
			}
		}
		active = keep
	}
	old := j.coord.Table
	var next blocks.Table
	if replaced != "" {
		// The new server takes exactly the old one's blocks.
		gone := nodeIndex(replaced)
		next = blocks.Table{Version: old.Version + 1, Blocks: old.Blocks, Servers: len(addrs), ServerOf: append([]int(nil), old.ServerOf...)}
		for i, r := range next.ServerOf {
			if r == gone {
				next.ServerOf[i] = newIdx
			}
		}
	} else if len(a.Assignment) > 0 {
		next = blocks.Table{Version: old.Version + 1, Blocks: old.Blocks, Servers: len(addrs), ServerOf: make([]int, len(old.Blocks))}
		for i, r := range a.Assignment {
			next.ServerOf[i] = int(r)
		}
	} else {
		var err error
		if next, err = blocks.Rebalance(old, len(addrs), active); err != nil {
			fail(err)
			return
		}
	}
	if baseline {
		if err := m.checkpointRestart(j, a, next, removed, addrs, newIdx); err != nil {
			fail(err)
		}
		return
	}
	newAddrs := append([]string(nil), addrs...)
	for _, r := range removed {
		newAddrs[r] = ""
	}
	wire := job.Assignment(next, newAddrs, j.coord.ServerNames())
	m.mu.Lock()
	at := j.aheadIteration(m.now())
	a.TargetIteration = at
	moved := 0
	for i := range next.ServerOf {
		if i >= len(old.ServerOf) || old.ServerOf[i] != next.ServerOf[i] {
			moved++
		}
	}
	m.mu.Unlock()
	before := serverPaused(addrs)
	// Servers first (every one that holds or receives blocks, the removed
	// one included: it hands its blocks off), then the workers.
	for i, addr := range addrs {
		if addr == "" {
			continue
		}
		if err := retableServer(addr, &kelpiepb.RetableRequest{Assignment: wire, SwitchIteration: at, Me: int32(i)}); err != nil {
			fail(fmt.Errorf("retable %s: %v", j.coord.ServerNames()[i], err))
			return
		}
	}
	j.coord.BeginTable(next, removed, at, a.Id)
	done := make(chan struct{})
	m.mu.Lock()
	if j.tables == nil {
		j.tables = map[string]*kelpiepb.Assignment{}
		j.tableDone = map[string]chan struct{}{}
	}
	j.tables[a.Id] = wire
	j.tableDone[a.Id] = done
	sends := j.sendCommand(a, j.liveWorkers())
	m.eventLocked(j.spec.Name, "action", a.Target, fmt.Sprintf("action %s %s: table v%d from iteration %d, %d of %d blocks move",
		a.Id, a.Kind, next.Version, at, moved, len(next.Blocks)), "scheduler")
	m.mu.Unlock()
	sends.run()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		fail(fmt.Errorf("workers did not switch to table v%d within 5 minutes", next.Version))
		return
	case <-j.endedCh:
		return
	}
	j.coord.CommitTable()
	// Wait for the blocks to settle, then measure the pause.
	deadline := time.Now().Add(2 * time.Minute)
	for !serversSettled(addrs) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	paused := 0.0
	after := serverPaused(addrs)
	for k, p := range after {
		paused = max(paused, p-before[k])
	}
	for _, r := range removed {
		shutdownServers([]string{addrs[r]})
	}
	m.mu.Lock()
	a.PausedSeconds = paused
	j.paused += paused
	if newIdx >= 0 {
		j.nodes[j.coord.ServerNames()[newIdx]].status.State = kelpiepb.NodeState_NODE_STATE_RUNNING
	}
	if replaced != "" {
		a.Predicted = fmt.Sprintf("relaunched as %s", j.coord.ServerNames()[newIdx])
		j.mon.Forget(replaced)
	}
	m.transition(j, a, ActApplied, "scheduler", fmt.Sprintf("table v%d at iteration %d, paused %.3fs", next.Version, at, paused))
	m.mu.Unlock()
	m.persistAction(j, a)
}

// snapshotDir is where the job's servers keep their snapshots.
func (j *jobState) snapshotDir() string {
	base := os.TempDir()
	if j.m.cfg.LogDir != "" {
		base = filepath.Dir(j.m.cfg.LogDir)
	}
	return filepath.Join(base, "snapshots", j.spec.Name)
}

// startAgent launches one more agent for the job.
func (j *jobState) startAgent(role, node string) error {
	args := []string{"agent", "--scheduler", j.m.cfg.Addr, "--job", j.spec.Name, "--node", node, "--role", role}
	if role == "server" {
		args = append(args, "--snapshot-dir", j.snapshotDir())
	}
	if j.m.cfg.MaxRestarts > 0 {
		args = append(args, "--max-restarts", fmt.Sprint(j.m.cfg.MaxRestarts))
	}
	p, err := j.launcher.Start(node, args...)
	if err != nil {
		return err
	}
	_ = j.m.cfg.Store.PutNode(j.spec.Name, store.NodeRecord{Name: node, Role: role, State: "starting", Pid: p.Pid()})
	go j.watchAgent(p)
	return nil
}

func dialPS(addr string) (kelpiepb.ParameterServerClient, func(), error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return kelpiepb.NewParameterServerClient(cc), func() { cc.Close() }, nil
}

// retableServer moves one server to the new table. A server still busy
// with the previous change (its last blocks in flight) is asked again for up
// to 30 s.
func retableServer(addr string, r *kelpiepb.RetableRequest) error {
	c, closeFn, err := dialPS(addr)
	if err != nil {
		return err
	}
	defer closeFn()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Retable(ctx, r)
		cancel()
		if status.Code(err) != codes.FailedPrecondition || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func serverStats(addr string) (*kelpiepb.ServerStats, error) {
	c, closeFn, err := dialPS(addr)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Stats(ctx, &kelpiepb.StatsRequest{})
}

// serverPaused reads each server's cumulative paused time.
func serverPaused(addrs []string) map[string]float64 {
	out := map[string]float64{}
	for _, a := range addrs {
		if a == "" {
			continue
		}
		if st, err := serverStats(a); err == nil {
			out[a] = st.PausedSeconds
		}
	}
	return out
}

// serversSettled says no block is in transit any more.
func serversSettled(addrs []string) bool {
	for _, a := range addrs {
		if a == "" {
			continue
		}
		st, err := serverStats(a)
		if err != nil || st.InTransit > 0 || st.Outgoing > 0 {
			return false
		}
	}
	return true
}
