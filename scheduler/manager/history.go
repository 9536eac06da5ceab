package manager

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/timeline"
)

// This file keeps each job's timeline (scheduler/timeline): one frame per
// heatmap bucket while the job runs, written to the store every
// historyFlushEvery and when the job ends, read back by the console's
// history command; and the closed loop: every applied action's realized
// effect is measured from the frames over the proposing policy's window,
// stored with the action, told as an event, and handed to the policies.

// History defaults.
const (
	// DefaultHistoryRetention is how long a finished job's timeline is
	// kept.
	DefaultHistoryRetention = 7 * 24 * time.Hour
	historyFlushEvery       = 5 * time.Second
	// judgeGrace is how long past its after-window an action's effect is
	// still awaited (its targets may take time to report again).
	judgeGrace = 2 * time.Minute
	// History pages.
	historyPage        = 500
	historyPageMax     = 5000
	historyPageSamples = 200_000
)

// jobHistory is a job's recorded timeline. Its fields are the job's
// actor's, except that flushes of one job are serialized by flushMu
// (held across the store write, never on the actor).
type jobHistory struct {
	rec     *timeline.Recorder // nil once the job ended and its timeline is in the store
	col     int                // last heatmap column recorded (-1: none)
	flushed time.Time
	closed  bool
	// unjudged holds applied actions whose effect could not be measured
	// (no frame before them, or no report after): not tried again.
	unjudged map[string]bool
	pruned   bool // its stored timeline was deleted (retention)
	// samples is the job's trained samples at samplesAt (the last record):
	// the frames' progress rate is the difference.
	samples   int64
	samplesAt time.Time
	flushMu   sync.Mutex
}

func newJobHistory(m *Manager, nodes int) *jobHistory {
	return &jobHistory{rec: timeline.NewRecorder(timeline.Capacity(nodes, m.cfg.HistoryBudget, m.cfg.HistoryFrames), nil),
		col: -1, unjudged: map[string]bool{}}
}

// record adds the frames of the heatmap buckets closed since the last
// record; final closes the open bucket too (the job has ended), and the
// last frame then shows the state the job is ending in (ending, when not
// empty: the view it was built from may still say running).
func (j *jobState) record(now time.Time, final bool, ending ...string) {
	m := j.m
	last := j.column(now)
	upto := last - 1
	if final {
		upto = last
	}
	var from int
	var open bool
	var prev *timeline.Frame // the recorder's last, whose roster the new frames may share
	j.onActor(func() {
		from, open = j.hist.col, j.hist.rec != nil && !j.hist.closed
		if open {
			prev = j.hist.rec.Last()
		}
	})
	if !open || upto <= from || upto < 0 {
		return
	}
	closed := j.bucket0.Add(time.Duration(upto+1) * m.cfg.Bucket) // the end of the last bucket recorded
	if closed.After(now) {
		closed = now
	}
	v := j.frameView(now, closed, min(last-from, m.cfg.Columns))
	samples := j.coord.WorkerSamples()
	first := last
	if h := v.GetHeatmap(); h.GetStart() != nil {
		first = j.column(h.GetStart().AsTime())
	}
	var frames []*timeline.Frame // kept compact, made here rather than on the actor (some 2 ms at 20,000 nodes)
	for c := max(from+1, first); c <= upto; c++ {
		start := j.bucket0.Add(time.Duration(c) * m.cfg.Bucket)
		end := start.Add(m.cfg.Bucket)
		if end.After(now) {
			end = now // the open bucket, closed by the job's end
		}
		if !end.After(start) {
			continue
		}
		f := timeline.FrameOfView(v, c-first, end, end.Sub(start), prev)
		frames, prev = append(frames, f), f
	}
	if n := len(frames); final && n > 0 && len(ending) > 0 && ending[0] != "" {
		// The job's last frame shows it ending: made again as a message
		// (once a job).
		last := frames[n-1].Proto()
		last.State = ending[0]
		for _, tn := range last.Nodes {
			tn.State = nodeStateIn(ending[0], tn.State)
		}
		frames[n-1] = timeline.Compact(last, frames[n-1])
	}
	j.onActor(func() {
		if j.hist.rec == nil || j.hist.closed {
			return
		}
		// The samples trained since the last record, spread over the
		// frames this record adds.
		rate := Throughput(j.hist.samples, j.hist.samplesAt, samples, now)
		j.hist.samples, j.hist.samplesAt = samples, now
		for _, f := range frames {
			j.hist.rec.AddFrame(f.WithSamplesPerS(rate))
		}
		j.hist.col = max(j.hist.col, upto)
	})
}

// flushHistory writes what the recorder changed to the store, at most every
// historyFlushEvery unless forced.
func (j *jobState) flushHistory(now time.Time, force bool) {
	m := j.m
	j.hist.flushMu.Lock()
	defer j.hist.flushMu.Unlock()
	var (
		from, held int
		frames     []*timeline.Frame
		due        bool
	)
	j.onActor(func() {
		if j.hist.rec == nil || !force && now.Sub(j.hist.flushed) < historyFlushEvery {
			return
		}
		due = true
		j.hist.flushed = now
		from, frames = j.hist.rec.Flush()
		held = j.hist.rec.Len()
	})
	if !due || len(frames) == 0 && from == held && !force {
		return
	}
	data := make([][]byte, 0, len(frames))
	for _, f := range frames {
		b, err := f.Marshal() // no message per node
		if err != nil {
			m.log.Error("timeline frame", "job", j.spec.Name, "err", err)
			return
		}
		data = append(data, b)
	}
	if err := m.cfg.Store.PutTimeline(j.spec.Name, from, data); err != nil {
		m.log.Error("store timeline", "job", j.spec.Name, "err", err)
	}
}

// closeHistory records the last frame (showing the job ending as ending),
// measures what can still be measured and writes the timeline out; the recorder is dropped once the job has
// ended (History reads the store then). Idempotent.
func (j *jobState) closeHistory(now time.Time, ending string) {
	j.record(now, true, ending)
	j.judge(now, true)
	j.flushHistory(now, true)
	j.onActor(func() { j.hist.closed = true })
}

// releaseHistory frees a finished job's in-memory timeline (it is in the
// store).
func (j *jobState) releaseHistory() {
	j.hist.flushMu.Lock()
	defer j.hist.flushMu.Unlock()
	j.onActor(func() { j.hist.rec = nil })
}

// judge measures the realized effect of every applied action that has none
// yet (timeline.Realize) and records it: on the action (persisted), as an
// event (kind "miss" for a miss), and so for the policies (outcomes).
func (j *jobState) judge(now time.Time, final bool) {
	m := j.m
	var measured []*consolepb.Action
	j.onActor(func() { // a.Realized is written on the actions' records
		if j.hist.rec == nil {
			return
		}
		frames := j.hist.rec.Frames()
		for _, a := range j.actions {
			if a.State != ActApplied || a.Realized != nil || j.hist.unjudged[a.Id] {
				continue
			}
			ap, before := j.applied(a, frames)
			r := timeline.Realize(frames, ap, now, final)
			if r == nil {
				if final || now.After(ap.At.Add(ap.Transition+ap.Window+judgeGrace)) {
					j.hist.unjudged[a.Id] = true
				}
				continue
			}
			r.Targets, r.Policy, r.Kind = ap.Targets, a.Policy, a.Kind
			r.BatchesBefore, r.BatchesAfter, r.Restarts = before, map[string]int32{}, map[string]int32{}
			for w, b := range a.GetBatchSizes() {
				r.BatchesAfter[w] = b * max(a.GetAccumulation()[w], 1)
			}
			for _, t := range ap.Targets {
				if n := j.nodes[t]; n != nil {
					r.Restarts[t] = n.status.Restarts
				}
			}
			a.Realized = r
			measured = append(measured, a)
		}
	})
	for _, a := range measured {
		m.persistAction(j, a)
		kind, what := "action", a.Kind
		if a.Realized.GetMiss() {
			kind = "miss"
		}
		if a.Target != "" {
			what += " " + a.Target
		}
		m.event(j.spec.Name, kind, a.Target, fmt.Sprintf("%s (%s) realized: %s", what, a.Policy, a.Realized.GetVerdict()), "")
	}
	if !final {
		for _, r := range m.proposeRollbacks(j, measured) {
			m.persistAction(j, r)
		}
	}
	if len(measured) > 0 {
		j.invalidateViews()
	}
}

// applied describes an applied action for timeline.Realize, with every
// worker's batch size before it (from the last frame before it). Called
// on the job's actor.
func (j *jobState) applied(a *consolepb.Action, frames []*timeline.Frame) (timeline.Applied, map[string]int32) {
	at := a.GetUpdated().AsTime()
	var dispatched time.Time
	for _, h := range a.GetHistory() {
		if h.GetState() == ActDispatched && dispatched.IsZero() {
			dispatched = h.GetAt().AsTime()
		}
		if h.GetState() == ActApplied {
			at = h.GetAt().AsTime()
			break
		}
	}
	snap := j.snap.Config
	ap := timeline.Applied{At: at, Dispatched: dispatched, Window: snap.LTrans, Transition: j.m.cfg.Bucket}
	if _, escalated := a.GetEvidence()["escalated_from_seconds"]; a.Kind == string(policy.KindKillRestart) &&
		a.Policy == policy.NameAntDTND && !escalated {
		// A restart answers a persistent straggler (L_per); one escalated
		// from a missed batch cut answers what the short window showed.
		ap.Window = snap.LPer
	}
	if d := defOf(a); d != nil && d.nodeChange {
		ap.Transition = 2 * j.m.cfg.Bucket // a node comes or goes
	}
	if ap.Window <= 0 {
		ap.Window = 5 * time.Second
	}
	ev := a.GetEvidence()
	ap.PredictedThroughput = ev["predicted_throughput"]
	if x := ev["predicted_bpt_s"]; x > 0 && a.Kind != string(policy.KindAdjustBS) {
		ap.PredictedBPT = time.Duration(x * float64(time.Second))
	}
	// The batch sizes before it: from the last frame before it was sent
	// (workers that reached its iteration before the last one acknowledged
	// already report the new sizes).
	from := at
	if !dispatched.IsZero() && dispatched.Before(at) {
		from = dispatched
	}
	before := map[string]int32{}
	if i := timeline.FrameAt(frames, from); i >= 0 {
		if frames[i].Time().After(from) && i > 0 {
			i-- // the frame that covers from ends after it: take the one before
		}
		f := frames[i]
		for n := range f.NodeCount() {
			if f.NodeRole(n) == "worker" {
				before[f.NodeName(n)] = f.NodeBatchSize(n)
			}
		}
	}
	switch {
	case a.Kind == string(policy.KindAdjustBS):
		// The workers whose batch it cut are the ones it meant to speed up.
		for w, b := range a.GetBatchSizes() {
			if old, ok := before[w]; ok && b*max(a.GetAccumulation()[w], 1) < old {
				ap.Targets = append(ap.Targets, w)
			}
		}
		slices.Sort(ap.Targets)
	case a.Target != "" && j.nodes[a.Target] != nil && j.nodes[a.Target].role == "worker":
		ap.Targets = []string{a.Target}
		// The BPT the policy acted on, should no frame before hold the
		// target's (AntDT-ND's evidence: over L_per, else L_trans).
		for _, k := range []string{a.Target + "/bpt_per_s", a.Target + "/bpt_trans_s"} {
			if x := ev[k]; x > 0 {
				ap.BPTBefore = x
				break
			}
		}
	}
	return ap, before
}

// outcomes is what the job's policies learn from: the measured effects of
// its applied actions, in the order they were applied. Called on the
// job's actor.
func (j *jobState) outcomes() []policy.Outcome {
	var out []policy.Outcome
	for _, a := range j.actions {
		r := a.GetRealized()
		if r == nil {
			continue
		}
		o := policy.Outcome{Policy: a.Policy, Kind: policy.Kind(a.Kind), Targets: r.GetTargets(), Miss: r.GetMiss(),
			BPTBefore: r.GetBptBeforeS(), BPTAfter: r.GetBptAfterS(), ThroughputAfter: r.GetThroughputAfter(),
			Predicted: r.GetPredictedThroughput(), BatchesBefore: map[string]int{}, BatchesAfter: map[string]int{}, Restarts: map[string]int{}}
		for w, b := range r.GetBatchesAfter() {
			o.BatchesAfter[w] = int(b)
		}
		o.At = a.GetUpdated().AsTime()
		for _, h := range a.GetHistory() {
			if h.GetState() == ActApplied {
				o.At = h.GetAt().AsTime()
			}
		}
		for w, b := range r.GetBatchesBefore() {
			o.BatchesBefore[w] = int(b)
		}
		for w, n := range r.GetRestarts() {
			o.Restarts[w] = int(n)
		}
		o.NodeBPTBefore, o.NodeBPTAfter = r.GetBptBeforeByNode(), r.GetBptAfterByNode()
		out = append(out, o)
	}
	return out
}

// History returns a page of a job's recorded timeline, oldest first,
// and with the first page its actions and recent events.
func (m *Manager) History(job string, from, limit int) (*consolepb.CommandResult, error) {
	j, ok := m.lookup(job)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no job %q", job)
	}
	var frames []*timelinepb.TimelineFrame
	var live []*timeline.Frame
	var nodes int
	res := &consolepb.CommandResult{Ok: true, Job: job}
	j.onActor(func() {
		if j.hist.rec != nil {
			live = j.hist.rec.Frames()
		}
		nodes = max(len(j.nodes), 1)
		if from == 0 {
			for _, a := range j.actions {
				res.Actions = append(res.Actions, proto.CloneOf(a))
			}
		}
	})
	if from == 0 {
		res.Events = m.jobEvents(job)
	}
	if live == nil {
		var err error
		if frames, err = m.storedTimeline(job); err != nil {
			return nil, status.Errorf(codes.Internal, "timeline of %s: %v", job, err)
		}
	}
	if limit <= 0 {
		limit = historyPage
	}
	limit = min(limit, historyPageMax, max(historyPageSamples/nodes, 1))
	if live != nil { // only the page is made into messages
		from = min(from, len(live))
		res.FramesFrom, res.FramesTotal = int32(from), int32(len(live))
		res.Frames = timeline.Protos(live[from:min(from+limit, len(live))])
		return res, nil
	}
	from = min(from, len(frames))
	res.FramesFrom, res.FramesTotal = int32(from), int32(len(frames))
	res.Frames = frames[from:min(from+limit, len(frames))]
	return res, nil
}

// storedTimeline reads a job's timeline from the store.
func (m *Manager) storedTimeline(job string) ([]*timelinepb.TimelineFrame, error) {
	data, err := m.cfg.Store.LoadTimeline(job)
	if err != nil {
		return nil, err
	}
	frames := make([]*timelinepb.TimelineFrame, 0, len(data))
	for i, b := range data {
		f := &timelinepb.TimelineFrame{}
		if err := proto.Unmarshal(b, f); err != nil {
			return nil, fmt.Errorf("frame %d: %w", i, err)
		}
		frames = append(frames, f)
	}
	return frames, nil
}

// pruneHistories forgets the timelines of jobs that ended more than the
// retention ago (zero retention keeps them).
func (m *Manager) pruneHistories(now time.Time) {
	if m.cfg.HistoryRetention <= 0 {
		return // negative: kept for good
	}
	var old []string
	for name, j := range m.jobList() {
		j.onActor(func() {
			if j.over() && !j.ended.IsZero() && now.Sub(j.ended) > m.cfg.HistoryRetention && !j.hist.pruned {
				j.hist.pruned = true
				old = append(old, name)
			}
		})
	}
	for _, name := range old {
		if err := m.cfg.Store.DeleteTimeline(name); err != nil {
			m.log.Warn("delete timeline", "job", name, "err", err)
		}
	}
}

// realizedResult is an action's realized effect in the result JSON; a
// figure that could not be measured is null.
type realizedResult struct {
	WindowS             float64  `json:"window_s"`
	BPTBeforeS          *float64 `json:"bpt_before_s"`
	BPTAfterS           *float64 `json:"bpt_after_s"`
	ThroughputBefore    float64  `json:"throughput_before"`
	ThroughputAfter     float64  `json:"throughput_after"`
	PredictedThroughput float64  `json:"predicted_throughput"`
	PredictionError     float64  `json:"prediction_error"`
	// Extensions.
	PredictedBPTS float64  `json:"predicted_bpt_s,omitempty"`
	Miss          bool     `json:"miss"`
	Verdict       string   `json:"verdict"`
	Targets       []string `json:"targets,omitempty"`
}

func realizedOf(r *timelinepb.Realized) *realizedResult {
	if r == nil {
		return nil
	}
	return &realizedResult{WindowS: r.GetWindowS(), BPTBeforeS: finiteOrNil(r.GetBptBeforeS()), BPTAfterS: finiteOrNil(r.GetBptAfterS()),
		ThroughputBefore: r.GetThroughputBefore(), ThroughputAfter: r.GetThroughputAfter(),
		PredictedThroughput: r.GetPredictedThroughput(), PredictionError: finiteOr0(r.GetPredictionError()),
		PredictedBPTS: r.GetPredictedBptS(), Miss: r.GetMiss(), Verdict: r.GetVerdict(), Targets: r.GetTargets()}
}

func finiteOr0(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}
