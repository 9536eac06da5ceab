package tui

import (
	"fmt"
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// causeJob is mnistJob with the causes the scheduler measured: worker-2's
// compute, server-1's link; its proposed batch cut carries a preview and a
// warning that a batch cut does not answer a slow link.
func causeJob() *consolepb.JobView {
	j := proto.CloneOf(mnistJob())
	for _, n := range j.Nodes {
		switch n.Name {
		case "worker-2":
			n.Cause = &consolepb.NodeCause{Kind: "compute", Ratio: 3.1, Detail: "compute 3.1× median", Seconds: 0.5, MedianSeconds: 0.16}
		case "server-1":
			n.Class = "persistent"
			n.Cause = &consolepb.NodeCause{Kind: "link", Ratio: 4, Detail: "link 4.0× median — pull wait on every worker", Seconds: 0.02, MedianSeconds: 0.005}
		}
	}
	a := j.Actions[0]
	a.Cause = "compute"
	a.Reason += " [cause: worker-2: compute 3.1× median]"
	a.Preview = &consolepb.ActionPreview{CanStart: true, Start: "starts nothing", Cost: "no shard goes back to the queue",
		Predicted: "iteration time 0.62s → 0.29s (−53%) (1843 → 3900 samples/s, +112 %)"}
	b := proto.CloneOf(a)
	b.Id, b.Kind, b.Target, b.Cause, b.BatchSizes = "a-8", "KILL_RESTART", "worker-2", "compute", nil
	b.Preview = &consolepb.ActionPreview{CanStart: false, Start: "Kubernetes: 1 Pod(s) Pending now (khog-worker-0): a new Pod would wait too",
		ShardsRequeued: 2, ProgressLostS: 3.4, Cost: "2 shard(s) back to the queue, ~3.4 s of worker-2's progress lost", PendingPods: []string{"khog-worker-0"}}
	c := proto.CloneOf(a)
	c.Id, c.Cause = "a-9", "pull"
	c.Reason = "worker-2 BPT 0.62s ≥ λ·mean (1.5 × 0.26s) over the 5s window [cause: worker-2: pull 4.0× median]"
	c.CauseWarning = "ADJUST_BS does not answer the measured cause: worker-2: pull 4.0× median (ADJUST_BS does not shorten its pulls on the wire)"
	j.Actions = append([]*consolepb.Action{c, b}, j.Actions...)
	return j
}

// TestCauseViews: the heatmap's detail line names the stragglers' causes,
// and the approval view shows an action's preview, its cost and the
// gate's warning, at 80×24 and 200×60 (go test ./tui -update rewrites the
// goldens).
func TestCauseViews(t *testing.T) {
	for _, sz := range [][2]int{{80, 24}, {200, 60}} {
		t.Run(fmt.Sprintf("heatmap_%dx%d", sz[0], sz[1]), func(t *testing.T) {
			tm := run(t, &fakeBackend{}, "operator", false, sz[0], sz[1])
			openJob(t, tm, causeJob())
			press(tm, "tab", "z") // focus the heatmap, maximise it
			waitText(t, tm, "BPT ÷ job mean")
			m := final(t, tm)
			checkFrame(t, m, sz)
			for _, want := range []string{"cause · server-1: link 4.0× median", "cause · worker-2: compute 3.1× median"} {
				if !strings.Contains(m.View(), want) {
					t.Errorf("the heatmap does not show %q", want)
				}
			}
		})
		t.Run(fmt.Sprintf("approval_%dx%d", sz[0], sz[1]), func(t *testing.T) {
			tm := run(t, &fakeBackend{}, "operator", false, sz[0], sz[1])
			openJob(t, tm, causeJob())
			press(tm, "A")
			waitText(t, tm, "preview")
			m := final(t, tm)
			checkFrame(t, m, sz)
			for _, want := range []string{"does not answer the measured cause", "can start"} {
				if !strings.Contains(m.View(), want) {
					t.Errorf("the approval view does not show %q", want)
				}
			}
		})
	}
}

func checkFrame(t *testing.T, m *App, sz [2]int) {
	t.Helper()
	for i, l := range strings.Split(m.View(), "\n") {
		if w := lipgloss.Width(l); w > sz[0] {
			t.Errorf("line %d is %d wide; the terminal is %d", i, w, sz[0])
		}
	}
}
