package console

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/consoleapi"
)

func windowJob() *consolepb.JobView {
	v := &consolepb.JobView{Name: "j", State: "running", Iteration: 7, Heatmap: &consolepb.Heatmap{BucketSeconds: 1}}
	ratios := []float64{1, 0.9, 3, 1.1, 2}
	for i, name := range []string{"server-0", "worker-0", "worker-1", "worker-2", "worker-3"} {
		role := "worker"
		if i == 0 {
			role = "server"
		}
		v.Nodes = append(v.Nodes, &consolepb.NodeView{Name: name, Role: role, Ratio: ratios[i]})
		v.Heatmap.Rows = append(v.Heatmap.Rows, &consolepb.HeatmapRow{Node: name, Cells: []float32{float32(i), float32(5 - i)}})
		prefix := "bpt/"
		if role == "server" {
			prefix = "speed/"
		}
		v.Charts = append(v.Charts, &consolepb.Series{Name: prefix + name, Values: []float64{0, ratios[i]}})
	}
	v.Charts = append(v.Charts, &consolepb.Series{Name: "speed/server-1", Values: []float64{0, 0.5}})
	return v
}

func names(nodes []*consolepb.NodeView) string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.GetName())
	}
	return strings.Join(out, ",")
}

func TestTrimView(t *testing.T) {
	v := windowJob()
	for _, c := range []struct {
		name         string
		w            *consolepb.ViewWindow
		nodes        string
		total, off   int32
		rows, series string
	}{
		{"no window", nil, "server-0,worker-0,worker-1,worker-2,worker-3", 0, 0, "5", "speed/server-0,bpt/worker-0,bpt/worker-1,bpt/worker-2,bpt/worker-3,speed/server-1"},
		{"rows as listed", &consolepb.ViewWindow{Offset: 1, Limit: 2}, "worker-0,worker-1", 5, 1, "5", ""},
		{"by ratio, filtered", &consolepb.ViewWindow{Sort: consoleapi.SortRatio, Filter: "WORKER", Limit: 3}, "worker-1,worker-3,worker-2", 4, 0, "5", ""},
		{"by name, past the end", &consolepb.ViewWindow{Sort: consoleapi.SortName, Offset: 9, Limit: 3}, "", 5, 5, "5", ""},
		{"heatmap merged, slowest series", &consolepb.ViewWindow{HeatmapRows: 2, ChartSeries: 1}, "server-0,worker-0,worker-1,worker-2,worker-3", 5, 0,
			"server-0…worker-1 [2 5], worker-2…worker-3 [4 2]", "bpt/worker-1,speed/server-1"},
	} {
		got := consoleapi.TrimView(v, c.w)
		if n := names(got.GetNodes()); n != c.nodes {
			t.Errorf("%s: nodes %s; want %s", c.name, n, c.nodes)
		}
		if got.GetNodesTotal() != c.total || got.GetNodesOffset() != c.off {
			t.Errorf("%s: total %d offset %d; want %d %d", c.name, got.GetNodesTotal(), got.GetNodesOffset(), c.total, c.off)
		}
		var rows []string
		for _, r := range got.GetHeatmap().GetRows() {
			if r.GetNodes() > 1 {
				rows = append(rows, fmt.Sprintf("%s…%s %v", r.GetNode(), r.GetLast(), r.GetCells()))
			}
		}
		if len(rows) == 0 {
			rows = []string{fmt.Sprint(len(got.GetHeatmap().GetRows()))}
		}
		if r := strings.Join(rows, ", "); r != c.rows {
			t.Errorf("%s: heatmap rows %s; want %s", c.name, r, c.rows)
		}
		if c.series != "" {
			var s []string
			for _, x := range got.GetCharts() {
				s = append(s, x.GetName())
			}
			if got := strings.Join(s, ","); got != c.series {
				t.Errorf("%s: series %s; want %s", c.name, got, c.series)
			}
		}
		if got.GetIteration() != 7 || got.GetName() != "j" {
			t.Errorf("%s: figures lost: %v", c.name, got)
		}
	}
	if names(v.GetNodes()) != "server-0,worker-0,worker-1,worker-2,worker-3" {
		t.Errorf("trimView changed the backend's view: %s", names(v.GetNodes()))
	}
}

func TestCheckWindow(t *testing.T) {
	for _, w := range []*consolepb.ViewWindow{
		{Sort: "fastest"}, {Limit: -1}, {Limit: consoleapi.MaxWindowRows + 1}, {Offset: -2}, {HeatmapRows: -1}, {ChartSeries: -3},
		{Filter: strings.Repeat("x", MaxWindowFilter+1)},
	} {
		if err := checkWindow(w); err == nil || Code(err).String() != "InvalidArgument" {
			t.Errorf("checkWindow(%v) = %v; want InvalidArgument", w, err)
		}
	}
	if err := checkWindow(&consolepb.ViewWindow{Sort: consoleapi.SortRatio, Limit: 40, HeatmapRows: 40, ChartSeries: 8}); err != nil {
		t.Errorf("a sensible window refused: %v", err)
	}
}

// TestSubscriptionTrimsEachViewOnce: while the backend serves the same
// (immutable) view, a windowed subscription hands out the same trimmed
// view, which the diff then passes at no cost; a new view is trimmed
// afresh, and the trimmed view follows it.
func TestSubscriptionTrimsEachViewOnce(t *testing.T) {
	v := windowJob()
	b := newFakeBackend(v)
	sub := &subscription{names: []string{"j"}, window: &consolepb.ViewWindow{Offset: 0, Limit: 2, HeatmapRows: 2}}
	first := sub.views(b)
	again := sub.views(b)
	if len(first) != 1 || first[0] == v || again[0] != first[0] {
		t.Fatalf("same backend view: trimmed %p then %p (backend %p); want one trimmed view, not the backend's", first[0], again[0], v)
	}
	w := windowJob()
	w.Iteration = 8
	b.setJob(w)
	next := sub.views(b)
	if next[0] == first[0] || next[0].GetIteration() != 8 {
		t.Fatalf("new backend view: got %p at iteration %d; want a new trimmed view at iteration 8", next[0], next[0].GetIteration())
	}
	if got := names(next[0].GetNodes()); got != names(first[0].GetNodes()) {
		t.Errorf("window rows %s; want %s", got, names(first[0].GetNodes()))
	}
}
