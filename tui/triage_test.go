package tui

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// triageStacks is a stacks collection of hungJob: worker-3 stopped (its
// role did not answer), the others with their goroutines, long enough to
// scroll.
func triageStacks() []*consolepb.NodeStacks {
	var out []*consolepb.NodeStacks
	for _, n := range []string{"server-0", "server-1", "worker-0", "worker-1", "worker-2", "worker-3"} {
		var b strings.Builder
		fmt.Fprintf(&b, "--- agent %s (pid 41%02d)\n", n, len(out))
		for g := range 3 {
			fmt.Fprintf(&b, "goroutine %d [select]:\nmain.loop(...)\n\t/src/kelpie/agent/agent.go:%d +0x1c4\n\n", g+1, 700+g)
		}
		s := &consolepb.NodeStacks{Node: n, Role: strings.SplitN(n, "-", 2)[0]}
		if n == "worker-3" {
			s.Error = "the role (pid 4177) did not answer within 3.75s (process state: T (stopped))"
		} else {
			fmt.Fprintf(&b, "--- role %s (pid 42%02d)\ngoroutine 7 [chan receive]:\ngithub.com/kelpie/kelpie/runtime/worker.(*Worker).barrier(...)\n\t/src/kelpie/runtime/worker/worker.go:612\n", n, len(out))
		}
		s.Text = b.String()
		out = append(out, s)
	}
	return out
}

// triageProbe is a probe of worker-2 that found its compute slow.
func triageProbe() *consolepb.ProbeResult {
	p := &consolepb.ProbeResult{Job: "mnist-mlp", Node: "worker-2", Verdict: "node", Subject: "worker-2", Cause: "compute", Ratio: 6.2,
		Detail: "worker-2: the node is slow — kernel 6.2× the median of the job's other nodes"}
	for _, n := range []string{"server-0", "server-1", "worker-0", "worker-1", "worker-2", "worker-3"} {
		pn := &consolepb.ProbeNode{Node: n, Role: strings.SplitN(n, "-", 2)[0], KernelS: 0.0011, KernelRatio: 1}
		if n == "worker-2" {
			pn.KernelS, pn.KernelRatio = 0.0068, 6.2
		}
		if pn.Role == "worker" {
			for _, s := range []string{"server-0", "server-1"} {
				pn.Trips = append(pn.Trips, &consolepb.ProbeServerTrip{Server: s, RttS: 0.0009, ServerS: 0.00001, Ratio: 1})
			}
		}
		p.Nodes = append(p.Nodes, pn)
	}
	return p
}

// triageBackend answers stacks and probe commands with the fixtures.
func triageBackend() *fakeBackend {
	return &fakeBackend{answer: func(c *consolepb.Command) *consolepb.CommandResult {
		switch {
		case c.GetStacks() != nil:
			return &consolepb.CommandResult{Ok: true, Job: c.GetStacks().GetJob(), Stacks: triageStacks()}
		case c.GetProbe() != nil:
			return &consolepb.CommandResult{Ok: true, Job: c.GetProbe().GetJob(), Probe: triageProbe()}
		}
		return &consolepb.CommandResult{Ok: true, ActionId: "a-8"}
	}}
}

// TestTriageViews: in a hung job, S collects the stacks of every role and
// shows them in a scrollable view (n jumps to the next node's block, R
// offers to restart the node at the top), W asks for the saved ones, x
// probes the selected node; goldens at 80×24 and 200×60 (go test ./tui
// -update rewrites them).
func TestTriageViews(t *testing.T) {
	for _, sz := range [][2]int{{80, 24}, {200, 60}} {
		t.Run(fmt.Sprintf("stacks_%dx%d", sz[0], sz[1]), func(t *testing.T) {
			b := triageBackend()
			tm := run(t, b, "operator", false, sz[0], sz[1])
			openJob(t, tm, hungJob())
			press(tm, "S")
			waitText(t, tm, "stacks of mnist-mlp", "6 nodes")
			press(tm, "n", "n", "n", "n", "n") // to worker-3's block: the stopped one
			waitText(t, tm, "at worker-3")
			m := final(t, tm)
			checkFrame(t, m, sz)
			if !strings.Contains(m.View(), "T (stopped)") {
				t.Errorf("worker-3's block does not say it is stopped")
			}
			sent := b.sent()
			if len(sent) == 0 || sent[len(sent)-1].GetStacks().GetJob() != "mnist-mlp" || sent[len(sent)-1].GetStacks().GetSaved() {
				t.Errorf("S sent %v; want a stacks collection of mnist-mlp", sent)
			}
		})
		t.Run(fmt.Sprintf("probe_%dx%d", sz[0], sz[1]), func(t *testing.T) {
			b := triageBackend()
			tm := run(t, b, "operator", false, sz[0], sz[1])
			openJob(t, tm, hungJob())
			press(tm, "j", "j", "j", "j") // the cursor to worker-2 (servers first)
			press(tm, "x")
			waitText(t, tm, "probe of worker-2", "verdict: node")
			m := final(t, tm)
			checkFrame(t, m, sz)
			sent := b.sent()
			if p := sent[len(sent)-1].GetProbe(); p.GetNode() != "worker-2" || p.GetJob() != "mnist-mlp" {
				t.Errorf("x sent %v; want a probe of worker-2", sent[len(sent)-1])
			}
		})
	}
}

// TestTriageRestart: R in the stacks view offers to restart the node
// whose block is at the top, and y sends the restart.
func TestTriageRestart(t *testing.T) {
	b := triageBackend()
	tm := run(t, b, "operator", false, 160, 48)
	openJob(t, tm, hungJob())
	press(tm, "W")
	waitText(t, tm, "saved stacks of mnist-mlp")
	press(tm, "n", "n", "n", "n", "n", "R")
	waitText(t, tm, "Kill and restart worker-3 of mnist-mlp?")
	press(tm, "y")
	waitText(t, tm, "restart worker-3: done")
	if err := tm.Quit(); err != nil {
		t.Fatal(err)
	}
	sent := b.sent()
	if !sent[0].GetStacks().GetSaved() {
		t.Errorf("W sent %v; want the saved stacks", sent[0])
	}
	a := sent[len(sent)-1].GetTrigger().GetAction()
	if a.GetKind() != "KILL_RESTART" || a.GetTarget() != "worker-3" {
		t.Errorf("the restart sent %v; want KILL_RESTART of worker-3", sent[len(sent)-1])
	}
}

// TestTriageReadOnly: a viewer has no stacks or probe keys.
func TestTriageReadOnly(t *testing.T) {
	b := triageBackend()
	tm := run(t, b, "viewer", false, 160, 48)
	openJob(t, tm, hungJob())
	press(tm, "S", "x", "W")
	press(tm, "?")
	waitText(t, tm, "everywhere")
	if err := tm.Quit(); err != nil {
		t.Fatal(err)
	}
	for _, c := range b.sent() {
		if c.GetStacks() != nil || c.GetProbe() != nil {
			t.Errorf("a viewer sent %v", c)
		}
	}
}
