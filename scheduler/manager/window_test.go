package manager

import (
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/consoleapi"
)

// TestWindowViewIsTheTrimmedView: for every window, WindowView returns
// what consoleapi.TrimView makes of the whole detail view — cut from a
// bare view (splits, causes and phases filled in for the window's rows
// only, the heatmap merged and the series chosen from the buckets), or
// from a whole view a console taking whole views has published. A window
// holding the straggler carries its cause, so the lazy causes are
// checked too, and a silent node's empty cells sit between others'.
func TestWindowViewIsTheTrimmedView(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	stragglerReports(m, j, clk)
	// worker-3 falls silent: its last cells are empty, next to a node
	// whose cells are not (a merged row must not carry a neighbour's).
	for range 2 {
		report(map[string]float64{"worker-0": 0.004, "worker-1": 0.004, "worker-2": 0.010})
	}
	names := []string{"hist"}
	windows := []*consolepb.ViewWindow{
		{Limit: 2},
		{Sort: consoleapi.SortRatio, Limit: 3, HeatmapRows: 2, ChartSeries: 1},
		{Sort: consoleapi.SortName, Filter: "WORKER", Offset: 1, Limit: 2, HeatmapRows: 1, ChartSeries: 2},
		{Filter: "transient", HeatmapRows: 3},
		{Filter: "persistent"},
		{Sort: consoleapi.SortRatio, Offset: 9, Limit: 3, ChartSeries: 5},
		{HeatmapRows: 50},
		{},
	}
	caused := false
	for _, cols := range []int{0, 4} {
		for _, w := range windows {
			for _, order := range []string{"window first", "whole view first"} {
				j.invalidateViews()
				var got, whole *consolepb.JobView
				if order == "window first" {
					got = m.WindowView(names, cols, w)[0]
					whole = m.View(names, cols)[0]
				} else {
					whole = m.View(names, cols)[0]
					got = m.WindowView(names, cols, w)[0]
				}
				want := consoleapi.TrimView(whole, w)
				if !proto.Equal(want, got) {
					t.Errorf("columns %d, window %v, %s: WindowView differs from the trimmed whole view:\nwant %s\ngot  %s",
						cols, w, order, prototext.Format(want), prototext.Format(got))
				}
				if again := m.WindowView(names, cols, w)[0]; again != got {
					t.Errorf("columns %d, window %v: a second WindowView within the TTL built another view", cols, w)
				}
				for _, n := range got.GetNodes() {
					caused = caused || n.GetCause() != nil
				}
			}
		}
	}
	if !caused {
		t.Error("no window held a straggler with its cause: the lazy causes were not checked")
	}
	// A frame and a scrape take the bare view a window was cut from.
	j.invalidateViews()
	m.WindowView(names, 0, windows[1])
	base, ok := j.wholeView(m.now(), time.Time{}, 1)
	if !ok || !base.bare {
		t.Fatal("a window published no bare view of every node")
	}
	if got := m.metricsViews(); len(got) != 1 || got[0] != base.v {
		t.Error("the metrics built a view of their own beside the window's base")
	}
	for _, n := range base.v.GetNodes() {
		if n.GetSplit() != nil || n.GetCause() != nil || n.GetPhases() != nil {
			t.Errorf("the bare view's %s carries a split, cause or phases", n.GetName())
		}
	}
}
