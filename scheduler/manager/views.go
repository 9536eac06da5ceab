package manager

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/core/diverge"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/cause"
	"github.com/kelpie/kelpie/scheduler/consoleapi"
	"github.com/kelpie/kelpie/scheduler/monitor"
	"github.com/kelpie/kelpie/scheduler/store"
)

// View implements consoleapi.Backend: the current views of the named jobs, or
// of every job (then without nodes, heatmap and charts). Views are
// published values, rebuilt at most every ViewTTL: every subscriber of a
// job shares one view value, the console sees an unchanged pointer as no
// change at all, and a reader of a fresh view takes no lock.
func (m *Manager) View(names []string, heatmapColumns int) []*consolepb.JobView {
	jobs := m.jobList()
	detail := len(names) > 0
	if !detail {
		for n := range jobs {
			names = append(names, n)
		}
	}
	key := viewKey{detail: detail, columns: heatmapColumns}
	now := m.now()
	var out []*consolepb.JobView
	for _, n := range names {
		if j, ok := jobs[n]; ok {
			out = append(out, j.publishedView(key, now))
		}
	}
	return out
}

// metricsViews are every job's detail views for /metrics (Collector), in
// the order of JobNames.
func (m *Manager) metricsViews() []*consolepb.JobView {
	jobs := m.jobList()
	now := m.now()
	var out []*consolepb.JobView
	for _, n := range m.JobNames() {
		if j, ok := jobs[n]; ok {
			out = append(out, j.metricsView(now))
		}
	}
	return out
}

// metricsView is the job's detail view for /metrics, which reads the
// job's figures and its nodes' classes, BPTs and speeds (no heatmap, no
// splits or causes): any fresh published detail view of the whole job
// (the console's, the timeline's), else a bare one of its own, one column
// wide. A scrape built a 20,000-node view of its own beside the console's.
func (j *jobState) metricsView(now time.Time) *consolepb.JobView {
	if cv, ok := j.wholeView(now, time.Time{}, 1); ok {
		return cv.v
	}
	return j.publishedView(viewKey{detail: true, columns: 1, bare: true}, now)
}

// wholeView is a published detail view of every node (full or bare, not a
// window) covering need heatmap columns, built no earlier than notBefore
// or, without notBefore, fresh by its TTL.
func (j *jobState) wholeView(now, notBefore time.Time, need int) (cachedView, bool) {
	c := j.views.Load()
	if c == nil {
		return cachedView{}, false
	}
	for k, cv := range *c {
		if !k.detail || k.win.set || j.heatmapWidth(k.columns) < need {
			continue
		}
		if !notBefore.IsZero() {
			if !cv.at.Before(notBefore) {
				return cv, true
			}
			continue
		}
		ttl := j.viewTTL(k)
		if c.fresh(k, now, ttl, j.viewSince(k, now, ttl)) != nil {
			return cv, true
		}
	}
	return cachedView{}, false
}

// rowsPerTurn is how many nodes' rows a view build freezes in one turn of
// the job's actor (about a quarter of a millisecond); a variable for
// tests.
var rowsPerTurn = 512

// ViewTTL is how long a built job view is served before it is rebuilt.
// The detail view of a job of more than viewTTLNodes nodes lives
// proportionally longer (viewTTL).
const ViewTTL = 200 * time.Millisecond

// viewTTLNodes is the job size up to which a detail view lives ViewTTL.
const viewTTLNodes = 1000

// viewTTL is how long the job's view for key is served: ViewTTL, and for
// the detail view of a big job ViewTTL per viewTTLNodes nodes, up to one
// heatmap bucket (1 s at 5,000 nodes). Building a detail view is O(nodes ×
// columns) and its node rows change with the agents' reports, which come
// about once per bucket: a 5,000-node view rebuilt five times a second cost
// a tenth of a core and showed the same reports. The job's figures and
// actions ride on the same view, so they follow at that pace too (a change
// of the job's shape or state invalidates it at once; events have their
// own stream).
func (j *jobState) viewTTL(key viewKey) time.Duration {
	ttl := ViewTTL
	if n := int(j.nodeCount.Load()); key.detail && n > viewTTLNodes {
		ttl = min(ViewTTL*time.Duration(n)/viewTTLNodes, max(j.m.cfg.Bucket, ViewTTL))
	}
	return ttl
}

// viewSince is the earliest time a view for key served at now may have
// been built: a detail view that lives a heatmap bucket (a big job's,
// viewTTL) goes stale when the bucket it was built in ends, so that the
// console's view and the timeline's frames, which need a view built since
// the bucket closed (frameView), share one build a bucket — with the TTL
// counted from the build alone, the console's view was often a fraction of
// a bucket too old for the frame, and the frame built its own. Zero for
// every other view.
func (j *jobState) viewSince(key viewKey, now time.Time, ttl time.Duration) time.Time {
	b := j.m.cfg.Bucket
	if !key.detail || b <= 0 || ttl != b {
		return time.Time{}
	}
	c := j.column(now)
	if c < 0 {
		return time.Time{}
	}
	return j.bucket0.Add(time.Duration(c) * b)
}

// viewKey names a published view: the job's summary (detail false) or a
// detail view with columns heatmap columns — a full one, a bare one (bare:
// no node's split, cause or phases, which the timeline's frames and the
// metrics do not read, and which need every node's recent splits), or a
// window of the full one (win, WindowView).
type viewKey struct {
	detail  bool
	columns int
	bare    bool
	win     windowKey
}

// windowKey is a ViewWindow as a comparable value (set: there is one).
type windowKey struct {
	set                               bool
	sort, filter                      string
	offset, limit, heatmapRows, chart int32
}

func windowKeyOf(w *consolepb.ViewWindow) windowKey {
	if w == nil {
		return windowKey{}
	}
	return windowKey{set: true, sort: w.GetSort(), filter: w.GetFilter(), offset: w.GetOffset(), limit: w.GetLimit(),
		heatmapRows: w.GetHeatmapRows(), chart: w.GetChartSeries()}
}

// cachedView is a published view, when it was built, and for a detail view
// of every node the rows it was built from (a window is cut from them).
type cachedView struct {
	v      *consolepb.JobView
	at     time.Time
	rows   []nodeRow
	frozen []frozenCause // the rows' recent splits, frozen with them
	bare   bool          // v is a bare detail view (viewKey.bare)
}

// viewCache is a job's published views; never changed once published.
type viewCache map[viewKey]cachedView

// fresh is the cached view for key if it is younger than ttl and was not
// built before since.
func (c *viewCache) fresh(key viewKey, now time.Time, ttl time.Duration, since time.Time) *consolepb.JobView {
	if c == nil {
		return nil
	}
	if v, ok := (*c)[key]; ok && now.Sub(v.at) < ttl && !v.at.Before(since) {
		return v.v
	}
	return nil
}

// with is a copy of c holding cv for key, without the views older than
// ttl of them.
func (c *viewCache) with(key viewKey, cv cachedView, ttl func(viewKey) time.Duration) *viewCache {
	out := viewCache{key: cv}
	if c != nil {
		for k, old := range *c {
			if k != key && cv.at.Sub(old.at) < ttl(k) {
				out[k] = old
			}
		}
	}
	return &out
}

// publishedView is the job's view for key (not a window): the published
// one while it is fresh, else a new one (freshView).
func (j *jobState) publishedView(key viewKey, now time.Time) *consolepb.JobView {
	return j.freshView(key, now, func(old *viewCache) *consolepb.JobView {
		v, rows, frozen := j.view(key)
		j.publish(old, key, cachedView{v: v, at: now, rows: rows, frozen: frozen})
		return v
	})
}

// freshView is the published view for key while it is fresh, else what
// build makes — built by one goroutine at a time (under viewMu), from old,
// the views published when it began.
func (j *jobState) freshView(key viewKey, now time.Time, build func(old *viewCache) *consolepb.JobView) *consolepb.JobView {
	ttl := j.viewTTL(key)
	since := j.viewSince(key, now, ttl)
	if v := j.views.Load().fresh(key, now, ttl, since); v != nil {
		return v
	}
	j.viewMu.Lock()
	defer j.viewMu.Unlock()
	if v := j.views.Load().fresh(key, now, ttl, since); v != nil {
		return v
	}
	return build(j.views.Load())
}

// publish adds cv to the published views, unless they were invalidated
// while it was built (old is what was published when the build began): a
// view built as the job finished would otherwise outlive the job — EPS and
// the console would see it running for another TTL beside its successor.
// Builders hold viewMu, so only an invalidation can change the views
// meanwhile, and it always stores a new pointer.
func (j *jobState) publish(old *viewCache, key viewKey, cv cachedView) {
	cv.bare = key.bare
	j.views.CompareAndSwap(old, old.with(key, cv, j.viewTTL))
}

// frameView is a detail view for record's frames, built no earlier than
// notBefore (the end of the last bucket they close) and covering need
// heatmap columns: a published view of every node, full or bare, built
// since notBefore is taken as it is (a console's whole view, the base its
// windows were cut from), else a bare one is built and published — at the
// width of the widest such view published, so that a console taking whole
// views at that width takes it instead of building its own: one 5,000-node
// view a second instead of two.
func (j *jobState) frameView(now, notBefore time.Time, need int) *consolepb.JobView {
	if cv, ok := j.wholeView(now, notBefore, need); ok {
		return cv.v
	}
	j.viewMu.Lock()
	defer j.viewMu.Unlock()
	if cv, ok := j.wholeView(now, notBefore, need); ok {
		return cv.v
	}
	old := j.views.Load()
	key := viewKey{detail: true, columns: need, bare: true}
	if old != nil {
		for k := range *old {
			if k.detail && !k.win.set && k.columns > key.columns {
				key = k
			}
		}
	}
	v, rows, frozen := j.view(key)
	j.publish(old, key, cachedView{v: v, at: now, rows: rows, frozen: frozen})
	return v
}

// invalidateViews makes the next view be built afresh (the job's shape or
// state changed: nodes, sync model, running, ended). It publishes a new
// empty cache rather than nil, so that a build under way sees the change
// (publish).
func (j *jobState) invalidateViews() { j.views.Store(&viewCache{}) }

// jobList is the manager's jobs by name, as last published.
func (m *Manager) jobList() map[string]*jobState {
	if p := m.published.Load(); p != nil {
		return *p
	}
	return nil
}

// lookup is the job of that name, as last published (no lock).
func (m *Manager) lookup(name string) (*jobState, bool) {
	j, ok := m.jobList()[name]
	return j, ok
}

// jobEvents is the event log's events of one job.
func (m *Manager) jobEvents(job string) []*consolepb.Event {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	var out []*consolepb.Event
	for _, e := range m.events {
		if e.Job == job {
			out = append(out, e)
		}
	}
	return out
}

// putJobLocked adds or replaces a job and publishes the job list. The
// caller holds m.mu.
func (m *Manager) putJobLocked(name string, j *jobState) {
	m.jobs[name] = j
	cp := make(map[string]*jobState, len(m.jobs))
	for k, v := range m.jobs {
		cp[k] = v
	}
	m.published.Store(&cp)
}

// EventsSince implements consoleapi.Backend.
func (m *Manager) EventsSince(seq uint64, limit int) ([]*consolepb.Event, uint64) {
	m.evMu.Lock()
	defer m.evMu.Unlock()
	first := m.evSeq - uint64(len(m.events)) + 1 // sequence of m.events[0]
	var out []*consolepb.Event
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

// Audit implements consoleapi.Backend: every command decision goes to the
// store's audit log and the event stream.
func (m *Manager) Audit(e consoleapi.AuditEntry) error {
	what := e.Command
	if e.Detail != "" {
		what += " " + e.Detail
	}
	_, err := m.cfg.Store.Audit(store.AuditEntry{At: e.Time, Who: e.Who, Role: e.Role, What: what, Job: e.Job,
		Allowed: e.Allowed, Reason: e.Reason})
	msg := fmt.Sprintf("%s (%s): %s", e.Who, e.Role, what)
	if !e.Allowed {
		msg = "refused " + msg
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
	}
	m.addEvent(&consolepb.Event{Time: ts(m.now()), Job: e.Job, Kind: "audit", Message: msg, Who: e.Who, Allowed: e.Allowed})
	return err
}

// Execute implements consoleapi.Backend for an authorized command.
func (m *Manager) Execute(ctx context.Context, who consoleapi.Principal, cmd *consolepb.Command) *consolepb.CommandResult {
	res := &consolepb.CommandResult{Ok: true}
	var err error
	switch k := cmd.GetKind().(type) {
	case *consolepb.Command_SubmitJob:
		res.Job, err = m.Submit(k.SubmitJob.SpecYaml, who.Name)
	case *consolepb.Command_KillJob:
		res.Job = k.KillJob.Job
		err = m.Kill(k.KillJob.Job, who.Name)
	case *consolepb.Command_Approve:
		res.Job, res.ActionId = k.Approve.Job, k.Approve.ActionId
		err = m.Decide(k.Approve.Job, k.Approve.ActionId, true, who.Name, k.Approve.Reason)
	case *consolepb.Command_Reject:
		res.Job, res.ActionId = k.Reject.Job, k.Reject.ActionId
		err = m.Decide(k.Reject.Job, k.Reject.ActionId, false, who.Name, k.Reject.Reason)
	case *consolepb.Command_Trigger:
		res.Job = k.Trigger.Job
		res.ActionId, err = m.Trigger(k.Trigger.Job, k.Trigger.Action, who.Name)
	case *consolepb.Command_SetPolicy:
		p := k.SetPolicy
		res.Job = p.Job
		err = m.SetPolicy(p.Job, p.Policy, p.Mode, p.Params, who.Name)
	case *consolepb.Command_History:
		h := k.History
		var page *consolepb.CommandResult
		if page, err = m.History(h.GetJob(), int(h.GetFrom()), int(h.GetLimit())); err == nil {
			res = page
		}
		res.Job = h.GetJob()
	case *consolepb.Command_Stacks:
		s := k.Stacks
		res.Job = s.GetJob()
		res.Stacks, err = m.Stacks(ctx, s.GetJob(), time.Duration(s.GetTimeoutS()*float64(time.Second)), s.GetSaved(), who.Name)
	case *consolepb.Command_Probe:
		p := k.Probe
		res.Job = p.GetJob()
		res.Probe, err = m.Probe(ctx, p.GetJob(), p.GetNode(), time.Duration(p.GetTimeoutS()*float64(time.Second)), who.Name)
	default:
		err = status.Errorf(codes.InvalidArgument, "unknown command %T", k)
	}
	if err != nil {
		f := consoleapi.Failure("", err) // the one mapping of errors to what a console client sees
		res.Ok, res.Error, res.Code = false, f.Error, f.Code
	}
	return res
}

// nodeRow is what a view shows of one node, frozen on the job's actor; the
// view is built from it (and the node's lock-free heatmap buckets) off the
// actor.
type nodeRow struct {
	name, role, host string
	state            agentpb.NodeState
	pid, restarts    int32
	batch            int
	iteration        int64
	spark            []float64
	lastSeen         time.Time
	removed          bool
	accum            int
	cells            *buckets
	seriesName       string // its chart series: "bpt/worker-2", "speed/server-0"
}

// seriesName is the name of the chart series of node name in role, made
// once per node. The caller holds viewMu (and runs on the actor for the
// builder, which waits).
func (j *jobState) seriesName(name, role string) string {
	if s, ok := j.seriesNames[name]; ok {
		return s
	}
	if j.seriesNames == nil {
		j.seriesNames = map[string]string{}
	}
	s := "bpt/" + name
	if role == "server" {
		s = "speed/" + name
	}
	j.seriesNames[name] = s
	return s
}

// view builds a job's console view. Everything it reads of the job's
// state is frozen on the job's actor: the job's figures, policies and
// actions and the list of its nodes in one turn, then the nodes' rows and
// recent splits in turns of rowsPerTurn nodes, so that the actor takes in
// the reports that came meanwhile between them (a 20,000-node freeze in
// one turn held them back some 20 ms); each row is one node as of one
// turn. The heatmap, causes (from copies of the nodes' split windows) and
// charts are built from the frozen copy off the actor. A bare view
// (key.bare) leaves the nodes' splits, causes and phases out. It returns
// the detail view's rows and their recent splits too (a window is cut
// from them: windowView). The caller holds viewMu: one build at a time,
// at most once per view TTL however many readers (publishedView,
// frameView, windowView).
func (j *jobState) view(key viewKey) (*consolepb.JobView, []nodeRow, []frozenCause) {
	m := j.m
	detail, columns := key.detail, key.columns
	var (
		v        *consolepb.JobView
		s        = j.spec
		coord    = j.coord
		snap     monitor.Snapshot
		over     bool
		res      *Result
		ended    time.Time
		nodes    []keyedNode
		rows     []nodeRow
		frozen   []frozenCause // the rows' recent splits
		causes   causeInputs
		specYAML bool
	)
	j.onActor(func() {
		s, coord, snap = j.spec, j.coord, j.snap
		j.nodeCount.Store(int32(len(j.nodes)))
		v = &consolepb.JobView{Name: s.Name, State: j.state, Error: j.err, Submitted: ts(j.submitted), Ended: ts(j.ended),
			Model: fmt.Sprintf("%s on %s", s.Model.Kind, s.Data.Kind), Sync: syncName(s),
			Servers: int32(j.servers()), Workers: int32(j.liveWorkerCount()), GlobalBatch: int32(s.Train.GlobalBatch)}
		var lossSum float64
		var lossN int
		for _, n := range j.nodes {
			if n.role != "worker" {
				continue
			}
			p := &n.prog
			v.Iteration = max(v.Iteration, p.iteration)
			if p.loss > 0 || !diverge.Finite(p.loss) {
				lossSum += p.loss // a non-finite loss shows as such
				lossN++
			}
		}
		if lossN > 0 {
			v.Loss = lossSum / float64(lossN)
		}
		over, res, ended = j.over(), j.res, j.ended
		if j.res != nil {
			v.Accuracy = j.res.Accuracy
			if d := j.res.Diverged; d != nil {
				// Not a number, never 0: the job has no final loss.
				v.Diverged, v.Loss = d.proto(), math.NaN()
			}
		}
		for _, name := range policyNames() {
			p := j.policies[name]
			pv := &consolepb.PolicyView{Name: name, Mode: p.Mode, Params: map[string]float64{}}
			for k, x := range p.Params {
				pv.Params[k] = x
			}
			v.Policies = append(v.Policies, pv)
		}
		// Actions: pending first, then the most recent. Copies: the view
		// is read off the actor, while actions change on it.
		for _, a := range j.actions {
			if a.State == ActProposed {
				v.Actions = append(v.Actions, proto.CloneOf(a))
			}
		}
		for i := len(j.actions) - 1; i >= 0 && len(v.Actions) < 50; i-- {
			if j.actions[i].State != ActProposed {
				v.Actions = append(v.Actions, proto.CloneOf(j.actions[i]))
			}
		}
		if detail {
			specYAML = true
			nodes = make([]keyedNode, 0, len(j.nodes))
			for _, n := range j.nodes {
				nodes = append(nodes, keyedNode{n.sortKey(), n})
			}
		}
	})
	if detail {
		// The rows are frozen in the nodes' order (sortedNodes'): the
		// keys and pointers are sorted here, off the actor, and the rows
		// (near a kilobyte each) never move.
		slices.SortFunc(nodes, func(a, b keyedNode) int { return a.key.compare(b.key) })
		rows, frozen = make([]nodeRow, 0, len(nodes)), make([]frozenCause, 0, len(nodes))
		for len(nodes) > 0 {
			turn := nodes[:min(rowsPerTurn, len(nodes))]
			nodes = nodes[len(turn):]
			j.onActor(func() {
				for _, kn := range turn {
					n := kn.n
					p := &n.prog // its spark is never changed in place
					rows = append(rows, nodeRow{name: n.name, role: n.role, host: n.host, state: n.status.State,
						pid: n.status.Pid, restarts: n.status.Restarts, batch: p.batch, iteration: p.iteration,
						spark: p.spark, lastSeen: n.seenWith(*p), removed: n.removed,
						accum: max(j.accum[n.name], 1), cells: n.cells, seriesName: j.seriesName(n.name, n.role)})
					frozen = append(frozen, n.cause.freeze())
				}
			})
		}
		// The causes' windows are computed off the actor, from the copies.
		if !key.bare {
			causes = causesOf(rows, frozen)
		}
	}
	if !over {
		v.ClusterBusy = j.clusterBusy()
	}
	if specYAML {
		v.SpecYaml = string(s.YAML())
	}

	// A worker that is done said which iteration it ended at: its last
	// periodic report may be a few iterations short of it.
	final := coord.FinalIterations()
	for _, it := range final {
		v.Iteration = max(v.Iteration, it)
	}
	v.RegionBytes = coord.RegionBytes()
	if st := coord.Start(); !st.IsZero() {
		v.Started = ts(st)
	}
	todo, doing, done, total := coord.ShardCounts()
	v.Iterations = j.iterationTotal(over, v.State, v.Iteration, todo, doing, total)
	v.ShardsTodo, v.ShardsDoing, v.ShardsDone, v.ShardsTotal = int64(todo), int64(doing), int64(done), int64(total)
	v.Throughput = j.throughput(over, res, coord.Start(), ended)
	j.goodputView(v, over, ended)
	if !detail {
		return v, nil, nil
	}
	v.Exchange = j.exchange.view(s, coord.Plan(), v.Iteration)
	v.Monitor = &consolepb.MonitorView{MeanBptS: snap.MeanBPT.Seconds(), SpeedVariance: finite(snap.SpeedVariance),
		Superior: snap.Superior, ScaleOut: snap.ScaleOut, WindowTransientS: snap.Config.LTrans.Seconds(),
		WindowPersistentS: snap.Config.LPer.Seconds(), Lambda: snap.Config.Lambda}
	blocks := map[int]int{}
	for _, srv := range coord.Table().ServerOf {
		blocks[srv]++
	}
	var why map[string]cause.Cause
	if !key.bare {
		why = causes.causes()
	}
	for _, n := range rows {
		nv := &consolepb.NodeView{Name: n.name, Role: n.role, Host: n.host, State: nodeStateIn(v.State, stateName(n.state)),
			Pid: n.pid, Restarts: n.restarts, BatchSize: int32(n.batch), Iteration: max(n.iteration, final[n.name]),
			Sparkline: n.spark, LastReport: ts(n.lastSeen), Class: "unknown"}
		if n.removed {
			nv.State = "removed"
		}
		if n.role == "worker" {
			nv.Accumulation = int32(n.accum)
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
		if !key.bare {
			n.explain(nv, causes.phases, why)
		}
		v.Nodes = append(v.Nodes, nv)
	}
	if !key.bare {
		j.nodePhasesView(v.Nodes)
	}
	v.Heatmap, v.Charts = j.heatmap(rows, columns, m.now())
	return v, rows, frozen
}

// causesOf is the causes' inputs from the rows' splits, frozen[i] row i's.
func causesOf(rows []nodeRow, frozen []frozenCause) causeInputs {
	in := newCauseInputs()
	for i := range rows {
		r := &rows[i]
		in.addCause(r.name, r.role, r.removed, &frozen[i])
	}
	return in
}

// explain sets what n's view nv says of where its time went: its split
// (phases: every worker's, causeInputs) and, when it straggles, its cause
// (why).
func (n *nodeRow) explain(nv *consolepb.NodeView, phases map[string]cause.Phases, why map[string]cause.Cause) {
	if p, ok := phases[n.name]; ok {
		nv.Split = splitView(p)
	}
	if c, ok := why[n.name]; ok && straggling(nv.Class) && !n.removed {
		nv.Cause = causeView(c)
	}
}

// keyedNode is a node with its place in the nodes' order.
type keyedNode struct {
	key nodeKey
	n   *nodeState
}

func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// heatmapWidth is the number of columns a view asked for columns gets:
// them, or 60 (at most what is kept) when they are not between 1 and the
// columns kept.
func (j *jobState) heatmapWidth(columns int) int {
	if cols := j.m.cfg.Columns; columns <= 0 || columns > cols {
		return min(60, cols)
	}
	return columns
}

// heatGrid is what a view's heatmap and charts are made of: every cell
// of the nodes' last columns buckets, read once (the rows' means, one
// allocation for all of them), the mean over each role of every column,
// and the servers' speeds. The means over the roles and the rows then
// agree. A cell without samples stays 0, as does one whose mean is 0 (its
// heat would be 0 too).
type heatGrid struct {
	rows         []nodeRow
	width        int
	values       []float64    // row i's means: values[i*width:(i+1)*width]
	speeds       []float64    // the servers' speeds, in the order of rows
	server       []int        // row i's index among the servers (-1: a worker)
	means        [2][]float64 // by role: workers, servers
	bucket       time.Duration
	bucketsStart time.Time
	whole        *consolepb.Heatmap  // every's, once made
	wholeSeries  []*consolepb.Series // every's, once made
}

func roleIndex(role string) int {
	if role == "server" {
		return 1
	}
	return 0
}

// heatGrid reads the rows' buckets, without any lock, for the last columns
// buckets up to now: their means into scratch when it is big enough (its
// contents are overwritten, and the series the grid makes share it).
func (j *jobState) heatGrid(rows []nodeRow, columns int, now time.Time, scratch []float64) *heatGrid {
	columns = j.heatmapWidth(columns)
	last := max(j.column(now), 0)
	first := max(last-columns+1, 0)
	width := last - first + 1
	values := scratch[:0]
	if cap(values) >= len(rows)*width {
		values = values[:len(rows)*width]
		clear(values)
	} else {
		// Room for every column asked for: the heatmap widens a column
		// a bucket until it has them.
		values = make([]float64, len(rows)*width, len(rows)*max(width, columns))
	}
	g := &heatGrid{rows: rows, width: width, values: values, server: make([]int, len(rows)),
		bucket: j.m.cfg.Bucket, bucketsStart: j.bucket0.Add(time.Duration(first) * j.m.cfg.Bucket)}
	var k [2][]float64
	for r := range g.means {
		g.means[r], k[r] = make([]float64, width), make([]float64, width)
	}
	for i, n := range rows {
		r := roleIndex(n.role)
		v := g.values[i*width : (i+1)*width]
		var sp []float64
		g.server[i] = -1
		if r == 1 {
			g.server[i] = len(g.speeds) / width
			g.speeds = append(g.speeds, make([]float64, width)...)
			sp = g.speeds[len(g.speeds)-width:]
		}
		for c := first; c <= last; c++ {
			sum, count, bytes, ok := n.cells.get(c)
			if !ok {
				continue
			}
			mean := sum / float64(count)
			v[c-first] = mean
			if sp != nil && sum > 0 {
				sp[c-first] = bytes / sum
			}
			g.means[r][c-first] += mean
			k[r][c-first]++
		}
	}
	for r := range g.means {
		for i := range g.means[r] {
			if k[r][i] > 0 {
				g.means[r][i] /= k[r][i]
			}
		}
	}
	return g
}

// heat is row i's heatmap cells: each its mean relative to the mean over
// its role, written to cells.
func (g *heatGrid) heat(i int, cells []float32) {
	mu := g.means[roleIndex(g.rows[i].role)]
	for c, mean := range g.values[i*g.width : (i+1)*g.width] {
		if mean != 0 && mu[c] > 0 {
			cells[c] = float32(mean / mu[c])
		}
	}
}

// seriesValues is row i's chart values: a worker's BPT means, a server's
// speeds.
func (g *heatGrid) seriesValues(i int) []float64 {
	if s := g.server[i]; s >= 0 {
		return g.speeds[s*g.width : (s+1)*g.width : (s+1)*g.width]
	}
	return g.values[i*g.width : (i+1)*g.width : (i+1)*g.width]
}

// series is row i's chart series.
func (g *heatGrid) series(i int, into *consolepb.Series) {
	n := &g.rows[i]
	into.Name, into.Unit, into.IntervalSeconds, into.Values = n.seriesName, "s", g.bucket.Seconds(), g.seriesValues(i)
	if n.role == "server" {
		into.Unit = "B/s"
	}
}

func (g *heatGrid) heatmap() *consolepb.Heatmap {
	return &consolepb.Heatmap{BucketSeconds: g.bucket.Seconds(), Start: ts(g.bucketsStart)}
}

// every is the nodes × time heatmap (each cell the node's mean BPT or comm
// time in that bucket relative to the mean over its role) and the chart
// series (BPT per worker, speed per server), a row and a series per node;
// made once per grid.
func (g *heatGrid) every() (*consolepb.Heatmap, []*consolepb.Series) {
	if g.whole == nil {
		g.whole, g.wholeSeries = g.all()
	}
	return g.whole, g.wholeSeries
}

func (g *heatGrid) all() (*consolepb.Heatmap, []*consolepb.Series) {
	h := g.heatmap()
	// One allocation each for the rows, the series and their cells (a
	// 5,000-node view has 10,000 of each otherwise).
	n := len(g.rows)
	series := make([]*consolepb.Series, n)
	h.Rows = make([]*consolepb.HeatmapRow, n)
	rowv, serv := make([]consolepb.HeatmapRow, n), make([]consolepb.Series, n)
	cells := make([]float32, n*g.width)
	for i := range g.rows {
		row := &rowv[i]
		row.Node, row.Cells = g.rows[i].name, cells[i*g.width:(i+1)*g.width:(i+1)*g.width]
		g.heat(i, row.Cells)
		g.series(i, &serv[i])
		h.Rows[i], series[i] = row, &serv[i]
	}
	return h, series
}

// heatmap builds the nodes × time heatmap and the chart series (heatGrid.every)
// for the last columns buckets up to now.
func (j *jobState) heatmap(rows []nodeRow, columns int, now time.Time) (*consolepb.Heatmap, []*consolepb.Series) {
	return j.heatGrid(rows, columns, now, nil).every()
}
