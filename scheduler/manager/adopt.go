package manager

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/scheduler/launch"
)

// AdoptGrace is how long past the heartbeat timeout (Config.LostAfter) a
// restarted scheduler waits for the nodes of a job it adopted to come back
// before it declares them lost: their agents retry with a backoff of up to
// a few seconds.
const AdoptGrace = 10 * time.Second

// lostLocked marks lost the nodes of an adopted job that have not come back
// within the heartbeat timeout (and AdoptGrace) and returns them, to be
// launched again. The caller is the job's actor.
func (j *jobState) lostLocked(now time.Time) []*nodeState {
	if j.adopted.IsZero() {
		return nil
	}
	var out []*nodeState
	for _, n := range j.nodes {
		st := n.status.State
		if !n.lastSeen.IsZero() || n.removed || n.relaunched || st == agentpb.NodeState_NODE_STATE_DONE ||
			st == agentpb.NodeState_NODE_STATE_STOPPED || st == agentpb.NodeState_NODE_STATE_LOST {
			continue
		}
		if away := now.Sub(j.adopted); away > j.m.cfg.LostAfter+AdoptGrace {
			n.status.State = agentpb.NodeState_NODE_STATE_LOST
			j.m.event(j.spec.Name, "node", n.name, fmt.Sprintf("%s lost: its agent has not come back %s after the scheduler restarted",
				n.name, away.Round(time.Second)), "")
			j.mon.Forget(n.name)
			out = append(out, n)
		}
	}
	return out
}

// relaunch starts lost nodes again through the job's launcher (once per
// node: a node whose relaunched agent fails fails the job).
func (j *jobState) relaunch(nodes []*nodeState, now time.Time) {
	if len(nodes) == 0 {
		return
	}
	m := j.m
	f := j.facts()
	l := f.launcher
	if l == nil || f.over {
		return
	}
	for _, n := range nodes {
		err := j.startAgent(n.role, n.name)
		pid := 0
		if err == nil {
			procs := l.Procs()
			for i := len(procs) - 1; i >= 0; i-- {
				if procs[i].Name == n.name {
					pid = procs[i].Pid()
					break
				}
			}
		}
		j.onActor(func() {
			n.relaunched, n.agentPid = true, pid
			if err == nil {
				n.status.State = agentpb.NodeState_NODE_STATE_STARTING
				m.event(j.spec.Name, "node", n.name, fmt.Sprintf("%s launched again", n.name), "")
			}
		})
		if err != nil {
			j.coord.Fail(fmt.Errorf("%s: launch again after it was lost: %w", n.name, err))
			return
		}
	}
}

// relaunchGone launches again the agents of an adopted job that came back
// after the scheduler restarted and died since: this scheduler did not
// launch them, so no exit of theirs reaches it (watchAgent); a node lost
// for silence is checked against the launcher's record file instead
// (launch.Gone), and one whose agent no longer runs is treated as an agent
// killed by a signal (agentKilled): launched again, at most
// maxAgentRelaunches times. It runs on the job's ticker, off the actor.
func (j *jobState) relaunchGone() {
	m := j.m
	var l *launch.Local
	var lost []*nodeState
	seen := map[string]launch.Record{}
	j.onActor(func() {
		l = j.launcher
		if !j.adopted.IsZero() && l != nil && l.RecordFile != "" && !j.over() {
			for _, n := range j.nodes {
				if n.status.State == agentpb.NodeState_NODE_STATE_LOST && !n.removed && n.agentKills < maxAgentRelaunches {
					lost = append(lost, n)
					if n.seenAgent != nil {
						seen[n.name] = *n.seenAgent
					}
				}
			}
		}
	})
	if len(lost) == 0 {
		return
	}
	ours := map[string]bool{} // launched by this scheduler: watchAgent sees them end
	for _, p := range l.Procs() {
		ours[p.Name] = true
	}
	recs, err := launch.ReadRecords(l.RecordFile)
	if err != nil {
		m.log.Warn("read the launch records", "job", j.spec.Name, "err", err)
		return
	}
	for _, n := range lost {
		if r, ok := seen[n.name]; ok && !recorded(recs, n.name) {
			// Launched by another replica (its record file is its own):
			// the agent as it was seen connecting here.
			recs = append(recs, r)
		}
		if ours[n.name] || !launch.Gone(recs, n.name) {
			continue // ours, or alive but silent (stopped, cut off, slow): it may come back
		}
		role, ok := "", false
		j.onActor(func() {
			ok = n.status.State == agentpb.NodeState_NODE_STATE_LOST && !n.removed && !j.over() && n.agentKills < maxAgentRelaunches
			if ok {
				n.agentKills++
				role = n.role
			}
		})
		if !ok {
			continue
		}
		if err := j.startAgent(role, n.name); err != nil {
			j.coord.Fail(fmt.Errorf("%s: its agent died after the scheduler restarted; launch again: %w", n.name, err))
			return
		}
		j.onActor(func() {
			if n.status.State == agentpb.NodeState_NODE_STATE_LOST {
				// The new agent has the whole heartbeat timeout to connect
				// before its node is lost again.
				n.status.State = agentpb.NodeState_NODE_STATE_STARTING
				n.lastSeen = m.now()
			}
		})
		m.event(j.spec.Name, "node", n.name, fmt.Sprintf("agent of %s, adopted after the scheduler restarted, is gone: launched again", n.name), "")
	}
}

// recorded says whether recs hold a process group of node.
func recorded(recs []launch.Record, node string) bool {
	for _, r := range recs {
		if r.Node == node {
			return true
		}
	}
	return false
}

// replaced says whether an agent connecting for n is an old one that the
// node's relaunch replaced (it came back too late): it must stop. The
// caller is the job's actor.
func (n *nodeState) replaced(agentPid int32) bool {
	return n.relaunched && n.agentPid != 0 && int(agentPid) != n.agentPid
}

// nodeStateOf reads a stored node state back.
func nodeStateOf(s string) agentpb.NodeState {
	for st := range agentpb.NodeState_name {
		if stateName(agentpb.NodeState(st)) == s {
			return agentpb.NodeState(st)
		}
	}
	return agentpb.NodeState_NODE_STATE_STARTING
}

// maxAgentRelaunches bounds how often a node's agent, killed by a signal,
// is launched again before the job fails.
const maxAgentRelaunches = 3

// agentKilled launches a node's agent again when a signal ended it (kill
// -9 of the agent: its role died with it) rather than the agent giving up
// on its role; false when it did not, or may not.
func (j *jobState) agentKilled(p *launch.Proc) bool {
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return false
	}
	m := j.m
	role := ""
	j.onActor(func() {
		n := j.nodes[p.Name]
		ok = n != nil && !n.removed && !j.over() && n.agentKills < maxAgentRelaunches
		if ok {
			n.agentKills++
			role = n.role
		}
	})
	if !ok {
		return false
	}
	if err := j.startAgent(role, p.Name); err != nil {
		m.log.Warn("launch agent again", "job", j.spec.Name, "node", p.Name, "err", err)
		return false
	}
	m.event(j.spec.Name, "node", p.Name, fmt.Sprintf("agent of %s (pid %d) was %s: launched again", p.Name, p.Pid(), ws.Signal()), "")
	return true
}
