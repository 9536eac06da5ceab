package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

const gateSpec = `
name: gated
model: {kind: softmax}
data: {kind: mnist, epochs: 6, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 1, workers: 4}
policies:
  antdt-nd: {mode: approve, lambda: 1.5, window_transient: 1s, window_persistent: 3s}
stragglers:
  - {node: worker-2, kind: compute, sleep: 8ms, intensity: 1, start: 0s}
`

// TestApprovalGate: in approve mode a proposal waits and nothing is
// applied; a rejected action never applies; switched to auto live, the next
// proposal is applied without a human; every decision is audited.
func TestApprovalGate(t *testing.T) {
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Tokens: writeTokens(t),
		Exe: kelpieBin, NodeLog: logWriter{t}, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	c, err := client.Dial(ctx, d.HTTPAddr(), "op-token", client.WithSubscription([]string{"gated"}, 10, 10), client.WithHandler(w.handle))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	send := func(cmd *consolepb.Command) {
		t.Helper()
		r, err := c.Send(ctx, cmd)
		if err != nil || !r.Ok {
			t.Fatalf("%v: %v %v", cmd, r, err)
		}
	}
	send(&consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: gateSpec}}})
	_ = c.Subscribe(ctx, []string{"gated"})

	states := func(j *consolepb.JobView) map[string]string {
		out := map[string]string{}
		for _, a := range j.Actions {
			out[a.Id] = a.State
		}
		return out
	}
	j := w.until(t, "a proposal", 90*time.Second, func(j *consolepb.JobView) bool {
		for _, a := range j.Actions {
			if a.State == "proposed" {
				return true
			}
		}
		return false
	})
	var first *consolepb.Action
	for _, a := range j.Actions {
		if a.State == "proposed" {
			first = a
			break
		}
	}
	// Several policy ticks later nothing has been applied.
	ticks := 0
	w.until(t, "ten more views", 30*time.Second, func(j *consolepb.JobView) bool { ticks++; return ticks > 10 })
	for id, s := range states(w.latest()) {
		if s != "proposed" && s != "expired" {
			t.Errorf("in approve mode action %s is %s", id, s)
		}
	}
	send(&consolepb.Command{Kind: &consolepb.Command_Reject{Reject: &consolepb.DecideAction{Job: "gated", ActionId: first.Id, Reason: "not now"}}})
	w.until(t, "the rejection", 30*time.Second, func(j *consolepb.JobView) bool { return states(j)[first.Id] == "rejected" })

	// Switch to auto, live: the next proposal goes out without a human.
	send(&consolepb.Command{Kind: &consolepb.Command_SetPolicy{SetPolicy: &consolepb.SetPolicy{Job: "gated", Policy: "antdt-nd", Mode: "auto"}}})
	j = w.until(t, "an action applied in auto mode", 90*time.Second, func(j *consolepb.JobView) bool {
		for _, a := range j.Actions {
			if a.State == "applied" && a.DecidedBy == "policy:antdt-nd" {
				return true
			}
		}
		return false
	})
	if s := states(j)[first.Id]; s != "rejected" {
		t.Errorf("the rejected action %s is now %s", first.Id, s)
	}
	// Off: no new proposals.
	send(&consolepb.Command{Kind: &consolepb.Command_SetPolicy{SetPolicy: &consolepb.SetPolicy{Job: "gated", Policy: "antdt-nd", Mode: "off"}}})
	n := len(w.latest().Actions)
	ticks = 0
	w.until(t, "ten more views", 30*time.Second, func(j *consolepb.JobView) bool { ticks++; return ticks > 10 || j.State != "running" })
	if got := len(w.latest().Actions); got != n {
		t.Errorf("policy off, yet %d new actions", got-n)
	}
	audit, _ := d.store.ListAudit(time.Time{}, 100)
	decisions := 0
	for _, e := range audit {
		if e.Who == "alice" && e.Allowed {
			decisions++
		}
	}
	if decisions < 4 { // submit, reject, auto, off
		t.Errorf("%d of alice's commands audited; want 4", decisions)
	}
	send(&consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: "gated"}}})
}
