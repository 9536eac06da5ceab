package tui

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// windowOf plays the scheduler's window for the test: the job's rows
// [off, off+limit), marked as a window of all of them.
func windowOf(j *consolepb.JobView, off, limit int) *consolepb.JobView {
	v := proto.CloneOf(j)
	v.NodesTotal, v.NodesOffset = int32(len(j.Nodes)), int32(off)
	v.Nodes = j.Nodes[off:min(off+limit, len(j.Nodes))]
	return v
}

// waitWindow waits until the console has asked for a window satisfying ok.
func waitWindow(t *testing.T, b *fakeBackend, ok func(*consolepb.ViewWindow) bool) *consolepb.ViewWindow {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if w := b.lastWindow(); w != nil && ok(w) {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatalf("console asked for window %v", b.lastWindow())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestJobViewWindow: on a 1,000-worker job the console asks the scheduler
// only for the rows around its table (a page each side), the heatmap rows
// its screen has and eight series per chart; it shows the rows it got at
// their place among all 1,002, asks for the bottom rows when the cursor
// goes there, and hands the sort and the filter to the scheduler.
func TestJobViewWindow(t *testing.T) {
	big := bigJob(1000)
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 200, 60)
	tm.Send(client.SnapshotMsg{Scope: []string{big.Name}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{windowOf(big, 0, 60)}}})
	press(tm, ":", "job "+big.Name, "enter")
	w := waitWindow(t, b, func(w *consolepb.ViewWindow) bool { return w.GetLimit() > 0 })
	if w.GetOffset() != 0 || w.GetSort() != "" || w.GetHeatmapRows() != 60 || w.GetChartSeries() != 8 {
		t.Errorf("first window %v; want rows from 0 as listed, 60 heatmap rows, 8 series", w)
	}
	waitText(t, tm, "nodes (1002)", "worker-3 ")
	press(tm, "G")
	waitText(t, tm, "…") // the bottom rows are on their way
	w = waitWindow(t, b, func(w *consolepb.ViewWindow) bool { return w.GetOffset() > 900 })
	if end := w.GetOffset() + w.GetLimit(); end < 1002 {
		t.Errorf("window at the bottom %v ends at row %d; want the last one in it", w, end)
	}
	tm.Send(client.SnapshotMsg{Scope: []string{big.Name}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{
		windowOf(big, int(w.GetOffset()), int(w.GetLimit()))}}})
	waitText(t, tm, "worker-999 ")
	press(tm, "s")
	waitWindow(t, b, func(w *consolepb.ViewWindow) bool { return w.GetSort() == "ratio" })
	press(tm, "/", "637", "enter")
	waitWindow(t, b, func(w *consolepb.ViewWindow) bool { return w.GetFilter() == "637" })
	press(tm, "J")
	deadline := time.Now().Add(5 * time.Second)
	for b.lastWindow() != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if w := b.lastWindow(); w != nil {
		t.Errorf("the jobs list kept the window %v; want whole (summary) views", w)
	}
	m := final2(t, tm)
	if strings.Contains(m.View(), "panic") {
		t.Error(m.View())
	}
}
