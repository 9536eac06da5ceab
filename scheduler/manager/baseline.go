package manager

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/launch"
)

// resumeTimeout bounds how long the relaunched workers of the
// checkpoint-and-restart baseline take to train past the checkpoint.
const resumeTimeout = 3 * time.Minute

// checkpointRestart carries out a table change the way the papers'
// baseline does (cluster.elasticity: checkpoint-restart): stop the
// workers, checkpoint every server, stop them, relaunch the servers of the
// new table restoring their blocks from the checkpoint, relaunch the
// workers, and count as paused the time until every worker trains again.
func (m *Manager) checkpointRestart(j *jobState, a *consolepb.Action, next blocks.Table, removed []int, addrs []string, newIdx int) error {
	if m.cfg.Pods != nil {
		return fmt.Errorf("checkpoint-and-restart is not supported with the Kubernetes launcher")
	}
	l := j.getLauncher()
	if l == nil {
		return fmt.Errorf("checkpoint-and-restart needs the job's launcher (the job was adopted after a scheduler restart)")
	}
	t0 := m.now()
	// A count, not a flag: this change's end (below, after the action is
	// applied and persisted) may be taken in after the next change has
	// begun; a flag cleared then let the next change's stopped agents read
	// as agents that gave up (elastic-40mb-checkpoint-restart failed so,
	// 2026-12-07).
	j.onActor(func() {
		j.relaunching++
	})
	defer func() {
		j.onActor(func() {
			j.relaunching--
		})
	}()
	procs := l.Procs()
	stop := func(role string) {
		var stopping []*launch.Proc
		for _, p := range procs {
			if strings.HasPrefix(p.Name, role+"-") {
				stopping = append(stopping, p)
			}
		}
		// Stopped on purpose: their ends are not failures (watchAgent),
		// whenever they are taken in.
		j.onActor(func() {
			j.retire(stopping...)
		})
		var wg sync.WaitGroup
		for _, p := range stopping {
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop(time.Second) }()
		}
		wg.Wait()
	}
	stop("worker")
	// Every server checkpoints, through its agent; the job restarts from
	// the lowest V_train among them.
	var ckpt int64 = -1
	names := j.coord.ServerNames()
	cmds := map[string]*agentpb.ActionCommand{}
	for i, addr := range addrs {
		if addr != "" && i < len(names) {
			cmds[names[i]] = &agentpb.ActionCommand{ActionId: a.Id + "/checkpoint", Kind: serverCheckpoint, Target: names[i]}
		}
	}
	acks, err := m.askServers(j, cmds, 30*time.Second)
	var se *serverError
	if errors.As(err, &se) {
		return fmt.Errorf("checkpoint %s: %w", se.node, se.err)
	}
	if err != nil {
		return err
	}
	for _, ack := range acks {
		if ckpt < 0 || ack.AppliedIteration < ckpt {
			ckpt = ack.AppliedIteration
		}
	}
	stop("server")
	j.coord.BeginTable(next, removed, 0, a.Id)
	j.coord.CommitTable()
	names = j.coord.ServerNames()
	isRemoved := map[int]bool{}
	for _, r := range removed {
		isRemoved[r] = true
	}
	relaunch := func(i int) bool { return !isRemoved[i] && (addrs[i] != "" || i == newIdx) }
	for i, name := range names {
		if relaunch(i) {
			if err := j.startAgent("server", name); err != nil {
				return err
			}
		}
	}
	// Wait for every server of the new table to register afresh.
	err = m.await(j, serverJoinTimeout, j.coord.Changed, func() bool {
		now := j.coord.ServerAddrs()
		for i := range names {
			if relaunch(i) && (now[i] == "" || now[i] == addrs[i]) {
				return false
			}
		}
		return true
	})
	if errors.As(err, new(timeoutError)) {
		return fmt.Errorf("servers did not come back within %s", serverJoinTimeout)
	}
	if err != nil {
		return err
	}
	for _, w := range j.spec.WorkerNames() {
		if err := j.startAgent("worker", w); err != nil {
			return err
		}
	}
	// Paused until every worker trains past the checkpoint again.
	err = m.await(j, resumeTimeout, j.changed, func() bool {
		past := true
		j.onActor(func() {
			for _, n := range j.nodes {
				if n.role == "worker" && (n.progress().iteration <= ckpt || n.seen().Before(t0)) {
					past = false
					return
				}
			}
		})
		return past
	})
	switch {
	case errors.As(err, new(timeoutError)):
		return fmt.Errorf("workers did not resume within %s", resumeTimeout)
	case errors.Is(err, errClosing):
		return err
	}
	paused := m.now().Sub(t0).Seconds()
	j.onActor(func() {
		a.PausedSeconds = paused
		j.paused += paused
		m.transition(j, a, ActApplied, "scheduler", fmt.Sprintf("checkpoint at iteration %d and restart: table v%d, paused %.3fs", ckpt, next.Version, paused))
	})
	m.persistAction(j, a)
	return nil
}
