package manager

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/coordinator"
	"github.com/kelpie/kelpie/scheduler/launch"
	"github.com/kelpie/kelpie/scheduler/shard"
	"github.com/kelpie/kelpie/scheduler/store"
	"github.com/kelpie/kelpie/scheduler/timeline"
)

// waitStarted waits for the job to start; false if it ended first or the
// manager closed.
func (m *Manager) waitStarted(j *jobState) bool {
	select {
	case <-j.coord.Started():
		return true
	case <-j.endedCh:
	case <-m.done:
	}
	return false
}

// persistStart records, once the job has started, what a restarted
// scheduler needs to adopt it: the start time and the servers' addresses.
func (m *Manager) persistStart(j *jobState) {
	if !m.waitStarted(j) {
		return
	}
	start := j.coord.Start()
	for _, n := range j.coord.Nodes() {
		role := "worker"
		if n.Role == coordinatorpb.Role_ROLE_SERVER {
			role = "server"
		}
		_ = m.cfg.Store.PutNode(j.spec.Name, store.NodeRecord{Name: n.Name, Role: role, Addr: n.Addr, Pid: int(n.Pid),
			State: "running", BatchSize: n.BatchSize, Registered: start})
	}
	if !j.facts().over {
		_ = m.cfg.Store.PutJob(store.JobRecord{Name: j.spec.Name, SpecYAML: string(j.spec.YAML()), State: StateRunning,
			SubmittedBy: j.submittedBy, Submitted: j.submitted, Updated: start})
	}
}

// restoreJob rebuilds a job from the store after a scheduler restart. A live
// job's agents reconnect and its roles carry on; actions, policy settings
// and the audit log come back as they were.
func (m *Manager) restoreJob(s *spec.Spec, r store.JobRecord) (*jobState, error) {
	recs, err := m.cfg.Store.ListNodes(r.Name)
	if err != nil {
		return nil, err
	}
	var nodes []coordinator.NodeStats
	start := r.Submitted
	for _, n := range recs {
		role := coordinatorpb.Role_ROLE_WORKER
		if n.Role == "server" {
			role = coordinatorpb.Role_ROLE_SERVER
		}
		nodes = append(nodes, coordinator.NodeStats{Name: n.Name, Role: role, Addr: n.Addr, Pid: int32(n.Pid),
			BatchSize: n.BatchSize, Restarts: n.Restarts, Left: n.State == nodeRemoved, Done: n.State == "done"})
		if !n.Registered.IsZero() && n.Registered.After(start) {
			start = n.Registered
		}
	}
	live := r.State == StateStarting || r.State == StateRunning
	var ended error
	if !live {
		ended = errors.New(r.State)
		if r.Error != "" {
			ended = fmt.Errorf("%s: %s", r.State, r.Error)
		}
	}
	if live && r.State == StateStarting {
		// It had not started: its roles never got going; it cannot be
		// adopted half-way.
		live, ended = false, errors.New("the scheduler restarted before the job started")
		r.State, r.Error = StateFailed, ended.Error()
		_ = m.cfg.Store.PutJob(r)
	}
	cj, err := m.coord.RestoreJob(s, start, nodes, ended)
	if err != nil {
		return nil, err
	}
	if q, ok, err := m.cfg.Store.LoadShards(r.Name); err != nil {
		return nil, fmt.Errorf("shards of %s: %w", r.Name, err)
	} else if ok {
		cj.SetQueue(q)
		cj.Persist = func(ch []shard.Shard) error { return m.cfg.Store.PutShardChanges(r.Name, ch) }
		cj.PersistAddr = func(node, addr string) error { return m.cfg.Store.SetNodeAddr(r.Name, node, "server", addr) }
	}
	j := newJobState(m, s, cj, r.Submitted)
	j.submittedBy, j.state, j.err, j.ended = r.SubmittedBy, r.State, r.Error, r.Finished
	if !live {
		j.hist.rec, j.hist.closed = nil, true // its timeline is in the store
	} else if frames, err := m.storedTimeline(r.Name); err != nil {
		m.log.Warn("timeline not restored", "job", r.Name, "err", err)
	} else if len(frames) > 0 {
		j.hist.rec = timeline.NewRecorder(timeline.Capacity(len(j.nodes), m.cfg.HistoryBudget, m.cfg.HistoryFrames), frames)
		j.hist.col = j.column(frames[len(frames)-1].GetTime().AsTime()) - 1
	}
	if len(r.Result) > 0 {
		var res Result
		if json.Unmarshal(r.Result, &res) == nil {
			j.res = &res
		}
	}
	if !live {
		close(j.endedCh)
		if !m.cfg.NoLaunch {
			// A job that is over leaves nothing running: groups its agents
			// did not stop (the scheduler died first) are stopped now.
			rec := j.newLauncher().RecordFile
			m.spawn(func() {
				if n, err := launch.StopRecorded(m.clk, rec, 5*time.Second); err == nil && n > 0 {
					m.event(r.Name, "job", "", fmt.Sprintf("stopped %d process groups of job %s, which is %s", n, r.Name, r.State), "")
				}
			})
		}
	}
	for _, n := range recs {
		ns := j.nodes[n.Name]
		if ns == nil {
			// Added while the job ran (ADD_SERVER, ADD_WORKER).
			ns = j.newNode(n.Name, n.Role)
			j.nodes[n.Name] = ns
		}
		ns.host = n.Host
		ns.setBatch(n.BatchSize)
		ns.status.Restarts = int32(n.Restarts)
		ns.status.Pid = int32(n.Pid)
		ns.status.State = nodeStateOf(n.State)
		ns.removed = n.State == nodeRemoved
	}
	j.hosts.restore(j.spec, j.nodes)
	if b, ok, _ := m.cfg.Store.GetPolicies(r.Name); ok {
		var ps map[string]*policySetting
		if json.Unmarshal(b, &ps) == nil {
			for k, p := range ps {
				// The stored settings win; a parameter declared since
				// they were stored keeps the spec's value.
				if cur, known := j.policies[k]; known && p != nil {
					cur.Mode = p.Mode
					for key, x := range p.Params {
						if _, declared := cur.Params[key]; declared {
							cur.Params[key] = x
						}
					}
				}
			}
		}
	}
	acts, err := m.cfg.Store.ListActions(r.Name)
	if err != nil {
		return nil, err
	}
	for _, ar := range acts {
		a := actionFrom(r.Name, ar)
		if err := typedArgs(a); err != nil {
			m.log.Warn("restore action", "job", r.Name, "action", a.Id, "err", err)
		}
		var n uint64
		if _, err := fmt.Sscanf(a.Id, "a-%d", &n); err == nil && n > m.nextID.Load() {
			m.nextID.Store(n) // restore runs before anything else numbers actions
		}
		j.actions = append(j.actions, a)
		j.byID[a.Id] = a
		if err := j.gate.Restore(gateRecord(a, ar.Params["key"])); err != nil {
			return nil, err
		}
		if a.State == ActDispatched && !tableKind(a.Kind) && !j.serverRestart(a) {
			// Its agents ack it again when they reconnect (or apply its
			// replay): wait for every node it involves.
			var await []string
			for _, n := range sortedNodes(j.nodes) {
				if !n.removed && j.targets(a, n.name) {
					await = append(await, n.name)
				}
			}
			j.await(a, await)
		}
		if d := defOf(a); d != nil && d.resplit && d.applied != nil && a.State == ActApplied {
			d.applied(m, j, a) // the split, and a REMOVE_WORKER's removal
		}
	}
	if live {
		// Nodes that do not come back are lost and launched again.
		j.adopted = m.now()
		if !m.cfg.NoLaunch {
			j.launcher = j.newLauncher()
		}
		m.event(r.Name, "job", "", fmt.Sprintf("job %s adopted after a scheduler restart: waiting for its agents", r.Name), "")
	}
	j.publishFacts() // not published yet: the actor's from then on
	if live {
		m.spawn(func() { m.watch(j) })
	}
	return j, nil
}
