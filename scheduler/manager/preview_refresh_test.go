package manager

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/gate"
)

// TestPreviewRefreshedWhileWaiting: a restart of worker-2 proposed in
// approve mode gets its preview (the machine's capacity: the nodes
// running on it); worker-3 then finishes while the action waits, and the
// scheduler's tick computes the preview again, with one node fewer
// running.
func TestPreviewRefreshedWhileWaiting(t *testing.T) {
	clk := &testClock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	m, j, report := historyJob(t, filepath.Join(t.TempDir(), "kelpie.db"), clk)
	report(map[string]float64{"worker-0": 0.002, "worker-1": 0.002, "worker-2": 0.002, "worker-3": 0.002})
	a := &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-2", Policy: "antdt-nd", Reason: "test"}
	var sends sendList
	var err error
	j.onActor(func() { sends, err = m.addLocked(j, a, "", gate.ModeApprove, "policy:antdt-nd") })
	if err != nil {
		t.Fatal(err)
	}
	sends.run()
	preview := func(want func(*consolepb.ActionPreview) bool) *consolepb.ActionPreview {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var p *consolepb.ActionPreview
			var state string
			j.onActor(func() { p, state = a.GetPreview(), a.GetState() })
			if state != ActProposed {
				t.Fatalf("the action is %s; want it waiting for approval", state)
			}
			if p != nil && want(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("preview %v never as wanted", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	first := preview(func(p *consolepb.ActionPreview) bool { return true })
	if !strings.Contains(first.GetStart(), "5 nodes running") || first.GetAt() == nil {
		t.Fatalf("first preview %v: want the 5 nodes running, and when it was computed", first)
	}
	// worker-3's agent says its role is done.
	takeOn(m, j, j.nodes["worker-3"], &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{Status: &agentpb.NodeStatus{State: agentpb.NodeState_NODE_STATE_DONE}}}})
	clk.add(PreviewRefresh)
	m.tick()
	again := preview(func(p *consolepb.ActionPreview) bool { return strings.Contains(p.GetStart(), "4 nodes running") })
	if !again.GetAt().AsTime().After(first.GetAt().AsTime()) {
		t.Errorf("refreshed preview computed at %v, the first at %v", again.GetAt().AsTime(), first.GetAt().AsTime())
	}
}
