package manager

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/store"
)

// View implements console.Backend: the current views of the named jobs, or
// of every job (then without nodes, heatmap and charts).
func (m *Manager) View(names []string, heatmapColumns int) []*kelpiepb.JobView {
	m.mu.Lock()
	defer m.mu.Unlock()
	detail := len(names) > 0
	if !detail {
		for n := range m.jobs {
			names = append(names, n)
		}
	}
	var out []*kelpiepb.JobView
	now := m.now()
	for _, n := range names {
		j, ok := m.jobs[n]
		if !ok {
			continue
		}
		// Views are rebuilt at most every ViewTTL: every subscriber of a
		// job shares one view value, and the console sees an unchanged
		// pointer as no change at all.
		key := viewKey{detail, heatmapColumns}
		if c, ok := j.views[key]; ok && now.Sub(c.at) < ViewTTL {
			out = append(out, c.v)
			continue
		}
		v := j.view(detail, heatmapColumns, m.yieldLock)
		if j.views == nil {
			j.views = map[viewKey]cachedView{}
		}
		j.views[key] = cachedView{v: v, at: now}
		out = append(out, v)
	}
	return out
}

// ViewTTL is how long a built job view is served before it is rebuilt.
const ViewTTL = 200 * time.Millisecond

type viewKey struct {
	detail  bool
	columns int
}

type cachedView struct {
	v  *kelpiepb.JobView
	at time.Time
}

// EventsSince implements console.Backend.
func (m *Manager) EventsSince(seq uint64, limit int) ([]*kelpiepb.Event, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	first := m.evSeq - uint64(len(m.events)) + 1 // sequence of m.events[0]
	var out []*kelpiepb.Event
	for i, e := range m.events {
		if first+uint64(i) > seq {
			out = append(out, e)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, m.evSeq
}

// Audit implements console.Backend: every command decision goes to the
// store's audit log and the event stream.
func (m *Manager) Audit(e console.AuditEntry) error {
	what := e.Command
	if e.Detail != "" {
		what += " " + e.Detail
	}
	_, err := m.cfg.Store.Audit(store.AuditEntry{At: e.Time, Who: e.Who, Role: e.Role, What: what, Job: e.Job,
		Allowed: e.Allowed, Reason: e.Reason})
	m.mu.Lock()
	msg := fmt.Sprintf("%s (%s): %s", e.Who, e.Role, what)
	if !e.Allowed {
		msg = "refused " + msg
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
	}
	m.eventLocked(e.Job, "audit", "", msg, e.Who)
	if n := len(m.events); n > 0 {
		m.events[n-1].Allowed = e.Allowed
	}
	m.mu.Unlock()
	return err
}

// Execute implements console.Backend for an authorized command.
func (m *Manager) Execute(ctx context.Context, who console.Principal, cmd *kelpiepb.Command) *kelpiepb.CommandResult {
	res := &kelpiepb.CommandResult{Ok: true}
	var err error
	switch k := cmd.GetKind().(type) {
	case *kelpiepb.Command_SubmitJob:
		res.Job, err = m.Submit(k.SubmitJob.SpecYaml, who.Name)
	case *kelpiepb.Command_KillJob:
		res.Job = k.KillJob.Job
		err = m.Kill(k.KillJob.Job, who.Name)
	case *kelpiepb.Command_Approve:
		res.Job, res.ActionId = k.Approve.Job, k.Approve.ActionId
		err = m.Decide(k.Approve.Job, k.Approve.ActionId, true, who.Name, k.Approve.Reason)
	case *kelpiepb.Command_Reject:
		res.Job, res.ActionId = k.Reject.Job, k.Reject.ActionId
		err = m.Decide(k.Reject.Job, k.Reject.ActionId, false, who.Name, k.Reject.Reason)
	case *kelpiepb.Command_Trigger:
		res.Job = k.Trigger.Job
		res.ActionId, err = m.Trigger(k.Trigger.Job, k.Trigger.Action, who.Name)
	case *kelpiepb.Command_SetPolicy:
		p := k.SetPolicy
		res.Job = p.Job
		err = m.SetPolicy(p.Job, p.Policy, p.Mode, p.Params, who.Name)
	default:
		err = status.Errorf(codes.InvalidArgument, "unknown command %T", k)
	}
	if err != nil {
		st, _ := status.FromError(err)
		res.Ok, res.Error, res.Code = false, st.Message(), int32(st.Code())
	}
	return res
}

// viewChunk is how many nodes a view builds between two releases of the
// manager's lock: a view of thousands of nodes must not hold up the
// reports that agents send meanwhile.
const viewChunk = 256

// yieldLock lets the goroutines waiting for the manager's lock (agents'
// reports) in, then takes it back. The caller holds it.
func (m *Manager) yieldLock() {
	m.mu.Unlock()
	runtime.Gosched()
	m.mu.Lock()
}

// view builds a job's console view (under the manager's lock). Every
// viewChunk nodes it calls yield, which may release the lock for a while:
// the nodes' rows are then each consistent, not all of them at one instant.
func (j *jobState) view(detail bool, columns int, yield func()) *kelpiepb.JobView {
	s := j.spec
	v := &kelpiepb.JobView{Name: s.Name, State: j.state, Error: j.err, Submitted: ts(j.submitted), Ended: ts(j.ended),
		Model: fmt.Sprintf("%s on %s", s.Model.Kind, s.Data.Kind), Sync: syncName(s),
		Servers: int32(j.servers()), Workers: int32(len(j.liveWorkers())), GlobalBatch: int32(s.Train.GlobalBatch),
		Iterations: j.coord.Plan.Iterations()}
	if st := j.coord.Start(); !st.IsZero() {
		v.Started = ts(st)
	}
	var lossSum float64
	var lossN int
	for _, n := range j.nodes {
		if n.role != "worker" {
			continue
		}
		v.Iteration = max(v.Iteration, n.iteration)
		if n.loss > 0 {
			lossSum += n.loss
			lossN++
		}
	}
	if lossN > 0 {
		v.Loss = lossSum / float64(lossN)
	}
	todo, doing, done, total := j.coord.ShardCounts()
	v.ShardsTodo, v.ShardsDoing, v.ShardsDone, v.ShardsTotal = int64(todo), int64(doing), int64(done), int64(total)
	if j.res != nil {
		v.Accuracy = j.res.Accuracy
	}
	for _, name := range policyNames {
		p := j.policies[name]
		pv := &kelpiepb.PolicyView{Name: name, Mode: p.Mode, Params: map[string]float64{}}
		for k, x := range p.Params {
			pv.Params[k] = x
		}
		v.Policies = append(v.Policies, pv)
	}
	snap := j.snap
	for _, w := range snap.Workers {
		v.Throughput += w.Throughput
	}
	// Actions: pending first, then the most recent.
	for _, a := range j.actions {
		if a.State == ActProposed {
			v.Actions = append(v.Actions, a)
		}
	}
	for i := len(j.actions) - 1; i >= 0 && len(v.Actions) < 50; i-- {
		if j.actions[i].State != ActProposed {
			v.Actions = append(v.Actions, j.actions[i])
		}
	}
	if !detail {
		return v
	}
	v.SpecYaml = string(s.YAML())
	v.Monitor = &kelpiepb.MonitorView{MeanBptS: snap.MeanBPT.Seconds(), SpeedVariance: finite(snap.SpeedVariance),
		Superior: snap.Superior, ScaleOut: snap.ScaleOut, WindowTransientS: snap.Config.LTrans.Seconds(),
		WindowPersistentS: snap.Config.LPer.Seconds(), Lambda: snap.Config.Lambda}
	blocks := map[int]int{}
	for _, srv := range j.coord.Table.ServerOf {
		blocks[srv]++
	}
	nodes := sortedNodes(j.nodes)
	for i, n := range nodes {
		if i > 0 && i%viewChunk == 0 {
			yield()
		}
		nv := &kelpiepb.NodeView{Name: n.name, Role: n.role, Host: n.host, State: stateName(n.status.State),
			Pid: n.status.Pid, Restarts: n.status.Restarts, BatchSize: int32(n.batch), Iteration: n.iteration,
			Sparkline: append([]float64(nil), n.spark...), LastReport: ts(n.lastSeen), Class: "unknown"}
		if n.removed {
			nv.State = "removed"
		}
		if n.role == "worker" {
			nv.Accumulation = int32(max(j.accum[n.name], 1))
			if w, ok := snap.Worker(n.name); ok && !n.removed {
				nv.BptShortS, nv.BptLongS, nv.Throughput = w.BPTTrans.Seconds(), w.BPTPer.Seconds(), w.Throughput
				nv.Class, nv.Ratio = w.Class.String(), finite(w.RatioTrans)
			}
		} else {
			nv.Blocks = int32(blocks[nodeIndex(n.name)])
			if sv, ok := snap.Server(n.name); ok {
				nv.Alpha, nv.Beta, nv.Speed = finite(sv.Alpha), finite(sv.Beta), finite(sv.Speed)
				nv.Superior, nv.Class, nv.Ratio = sv.Superior, sv.Class.String(), finite(sv.Ratio)
			}
		}
		v.Nodes = append(v.Nodes, nv)
	}
	v.Heatmap, v.Charts = j.heatmap(nodes, columns, yield)
	return v
}

func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// heatmap builds the nodes × time heatmap (each cell the node's mean BPT or
// comm time in that bucket relative to the mean over its role) and the
// chart series (BPT per worker, speed per server).
func (j *jobState) heatmap(nodes []*nodeState, columns int, yield func()) (*kelpiepb.Heatmap, []*kelpiepb.Series) {
	cols := j.m.cfg.Columns
	if columns <= 0 || columns > cols {
		columns = min(60, cols)
	}
	cur := j.column(j.m.now())
	if cur >= cols {
		cur = j.roll(cur)
	}
	last := max(cur, 0)
	first := max(last-columns+1, 0)
	bucket := j.m.cfg.Bucket
	h := &kelpiepb.Heatmap{BucketSeconds: bucket.Seconds(), Start: ts(j.bucket0.Add(time.Duration(first) * bucket))}
	means := map[string][]float64{}
	for _, role := range []string{"worker", "server"} {
		mean := make([]float64, last-first+1)
		k := make([]int, last-first+1)
		for _, n := range nodes {
			if n.role != role {
				continue
			}
			for c := first; c <= last; c++ {
				if n.count[c] > 0 {
					mean[c-first] += n.sum[c] / float64(n.count[c])
					k[c-first]++
				}
			}
		}
		for i := range mean {
			if k[i] > 0 {
				mean[i] /= float64(k[i])
			}
		}
		means[role] = mean
	}
	var series []*kelpiepb.Series
	// shift counts the columns the buckets rolled by while the lock was
	// released: column c of this view is then at c-shift in the nodes'.
	bucket0, shift := j.bucket0, 0
	for i, n := range nodes {
		if i > 0 && i%viewChunk == 0 {
			yield()
			shift = int(j.bucket0.Sub(bucket0) / bucket)
		}
		row := &kelpiepb.HeatmapRow{Node: n.name, Cells: make([]float32, last-first+1)}
		ser := &kelpiepb.Series{Name: "bpt/" + n.name, Unit: "s", IntervalSeconds: bucket.Seconds(), Values: make([]float64, last-first+1)}
		if n.role == "server" {
			ser.Name, ser.Unit = "speed/"+n.name, "B/s"
		}
		for vc := first; vc <= last; vc++ {
			c := vc - shift
			if c < 0 || n.count[c] == 0 {
				continue
			}
			mean := n.sum[c] / float64(n.count[c])
			if mu := means[n.role][vc-first]; mu > 0 {
				row.Cells[vc-first] = float32(mean / mu)
			}
			if n.role == "server" {
				if n.sum[c] > 0 {
					ser.Values[vc-first] = n.bytes[c] / n.sum[c]
				}
			} else {
				ser.Values[vc-first] = mean
			}
		}
		h.Rows = append(h.Rows, row)
		series = append(series, ser)
	}
	return h, series
}
