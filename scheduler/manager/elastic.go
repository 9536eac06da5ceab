package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/change"
	"github.com/kelpie/kelpie/scheduler/store"
)

// tableKinds are the actions that change the block table.
func tableKind(kind string) bool {
	d, _ := kindOf(kind)
	return d != nil && d.table
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
func (j *jobState) validateTable(a *consolepb.Action) error {
	if todo, doing, _, total := j.coord.ShardCounts(); total > 0 && todo+doing == 0 {
		// The workers are leaving or evaluating: nobody would switch.
		return status.Errorf(codes.FailedPrecondition, "%s: job %s has no data left to train", a.Kind, j.spec.Name)
	}
	active := j.activeServers()
	d := defOf(a)
	if d == nil {
		return status.Errorf(codes.InvalidArgument, "%s: not a table change", a.Kind)
	}
	if d.leaving {
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
	}
	if len(a.Assignment) > 0 && d.checkAssignment {
		// REMOVE_SERVER may carry the table after the server leaves
		// (PSLD moves the blocks and removes the server it empties in one
		// change): no block may stay on the leaving server.
		leaving := -1
		if d.leaving {
			leaving = nodeIndex(a.Target)
		}
		return checkAssignment(a.Kind, a.Assignment, len(j.coord.Table().Blocks), active, leaving)
	}
	return nil
}

// checkAssignment checks a table change's assignment: one entry per
// block, each an active server other than the leaving one (-1: none).
func checkAssignment(kind string, assignment []int32, blocks int, active []int, leaving int) error {
	if len(assignment) != blocks {
		return status.Errorf(codes.InvalidArgument, "%s: %d entries for %d blocks", kind, len(assignment), blocks)
	}
	for b, r := range assignment {
		switch {
		case int(r) == leaving:
			return status.Errorf(codes.InvalidArgument, "%s: block %d to server %d, which is leaving", kind, b, r)
		case !slices.Contains(active, int(r)):
			return status.Errorf(codes.InvalidArgument, "%s: block %d to server %d, which is not active", kind, b, r)
		}
	}
	return nil
}

// tableRun is a table change under way as the job's actor holds it
// (jobState.tables, by action id): the change's sequence, which only the
// actor drives — an ack, a lost node, the time and each carried-out
// effect's outcome are fed to it there, directly — and the effects it has
// produced that the change's goroutine (retable) has yet to carry out.
// kick wakes that goroutine; it holds one signal, not events: what
// happened is in the sequence, so a wake coalesced with another loses
// nothing.
type tableRun struct {
	c       *change.Table
	pending []change.Effect
	kick    chan struct{}
}

// feed gives the change an event (on the actor) and wakes its goroutine
// if the change produced effects or is over.
func (r *tableRun) feed(f func(c *change.Table)) {
	f(r.c)
	r.pending = append(r.pending, r.c.Ready()...)
	if len(r.pending) > 0 || r.c.Over() {
		select {
		case r.kick <- struct{}{}:
		default: // a wake is already waiting
		}
	}
}

// tableLost tells every table change under way that a node was lost (on
// the actor).
func (j *jobState) tableLost(now time.Time, node string) {
	for _, r := range j.tables {
		r.feed(func(c *change.Table) { c.Lost(now, node) })
	}
}

// retable carries out a table change: it starts a new server (ADD_SERVER,
// a relaunch), then drives the change's sequence (scheduler/change): it
// moves every server to the new table from an iteration ahead of every
// worker, tells the workers, feeds their switches, losses and the time to
// the sequence, commits the table, waits for the blocks to settle and
// records the time the job waited for them.
func (m *Manager) retable(j *jobState, a *consolepb.Action) {
	fail := func(err error) { m.failChange(j, a, err) }
	newIdx := -1
	replaced := ""
	j.onActor(func() {
		if j.serverRestart(a) {
			replaced = a.Target
		}
	})
	baseline := j.spec.Cluster.Elasticity == "checkpoint-restart" && replaced == ""
	plan := change.Plan{Kind: change.Reassign, Remove: -1, New: -1, Limits: change.Limits{Join: serverJoinTimeout, Switch: switchTimeout}}
	for _, r := range a.Assignment {
		plan.Assignment = append(plan.Assignment, int(r))
	}
	if d := defOf(a); replaced != "" {
		plan.Kind, plan.Remove = change.Relaunch, nodeIndex(replaced)
	} else if d != nil && d.change != 0 {
		plan.Kind = d.change
		if d.leaving {
			plan.Remove = nodeIndex(a.Target)
		}
	}
	if plan.Kind == change.AddServer || plan.Kind == change.Relaunch {
		name, idx := j.coord.AddServer()
		newIdx = idx
		j.onActor(func() {
			if replaced == "" {
				a.Target = name
			}
			j.nodes[name] = j.newNode(name, "server")
			if replaced != "" && j.hosts != nil {
				// The relaunched server goes to a free host, or else
				// where the old one is (its host's slowness stays).
				from := j.hosts.hostOf(replaced)
				to, _, ok := j.hosts.take(name)
				if !ok {
					to = from
					j.hosts.on[name] = from
				}
				if j.moves == nil {
					j.moves = map[string]hostMove{}
				}
				j.moves[a.Id] = hostMove{to: to, from: from}
			}
		})
		if baseline {
			// Started with the others when the job is relaunched.
		} else if j.launcher != nil {
			if err := j.startAgent("server", name); err != nil {
				fail(err)
				return
			}
		}
	}
	plan.New = newIdx
	plan.Old = j.coord.Table()
	plan.Servers = len(j.coord.ServerAddrs())
	plan.Names = j.coord.ServerNames()
	plan.Active = j.activeServers()
	if baseline {
		next, removed, err := change.Next(plan)
		if err == nil {
			err = m.checkpointRestart(j, a, next, removed, j.coord.ServerAddrs(), newIdx)
		}
		if err != nil && !errors.Is(err, errClosing) {
			fail(err)
		}
		return
	}
	r := &tableRun{kick: make(chan struct{}, 1)}
	j.onActor(func() {
		r.feed(func(*change.Table) { r.c = change.NewTable(plan, m.now()) })
		if j.tables == nil {
			j.tables = map[string]*tableRun{}
		}
		j.tables[a.Id] = r
	})
	defer j.onActor(func() { delete(j.tables, a.Id) })
	// feed hands the change an event on the actor.
	feed := func(f func(c *change.Table)) { j.onActor(func() { r.feed(f) }) }
	var joining bool
	j.onActor(func() { joining = r.c.Phase() == change.Joining })
	if joining {
		err := m.await(j, serverJoinTimeout, j.coord.Changed, func() bool { return j.coord.ServerAddrs()[newIdx] != "" })
		switch {
		case err == nil:
			feed(func(c *change.Table) { c.Joined(m.now()) })
		case errors.As(err, new(timeoutError)):
			feed(func(c *change.Table) { c.Tick(m.now()) })
		default:
			return
		}
	}
	addrs := j.coord.ServerAddrs()
	var before map[string]float64
	for {
		var (
			effects  []change.Effect
			over     bool
			deadline time.Time
		)
		j.onActor(func() {
			effects, r.pending = r.pending, nil
			over, deadline = r.c.Over(), r.c.Deadline()
		})
		for _, e := range effects {
			switch e.Type {
			case change.Retable:
				before = j.serverPaused()
				m.startTable(j, a, r, e, addrs)
			case change.Commit:
				j.coord.CommitTable()
				// Wait for the blocks to settle (at most settleTimeout):
				// every server's counters, as its agent sends them, show
				// the new table with no block in transit. Then measure
				// the pause.
				if err := m.await(j, settleTimeout, j.changed, func() bool { return j.serversSettled(addrs, e.Table.Version) }); errors.Is(err, errClosing) {
					return
				}
				paused := 0.0
				for k, p := range j.serverPaused() {
					paused = max(paused, p-before[k])
				}
				feed(func(c *change.Table) { c.Settled(m.now(), paused) })
			case change.Shutdown:
				var removed []string
				names := j.coord.ServerNames()
				for _, r := range e.Removed {
					if addrs[r] != "" && r < len(names) {
						removed = append(removed, names[r])
					}
				}
				m.shutdownServers(j, removed, a.Id+"/shutdown", "removed from the job's table")
			case change.Finish:
				if e.Err != nil {
					fail(e.Err)
					return
				}
				j.onActor(func() {
					paused := r.c.Paused()
					a.PausedSeconds = paused
					j.paused += paused
					if newIdx >= 0 {
						j.nodes[j.coord.ServerNames()[newIdx]].status.State = agentpb.NodeState_NODE_STATE_RUNNING
					}
					if replaced != "" {
						a.Predicted = fmt.Sprintf("relaunched as %s", j.coord.ServerNames()[newIdx])
						j.mon.Forget(replaced)
						if mv, ok := j.moves[a.Id]; ok {
							// The old server has shut down: its host is free
							// unless the new one is on it.
							j.hosts.leave(replaced, j.nodes)
							a.Predicted += fmt.Sprintf(" on host %s, leaving host %s", mv.to, mv.from)
							if mv.to == mv.from {
								a.Predicted = fmt.Sprintf("relaunched as %s on host %s (no host free: in place)", j.coord.ServerNames()[newIdx], mv.to)
							}
							m.event(j.spec.Name, "action", replaced, fmt.Sprintf("action %s %s: %s %s", a.Id, a.Kind, replaced, a.Predicted), "scheduler")
						}
					}
					m.transition(j, a, ActApplied, "scheduler", e.Note)
				})
				m.persistAction(j, a)
				return
			}
		}
		if len(effects) > 0 {
			continue // carrying them out may have produced more
		}
		if over {
			return
		}
		var timeout <-chan time.Time
		if !deadline.IsZero() {
			timeout = m.clk.After(max(deadline.Sub(m.now()), 0))
		}
		select {
		case <-r.kick:
		case <-timeout:
			feed(func(c *change.Table) { c.Tick(m.now()) })
		case <-j.endedCh:
			return
		case <-m.done:
			return
		}
	}
}

// startTable carries out a change's Retable effect: every server takes the
// table (servers first, the removed one included: it hands its blocks off),
// then the live workers are told; it reports the outcome to the change.
func (m *Manager) startTable(j *jobState, a *consolepb.Action, r *tableRun, e change.Effect, addrs []string) {
	next := e.Table
	newAddrs := append([]string(nil), addrs...)
	for _, r := range e.Removed {
		newAddrs[r] = ""
	}
	wire := job.Assignment(next, newAddrs, j.coord.ServerNames())
	var at int64
	j.onActor(func() {
		at = j.aheadIteration(m.now())
		a.TargetIteration = at
	})
	names := j.coord.ServerNames()
	cmds := map[string]*agentpb.ActionCommand{}
	for i, addr := range addrs {
		if addr != "" && i < len(names) {
			cmds[names[i]] = &agentpb.ActionCommand{ActionId: fmt.Sprintf("%s/retable-v%d", a.Id, next.Version), Kind: serverRetable,
				Target: names[i], Assignment: wire, TargetIteration: at}
		}
	}
	if _, err := m.askServers(j, cmds, retableRetry+serverCallTimeout); err != nil {
		if errors.Is(err, errClosing) {
			return
		}
		server := -1
		var se *serverError
		if errors.As(err, &se) {
			server, err = slices.Index(names, se.node), se.err
		}
		j.onActor(func() { r.feed(func(c *change.Table) { c.RetableFailed(m.now(), server, err) }) })
		return
	}
	j.coord.BeginTable(next, e.Removed, at, a.Id)
	var sends sendList
	j.onActor(func() {
		live := j.liveWorkers()
		sends = m.broadcastTo(j, a, live)
		m.event(j.spec.Name, "action", a.Target, fmt.Sprintf("action %s %s: table v%d from iteration %d, %d of %d blocks move",
			a.Id, a.Kind, next.Version, at, r.c.Moved(), len(next.Blocks)), "scheduler")
		r.feed(func(c *change.Table) { c.Retabled(m.now(), at, live) })
	})
	sends.run()
}

// Time limits of a table change.
const (
	serverJoinTimeout = 90 * time.Second // a new server registers
	switchTimeout     = 5 * time.Minute  // every worker switches tables
	settleTimeout     = 2 * time.Minute  // the blocks in transit arrive
	retableRetry      = 30 * time.Second // a server busy with the previous change (runtime/role.RetableRetry)
	serverCallTimeout = 10 * time.Second // a server's agent acks a command
)

// snapshotDir is where the job's servers keep their snapshots.
func (j *jobState) snapshotDir() string {
	base := os.TempDir()
	if j.m.cfg.LogDir != "" {
		base = filepath.Dir(j.m.cfg.LogDir)
	}
	return filepath.Join(base, "snapshots", j.spec.Name)
}

// startAgent launches one more agent for the job.
// extra are more agent flags (--relaunched).
func (j *jobState) startAgent(role, node string, extra ...string) error {
	l := j.getLauncher()
	if l == nil {
		return fmt.Errorf("start %s: job %s has no launcher (adopted after a scheduler restart)", node, j.spec.Name)
	}
	args := []string{"agent", "--scheduler", j.m.cfg.Addr, "--job", j.spec.Name, "--node", node, "--role", role}
	j.onActor(func() { args = append(args, j.hostArgs(node)...) })
	args = append(args, extra...)
	if role == "server" {
		args = append(args, "--snapshot-dir", j.snapshotDir())
	}
	if j.m.cfg.MaxRestarts > 0 {
		args = append(args, "--max-restarts", fmt.Sprint(j.m.cfg.MaxRestarts))
	}
	if j.m.cfg.NodeCert != nil {
		cert, err := j.m.cfg.NodeCert(j.spec.Name, j.instance(), node)
		if err != nil {
			return err
		}
		args = append(args, "--cert", cert)
	}
	if j.m.cfg.OrphanTimeout > 0 {
		args = append(args, "--orphan-timeout", j.m.cfg.OrphanTimeout.String())
	}
	if pods := j.m.cfg.Pods; pods != nil {
		ctx, cancel := context.WithTimeout(j.m.ctx, podTimeout)
		defer cancel()
		if err := pods.StartNode(ctx, j.spec.Name, role, node, args); err != nil {
			return err
		}
		_ = j.m.cfg.Store.PutNode(j.spec.Name, store.NodeRecord{Name: node, Role: role, State: "starting"})
		return nil
	}
	p, err := l.Start(node, args...)
	if err != nil {
		return err
	}
	_ = j.m.cfg.Store.PutNode(j.spec.Name, store.NodeRecord{Name: node, Role: role, State: "starting", Pid: p.Pid()})
	j.m.spawn(func() { j.watchAgent(p) })
	return nil
}

// serverPaused is each server's cumulative paused time, as last reported.
func (j *jobState) serverPaused() map[string]float64 {
	out := map[string]float64{}
	j.onActor(func() {
		for _, n := range j.nodes {
			if n.stats != nil {
				out[n.name] = n.stats.PausedSeconds
			}
		}
	})
	return out
}

// serversSettled says whether every server's last reported counters show
// table version (or later) with no block in transit.
func (j *jobState) serversSettled(addrs []string, version uint64) bool {
	names := j.coord.ServerNames()
	settled := true
	j.onActor(func() {
		for i, addr := range addrs {
			if addr == "" || i >= len(names) {
				continue
			}
			n := j.nodes[names[i]]
			if n == nil || n.stats == nil || n.stats.AssignmentVersion < version || n.stats.InTransit > 0 || n.stats.Outgoing > 0 {
				settled = false
				return
			}
		}
	})
	return settled
}
