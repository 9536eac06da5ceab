package tui

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/tui/client"
)

// bigApp is the console at 200×60 on the job view of a 1,000-worker job, in TrueColor.
func bigApp(tb testing.TB) *App {
	m := testApp(&fakeBackend{}, false)
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	for _, msg := range feed("operator", nil, summaryJobs()) {
		m.Update(msg)
	}
	m.run("job mnist-mlp")
	m.Update(client.SnapshotMsg{Scope: []string{"mnist-mlp"}, Snapshot: &kelpiepb.Snapshot{Jobs: []*kelpiepb.JobView{bigJob(1000)}}})
	m.Update(applyTickMsg{})
	if v := m.View(); !strings.Contains(v, "nodes (1002)") {
		tb.Fatalf("the job view does not show 1,002 nodes:\n%s", v)
	}
	return m
}

func withTrueColor(b *testing.B) {
	lipgloss.SetColorProfile(termenv.TrueColor)
	b.Cleanup(func() { lipgloss.SetColorProfile(termenv.Ascii) })
}

// A full frame after new data: table, sparklines, heatmap, charts and PS panel all redrawn.
func BenchmarkJobView1000(b *testing.B) {
	withTrueColor(b)
	m := bigApp(b)
	_ = m.c.setTheme(m.c.theme) // palette escapes for TrueColor
	b.ReportAllocs()
	for b.Loop() {
		m.c.dataVer++ // as if a delta had arrived
		m.dirty = true
		_ = m.View()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/frame")
}

// Moving the cursor: the table is redrawn, the other panels come from their caches.
func BenchmarkJobView1000Cursor(b *testing.B) {
	withTrueColor(b)
	m := bigApp(b)
	_ = m.c.setTheme(m.c.theme)
	down := tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("j")}
	b.ReportAllocs()
	for b.Loop() {
		m.Update(down)
		_ = m.View()
	}
}

// Nothing changed: View returns the cached frame.
func BenchmarkJobView1000Idle(b *testing.B) {
	withTrueColor(b)
	m := bigApp(b)
	_ = m.View()
	b.ReportAllocs()
	for b.Loop() {
		_ = m.View()
	}
}

// The heatmap panel alone, at the size the 200×60 layout gives it.
func BenchmarkHeatmapPanel1000(b *testing.B) {
	withTrueColor(b)
	m := bigApp(b)
	_ = m.c.setTheme(m.c.theme)
	v := m.views[viewJob].(*jobView)
	b.ReportAllocs()
	for b.Loop() {
		_ = v.heatmapPanel(90, 33, false)
	}
}

// The charts panel alone (two ntcharts streamlinecharts of 8 series), at the 200×60 layout's size:
// what a frame with new data pays for the charts; other frames take it from the panel cache.
func BenchmarkChartsPanel1000(b *testing.B) {
	withTrueColor(b)
	m := bigApp(b)
	_ = m.c.setTheme(m.c.theme)
	v := m.views[viewJob].(*jobView)
	b.ReportAllocs()
	for b.Loop() {
		_ = v.chartsPanel(120, 23, false)
	}
}

// cpuTime is this process's user+system CPU time, from /proc/self/stat.
func cpuTime() (time.Duration, error) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	s := string(data)
	fields := strings.Fields(s[strings.LastIndex(s, ")")+1:]) // after "(comm)": state [0], utime [11], stime [12]
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/self/stat")
	}
	ut, err1 := strconv.ParseInt(fields[11], 10, 64)
	st, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad /proc/self/stat")
	}
	return time.Duration(ut+st) * time.Second / 100, nil // clock ticks: 100 Hz on Linux
}

// TestIdleCPU runs the real program (renderer, FPS cap) on the 1,000-node job view and measures
// the CPU it uses over 5 s with no new data. Set KELPIE_IDLE_CPU=1 to run it.
func TestIdleCPU(t *testing.T) {
	if os.Getenv("KELPIE_IDLE_CPU") == "" {
		t.Skip("set KELPIE_IDLE_CPU=1 to measure the idle CPU (takes 6 s)")
	}
	lipgloss.SetColorProfile(termenv.TrueColor)
	defer lipgloss.SetColorProfile(termenv.Ascii)
	m := bigApp(t)
	_ = m.c.setTheme(m.c.theme)
	in, inW := io.Pipe() // no keys: the program waits on input that never comes
	defer inW.Close()
	p := tea.NewProgram(m, tea.WithInput(in), tea.WithOutput(io.Discard), tea.WithFPS(FPS), tea.WithoutSignals())
	done := make(chan error, 1)
	go func() { _, err := p.Run(); done <- err }()
	p.Send(tea.WindowSizeMsg{Width: 200, Height: 60})
	time.Sleep(time.Second) // let the first frames settle
	c0, err := cpuTime()
	if err != nil {
		t.Skip(err)
	}
	start := time.Now()
	time.Sleep(5 * time.Second)
	c1, _ := cpuTime()
	wall := time.Since(start)
	p.Quit()
	<-done
	t.Logf("idle CPU over %v: %v (%.2f%% of one core)", wall.Round(time.Millisecond), c1-c0, 100*float64(c1-c0)/float64(wall))
}
