package tui

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/exp/golden"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/muesli/termenv"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

func TestMain(m *testing.M) {
	lipgloss.SetColorProfile(termenv.Ascii)
	os.Exit(m.Run())
}

var sizes = [][2]int{{80, 24}, {160, 48}, {200, 60}, {220, 60}}

// run starts the console at a terminal size, connected as role, showing every job.
func run(t *testing.T, b Backend, role string, readOnly bool, w, h int) *teatest.TestModel {
	t.Helper()
	tm := teatest.NewTestModel(t, testApp(b, readOnly), teatest.WithInitialTermSize(w, h))
	for _, msg := range feed(role, nil, summaryJobs()) {
		tm.Send(msg)
	}
	waitText(t, tm, "mnist-softmax")
	return tm
}

// waitText waits until the screen shows every one of texts.
func waitText(t *testing.T, tm *teatest.TestModel, texts ...string) {
	t.Helper()
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
		for _, s := range texts {
			if !bytes.Contains(b, []byte(s)) {
				return false
			}
		}
		return true
	}, teatest.WithDuration(5*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
}

func press(tm *teatest.TestModel, ks ...string) {
	for _, k := range ks {
		switch k {
		case "enter":
			tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
		case "esc":
			tm.Send(tea.KeyMsg{Type: tea.KeyEsc})
		case "tab":
			tm.Send(tea.KeyMsg{Type: tea.KeyTab})
		case "ctrl+u":
			tm.Send(tea.KeyMsg{Type: tea.KeyCtrlU})
		case "ctrl+c":
			tm.Send(tea.KeyMsg{Type: tea.KeyCtrlC})
		default:
			tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)})
		}
	}
}

// openJob opens mnist-mlp with :job and delivers its full view, as the client would after the
// narrower subscription.
func openJob(t *testing.T, tm *teatest.TestModel, job *consolepb.JobView) {
	t.Helper()
	press(tm, ":", "job "+job.GetName(), "enter")
	tm.Send(client.SnapshotMsg{Scope: []string{job.GetName()}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{job}}})
	waitText(t, tm, "straggler heatmap", "worker-3 ")
}

// final quits and compares the last frame with the golden file.
func final(t *testing.T, tm *teatest.TestModel) *App {
	t.Helper()
	if err := tm.Quit(); err != nil {
		t.Fatal(err)
	}
	m := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App)
	m.dirty = true
	golden.RequireEqual(t, []byte(m.View()))
	return m
}

// Every view at 80×24, 160×48 and 220×60, against golden files (go test ./tui -update rewrites them).
func TestViews(t *testing.T) {
	scenarios := []struct {
		name string
		role string
		ro   bool
		do   func(t *testing.T, tm *teatest.TestModel)
	}{
		{"jobs", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			press(tm, "j")
			waitText(t, tm, "job       mnist-mlp")
		}},
		{"job", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			openJob(t, tm, mnistJob())
			press(tm, "s") // sort by ratio: the straggler first
			waitText(t, tm, "sort ratio")
		}},
		{"job_hung", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			openJob(t, tm, hungJob()) // the frame it waits for shows the hang and the ledger
		}},
		{"job_charts", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			openJob(t, tm, mnistJob())
			press(tm, "tab", "tab", "z") // focus the charts, maximise them
			waitText(t, tm, "speed per server")
		}},
		{"job_allreduce", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			tm.Send(client.SnapshotMsg{Snapshot: &consolepb.Snapshot{Jobs: append(summaryJobs(), ratJob())}})
			waitText(t, tm, "mnist-rat")
			openJob(t, tm, ratJob())
			press(tm, "tab", "tab", "tab", "z") // focus the topology panel, maximise it
			waitText(t, tm, "AGGREGATOR")
		}},
		{"actions", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			openJob(t, tm, mnistJob())
			press(tm, "A")
			waitText(t, tm, "1 pending, 2 in all")
		}},
		{"actions_readonly", "viewer", false, func(t *testing.T, tm *teatest.TestModel) {
			openJob(t, tm, mnistJob())
			press(tm, "A")
			waitText(t, tm, "read-only")
		}},
		{"policies", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			openJob(t, tm, mnistJob())
			press(tm, "P")
			waitText(t, tm, "what the modes mean")
		}},
		{"events", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			press(tm, "E")
			waitText(t, tm, "events and audit log (6)")
		}},
		{"launch", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			press(tm, "L", "enter") // submit with an empty name
			waitText(t, tm, "a name is required")
		}},
		{"help", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			openJob(t, tm, mnistJob())
			press(tm, "?")
			waitText(t, tm, "everywhere", "probe node") // at 80×24 the command-mode notes are below the fold
		}},
		{"batch_form", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			openJob(t, tm, mnistJob())
			press(tm, "A", "b", "ctrl+u", "worker-0=100 worker-1=100 worker-2=16 worker-3=80", "enter")
			waitText(t, tm, "sum to 296")
		}},
		{"disconnected", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			tm.Send(client.StatusMsg{State: client.Disconnected, Addr: "127.0.0.1:7080", Attempt: 3,
				Err: errors.New("dial: connection refused"), RetryIn: 4 * time.Second, RetryAt: t0.Add(4 * time.Second)})
			waitText(t, tm, "retrying in 4s")
		}},
		{"quit", "operator", false, func(t *testing.T, tm *teatest.TestModel) {
			press(tm, "q")
			waitText(t, tm, "Quit the kelpie console?")
		}},
	}
	for _, sc := range scenarios {
		for _, sz := range sizes {
			t.Run(fmt.Sprintf("%s_%dx%d", sc.name, sz[0], sz[1]), func(t *testing.T) {
				tm := run(t, &fakeBackend{}, sc.role, sc.ro, sz[0], sz[1])
				sc.do(t, tm)
				m := final(t, tm)
				if m.w != sz[0] || m.h != sz[1] {
					t.Errorf("final size %dx%d; want %dx%d", m.w, m.h, sz[0], sz[1])
				}
				for i, l := range strings.Split(m.View(), "\n") {
					if w := lipgloss.Width(l); w > sz[0] {
						t.Errorf("line %d is %d wide; the terminal is %d", i, w, sz[0])
					}
				}
				if n := strings.Count(m.View(), "\n") + 1; n != sz[1] {
					t.Errorf("the frame has %d lines; want %d", n, sz[1])
				}
			})
		}
	}
}

// A 1,000-node job: the heatmap folds nodes by max and names the straggler.
func TestView1000Nodes(t *testing.T) {
	tm := run(t, &fakeBackend{}, "operator", false, 200, 60)
	openBig := bigJob(1000)
	press(tm, ":", "job mnist-mlp", "enter")
	tm.Send(client.SnapshotMsg{Scope: []string{"mnist-mlp"}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{openBig}}})
	waitText(t, tm, "nodes (1002)")
	m := final(t, tm)
	if !strings.Contains(m.View(), "worker-637 +") {
		t.Errorf("the heatmap does not name worker-637 among 1,000 nodes")
	}
}
