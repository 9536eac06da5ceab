package manager

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/launch"
)

// hostPlan is where a job's nodes run on the local launcher's simulated
// hosts (cluster.spare_hosts): every node starts on a host named after it
// (spec.HostOf), the spare hosts (spare-0, spare-1, ...) start free. A
// worker's KILL_RESTART with a host free stops the node's agent and
// launches a new one on the host free longest, and the host it left
// becomes free; a server's (a new server takes its blocks) places the new
// server on a free host, else on the old server's host, which the old one
// frees when it shuts down. The role on a host carries that host's
// injections (straggler.OnHost: the host-level injections aimed at the
// node that started there, none on a spare) and its own that follow it.
// A removed node's host is not reused. It is the job's actor's.
type hostPlan struct {
	on   map[string]string // node -> its host, when not the one named after it ("": none, it left)
	free []string          // free hosts, the one free longest first
}

// newHostPlan is the plan of a job with spare hosts on the local launcher
// (nil without: every restart is in place, and no host is named).
func newHostPlan(s *spec.Spec, onPods bool) *hostPlan {
	if s.Cluster.SpareHosts <= 0 || onPods {
		return nil
	}
	p := &hostPlan{on: map[string]string{}}
	for i := range s.Cluster.SpareHosts {
		p.free = append(p.free, spec.SpareHostName(i))
	}
	return p
}

// hostOf is the simulated host node runs on.
func (p *hostPlan) hostOf(node string) string {
	if h, ok := p.on[node]; ok {
		return h
	}
	return node
}

// take places node on the host free longest and returns it with the host
// the node leaves (ok false: none free).
func (p *hostPlan) take(node string) (to, from string, ok bool) {
	if p == nil || len(p.free) == 0 {
		return "", "", false
	}
	to, from = p.free[0], p.hostOf(node)
	p.free = p.free[1:]
	p.on[node] = to
	return to, from, true
}

// release frees host unless one of the nodes (other than those that left
// it) is still on it.
func (p *hostPlan) release(host string, nodes map[string]*nodeState) {
	if p == nil || host == "" || slices.Contains(p.free, host) {
		return
	}
	for name, n := range nodes {
		if !n.removed && p.hostOf(name) == host {
			return
		}
	}
	p.free = append(p.free, host)
}

// leave takes node off its host (a server replaced and shut down) and
// frees the host if nobody else is on it.
func (p *hostPlan) leave(node string, nodes map[string]*nodeState) {
	if p == nil {
		return
	}
	h := p.hostOf(node)
	p.on[node] = ""
	p.release(h, nodes)
}

// restore rebuilds the plan of a job a restarted scheduler adopts from
// the hosts its nodes' agents last reported (stored with the nodes): a
// node on another simulated host than its own is put back there, and the
// free hosts are those nobody is on.
func (p *hostPlan) restore(s *spec.Spec, nodes map[string]*nodeState) {
	if p == nil {
		return
	}
	names := slices.Sorted(maps.Keys(nodes))
	for _, name := range names {
		if h := nodes[name].host; h != "" && h != name && s.SimulatedHost(h) {
			p.on[name] = h
		}
	}
	p.free = nil
	for i := range s.Cluster.SpareHosts {
		p.release(spec.SpareHostName(i), nodes)
	}
	for _, name := range names {
		if _, moved := p.on[name]; moved {
			p.release(name, nodes) // the host it left, unless another moved onto it
		}
	}
}

// hostArgs are the agent flags that place node on its simulated host (none
// without spare hosts). The caller is the job's actor.
func (j *jobState) hostArgs(node string) []string {
	if j.hosts == nil {
		return nil
	}
	return []string{"--host", j.hosts.hostOf(node)}
}

// agentProc is the node's agent as this scheduler launched it last (nil:
// none, e.g. a job adopted after a scheduler restart).
func agentProc(l *launch.Local, node string) *launch.Proc {
	if l == nil {
		return nil
	}
	procs := l.Procs()
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i].Name == node {
			return procs[i]
		}
	}
	return nil
}

// moveTarget picks where a worker's KILL_RESTART relaunches it: a free
// host, when the job has one and this scheduler launched the node's agent
// (it can stop it); ok false: restart it in place. The move is recorded
// from now on, so that the new agent is not sent the restart again
// (targets). The caller is the job's actor.
func (j *jobState) moveTarget(a *consolepb.Action) (old *launch.Proc, mv hostMove, ok bool) {
	if j.hosts == nil || len(j.hosts.free) == 0 || j.m.cfg.Pods != nil {
		return nil, hostMove{}, false
	}
	if old = agentProc(j.launcher, a.Target); old == nil {
		return nil, hostMove{}, false
	}
	if mv.to, mv.from, ok = j.hosts.take(a.Target); !ok {
		return nil, hostMove{}, false
	}
	j.retire(old) // its end is not a failure (watchAgent)
	if j.moves == nil {
		j.moves = map[string]hostMove{}
	}
	j.moves[a.Id] = mv
	return old, mv, true
}

// moved says whether a KILL_RESTART relaunches (or relaunched) its node on
// another host rather than through its agent. The caller is the job's
// actor.
func (j *jobState) moved(a *consolepb.Action) bool {
	_, ok := j.moves[a.Id]
	return ok && !j.serverRestart(a)
}

// moveGrace is how long a moved node's old agent has to end after
// SIGKILL to its process group before the move fails.
const moveGrace = 10 * time.Second

// moveNode carries out a worker's KILL_RESTART onto another host: the old
// agent's process group is killed (its role and their children die with
// it: nothing of the node stays on the old host), a new agent is launched
// for the node on the new host with its role relaunched, and the old host
// becomes free. The node registers again under its name, so the
// coordinator puts its DOING shards back in the queue.
func (m *Manager) moveNode(j *jobState, a *consolepb.Action, old *launch.Proc, mv hostMove) {
	node, to, from := a.Target, mv.to, mv.from
	err := old.KillGroup(moveGrace)
	var role string
	j.onActor(func() {
		if n := j.nodes[node]; n != nil {
			role = n.role
		}
		if err == nil {
			j.hosts.release(from, j.nodes)
		}
	})
	if err == nil {
		err = j.startAgent(role, node, "--relaunched")
	}
	j.onActor(func() {
		if err != nil {
			m.transition(j, a, ActFailed, "scheduler", fmt.Sprintf("relaunch %s on host %s: %v", node, to, err))
			return
		}
		if n := j.nodes[node]; n != nil {
			a.AppliedIteration = n.progress().iteration
		}
		note := fmt.Sprintf("restarted %s on host %s, leaving host %s", node, to, from)
		m.transition(j, a, ActApplied, "scheduler", note)
		m.event(j.spec.Name, "action", node, fmt.Sprintf("action %s %s: %s", a.Id, a.Kind, note), "scheduler")
	})
	m.persistAction(j, a)
	if err != nil {
		j.coord.Fail(fmt.Errorf("%s: relaunch on host %s: %w", node, to, err))
	}
}

// hostMove is where a KILL_RESTART relaunched its node: the host it went
// to and the one it left.
type hostMove struct{ to, from string }

// retire records agent processes stopped on purpose, whose ends are not
// failures (watchAgent). The caller is the job's actor.
func (j *jobState) retire(procs ...*launch.Proc) {
	if j.retired == nil {
		j.retired = map[int]bool{}
	}
	for _, p := range procs {
		j.retired[p.Pid()] = true
	}
}

// retiredAgent says whether an agent process was stopped on purpose, by a
// move or by the checkpoint-and-restart baseline (its end is not the
// node's failure).
func (j *jobState) retiredAgent(pid int) bool {
	retired := false
	j.onActor(func() { retired = j.retired[pid] })
	return retired
}
