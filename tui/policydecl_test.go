package tui

import (
	"math"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// ndDecl is AntDT-ND as a scheduler declares it in its Welcome.
func ndDecl() *consolepb.PolicyDecl {
	return &consolepb.PolicyDecl{Name: "antdt-nd", Params: []*consolepb.PolicyParam{
		{Key: "lambda", SpecKey: "lambda", Type: "float", Default: 1.5, Min: 1, MinOpen: true, Max: math.Inf(1), Range: "> 1", Source: "AntDT §VI-A 3"},
		{Key: "window_transient_s", SpecKey: "window_transient", Type: "duration", Default: 5, Min: 0, MinOpen: true, Max: math.Inf(1), Range: "> 0 seconds"},
		{Key: "window_persistent_s", SpecKey: "window_persistent", Type: "duration", Default: 20, Min: 0, MinOpen: true, Max: math.Inf(1), Range: "> 0 seconds"},
	}}
}

// TestPolicyFormReadsDeclarations: with the scheduler's declarations the
// policy form hints each parameter's type, bound and default, and refuses
// a value outside the bound before sending anything.
func TestPolicyFormReadsDeclarations(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 160, 48)
	tm.Send(client.WelcomeMsg{Welcome: &consolepb.Welcome{ApiVersion: "kelpie.v1", User: "alice", Role: "operator",
		Policies: []*consolepb.PolicyDecl{ndDecl()}}})
	openJob(t, tm, mnistJob())
	press(tm, "P", "e", "tab") // the focused field shows its hint
	waitText(t, tm, "float > 1, default 1.5")
	press(tm, "tab")
	waitText(t, tm, "duration > 0 seconds, default 20")
	press(tm, "shift+tab", "ctrl+u", "0.2", "enter")
	waitText(t, tm, "lambda must be > 1, not 0.2")
	if n := len(b.sent()); n != 0 {
		t.Fatalf("a value outside the declared bound sent %d commands", n)
	}
	press(tm, "ctrl+u", "1.6", "enter")
	got := waitSent(t, tm, b, 1, "set antdt-nd on mnist-mlp: done")
	if l := got[0].GetSetPolicy().GetParams()["lambda"]; l != 1.6 {
		t.Errorf("sent lambda %v", l)
	}
	final2(t, tm)
}
