package manager

import (
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/cause"
	"github.com/kelpie/kelpie/scheduler/consoleapi"
)

// A console shows a window of a job's detail view: 50 node rows, 50
// heatmap rows, 8 series per chart (consolepb.ViewWindow). Cut from the
// whole view, a 20,000-node job's window cost a whole view a second —
// every node's split, cause and phases, a heatmap row and a series per
// node — a seventh of the scheduler's CPU and two fifths of what it
// allocated at 20,000 agents. WindowView cuts it from a bare view of every
// node instead (no splits, causes or phases: the timeline's frames and the
// metrics read the same one) and completes only the rows in the window;
// the heatmap rows are merged and the slowest series chosen straight from
// the nodes' buckets. What it returns is what consoleapi.TrimView makes of
// the whole view (TestWindowViewIsTheTrimmedView).

var _ consoleapi.WindowBackend = (*Manager)(nil)

// frameColumns is the heatmap width of the bare view a window is cut from
// when there is none: what the timeline's frames ask for as a rule (the
// bucket that closed and the open one: record), so that the next frame
// takes it rather than building its own.
const frameColumns = 2

// WindowView implements consoleapi.WindowBackend: the named jobs' detail
// views as a console with window w sees them, published and shared like
// View's for the detail view's TTL.
func (m *Manager) WindowView(names []string, heatmapColumns int, w *consolepb.ViewWindow) []*consolepb.JobView {
	if w == nil {
		return m.View(names, heatmapColumns)
	}
	jobs := m.jobList()
	key := viewKey{detail: true, columns: heatmapColumns, win: windowKeyOf(w)}
	now := m.now()
	var out []*consolepb.JobView
	for _, n := range names {
		if j, ok := jobs[n]; ok {
			out = append(out, j.windowView(key, w, now))
		}
	}
	return out
}

// windowView is the job's window for key (and w, which key holds): the
// published one while it is fresh, else one cut from a fresh whole view
// (full or bare, built now if there is none).
func (j *jobState) windowView(key viewKey, w *consolepb.ViewWindow, now time.Time) *consolepb.JobView {
	return j.freshView(key, now, func(old *viewCache) *consolepb.JobView {
		base, ok := j.wholeView(now, time.Time{}, 0)
		if !ok {
			bk := viewKey{detail: true, columns: frameColumns, bare: true}
			v, rows, frozen := j.view(bk)
			base = cachedView{v: v, at: now, rows: rows, frozen: frozen, bare: true}
			// Published for the frames and the metrics; if the views were
			// invalidated meanwhile, neither it nor the window is.
			if next := old.with(bk, base, j.viewTTL); j.views.CompareAndSwap(old, next) {
				old = next
			}
		}
		v := j.cut(base, key.columns, w, now)
		j.publish(old, key, cachedView{v: v, at: now})
		return v
	})
}

// cut is consoleapi.TrimView(whole, w) for base, the whole view (full or
// bare) it would be cut from: its figures, the window's node rows
// (completed with their splits, causes and phases if base is bare), the
// heatmap's rows merged and the slowest series, from base's rows' buckets
// at columns heatmap columns.
func (j *jobState) cut(base cachedView, columns int, w *consolepb.ViewWindow, now time.Time) *consolepb.JobView {
	if !consoleapi.Trims(base.v, w) {
		return base.v
	}
	out := consoleapi.WindowNodes(base.v, w)
	if base.bare {
		out.Nodes = j.explainRows(base, out.Nodes)
	}
	g := j.heatGrid(base.rows, columns, now, j.windowGrid)
	j.windowGrid = g.values
	out.Heatmap, out.Charts = g.merged(int(w.GetHeatmapRows())), g.slowest(int(w.GetChartSeries()))
	for _, s := range out.Charts {
		s.Values = slices.Clone(s.Values) // not the reused grid's
	}
	return out
}

// explainRows is window, node views of base, a bare view (its nodes built
// from its rows, in their order), as the full view has them: copies with
// their splits, causes and phases, from the splits frozen with the rows.
// The causes are against the job's median, so every node's split is read
// only when a row in the window straggles.
func (j *jobState) explainRows(base cachedView, window []*consolepb.NodeView) []*consolepb.NodeView {
	if len(window) == 0 {
		return window
	}
	at := make(map[*consolepb.NodeView]int, len(window))
	for _, nv := range window {
		at[nv] = -1
	}
	for i, nv := range base.v.GetNodes() {
		if _, ok := at[nv]; ok {
			at[nv] = i
		}
	}
	own := newCauseInputs()
	var why map[string]cause.Cause
	for _, nv := range window {
		i := at[nv]
		r := &base.rows[i]
		own.addCause(r.name, r.role, r.removed, &base.frozen[i])
		if why == nil && straggling(nv.GetClass()) && !r.removed {
			why = causesOf(base.rows, base.frozen).causes()
		}
	}
	out := make([]*consolepb.NodeView, len(window))
	for k, nv := range window {
		c := proto.CloneOf(nv)
		base.rows[at[nv]].explain(c, own.phases, why)
		out[k] = c
	}
	j.nodePhasesView(out)
	return out
}

// merged is the heatmap with its rows merged down to at most rows
// (consoleapi.MergeRows of heatGrid.every's), without a row per node.
func (g *heatGrid) merged(rows int) *consolepb.Heatmap {
	n := len(g.rows)
	if rows <= 0 || n <= rows {
		h, _ := g.every()
		return h
	}
	h := g.heatmap()
	cells := make([]float32, g.width)
	h.Rows = consoleapi.MergedRows(n, rows, func(i int) string { return g.rows[i].name }, func(i int) []float32 {
		clear(cells)
		g.heat(i, cells)
		return cells
	})
	return h
}

// slowest is the chart series of the n slowest nodes of each chart
// (consoleapi.SlowestSeries of heatGrid.every's); every node's for n ≤ 0.
func (g *heatGrid) slowest(n int) []*consolepb.Series {
	if n <= 0 {
		_, all := g.every()
		return all
	}
	keep := consoleapi.Slowest(len(g.rows), n, func(i int) string { return g.rows[i].seriesName }, func(i int) float64 {
		v := g.seriesValues(i)
		return v[len(v)-1]
	})
	out := make([]*consolepb.Series, len(keep))
	for k, i := range keep {
		out[k] = &consolepb.Series{}
		g.series(i, out[k])
	}
	return out
}
