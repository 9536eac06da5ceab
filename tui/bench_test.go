package tui

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// bigApp is the console at 200×60 on the job view of a 1,000-worker job, in TrueColor.
func bigApp(tb testing.TB) *App {
	m := testApp(&fakeBackend{}, false)
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	for _, msg := range feed("operator", nil, summaryJobs()) {
		m.Update(msg)
	}
	m.run("job mnist-mlp")
	m.Update(client.SnapshotMsg{Scope: []string{"mnist-mlp"}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{bigJob(1000)}}})
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

// countingModel counts the frames a program asks its model for, and how
// many of them differ from the one before.
type countingModel struct {
	tea.Model
	mu            sync.Mutex
	views, change int
	last          string
}

func (c *countingModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	m, cmd := c.Model.Update(msg)
	c.Model = m
	return c, cmd
}

func (c *countingModel) View() string {
	v := c.Model.View()
	c.mu.Lock()
	c.views++
	if v != c.last {
		c.change++
		c.last = v
	}
	c.mu.Unlock()
	return v
}

func (c *countingModel) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.views, c.change
}

// TestIdleCPU runs the real program (renderer, FPS cap) on the 1,000-node
// job view, first idle (no new data) and then busy (a resize every 10 ms,
// each a full re-layout), for the same time each. Idle, it must draw no
// new frame and use well under half the CPU of the busy phase, both
// measured in this run: no absolute threshold on a shared machine.
func TestIdleCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the program for 4 s")
	}
	lipgloss.SetColorProfile(termenv.TrueColor)
	defer lipgloss.SetColorProfile(termenv.Ascii)
	m := bigApp(t)
	_ = m.c.setTheme(m.c.theme)
	cm := &countingModel{Model: m}
	in, inW := io.Pipe() // no keys: the program waits on input that never comes
	defer inW.Close()
	p := tea.NewProgram(cm, tea.WithInput(in), tea.WithOutput(io.Discard), tea.WithFPS(FPS), tea.WithoutSignals())
	done := make(chan error, 1)
	go func() { _, err := p.Run(); done <- err }()
	p.Send(tea.WindowSizeMsg{Width: 200, Height: 60})
	time.Sleep(time.Second) // let the first frames settle
	const phase = 2 * time.Second
	measure := func(during func(stop <-chan struct{})) (cpu time.Duration, views, changed int) {
		c0, err := cpuTime()
		if err != nil {
			t.Skip(err)
		}
		v0, ch0 := cm.counts()
		stop := make(chan struct{})
		finished := make(chan struct{})
		go func() { defer close(finished); during(stop) }()
		time.Sleep(phase)
		close(stop)
		<-finished
		c1, _ := cpuTime()
		v1, ch1 := cm.counts()
		return c1 - c0, v1 - v0, ch1 - ch0
	}
	idleCPU, idleViews, idleChanged := measure(func(stop <-chan struct{}) { <-stop })
	busyCPU, busyViews, busyChanged := measure(func(stop <-chan struct{}) {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				p.Send(tea.WindowSizeMsg{Width: 200 - i%2, Height: 60})
			}
		}
	})
	p.Quit()
	<-done
	t.Logf("idle %v: CPU %v, %d views, %d new frames; busy: CPU %v, %d views, %d new frames",
		phase, idleCPU, idleViews, idleChanged, busyCPU, busyViews, busyChanged)
	if busyChanged == 0 {
		t.Fatal("the busy phase drew no new frame: the comparison means nothing")
	}
	if idleChanged > 0 {
		t.Errorf("%d new frames drawn while nothing changed", idleChanged)
	}
	if idleCPU*2 >= busyCPU {
		t.Errorf("idle CPU %v is not well under the busy phase's %v", idleCPU, busyCPU)
	}
}
