package tui

import (
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// TestRingAndTreeLines: the ring is drawn in its order back to its first
// member, ⇒ where the next member is in another rack; a tree's
// aggregations of one aggregator at several levels read as one addition.
func TestRingAndTreeLines(t *testing.T) {
	ex := &consolepb.ExchangeTopology{Mode: "ring", Racks: []*consolepb.ExchangeRegion{
		{Region: "/r0", Members: []string{"worker-0", "worker-1"}}, {Region: "/r1", Members: []string{"worker-3", "worker-4"}}},
		RingOrder: []string{"worker-0", "worker-1", "worker-3", "worker-4"}}
	if got, want := ringLine(ex), "w0 → w1 ⇒ w3 → w4 ⇒ w0"; got != want {
		t.Errorf("ring %q; want %q", got, want)
	}
	tree := &consolepb.ExchangeTree{Chunk: 2, Root: "worker-3", Aggregations: []*consolepb.ExchangeAggregation{
		{Aggregator: "worker-3", Level: "rack", Members: []string{"worker-4"}},
		{Aggregator: "worker-3", Level: "pod", Members: []string{"worker-0"}},
		{Aggregator: "worker-0", Level: "rack", Members: []string{"worker-1"}}}}
	if got, want := treeLine(tree), "2    w3    w3 ← w4 w0 · w0 ← w1"; got != want {
		t.Errorf("tree %q; want %q", got, want)
	}
	if got, want := treeLine(&consolepb.ExchangeTree{Chunk: 1}), "1    –"; got != want {
		t.Errorf("empty tree %q; want %q", got, want)
	}
}

// TestReplayAllreduceSaysNow: replaying an allreduce job, the exchange
// panel says that what it draws is the job's exchange now (the timeline
// records none), not the replayed moment's.
func TestReplayAllreduceSaysNow(t *testing.T) {
	end, frames, actions := finishedHistory()
	end.Exchange = ratExchange()
	tm := run(t, &fakeBackend{answer: historyAnswer(frames, actions, 7)}, "viewer", false, 200, 60)
	tm.Send(client.SnapshotMsg{Scope: []string{"replayed"}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{end}}})
	waitText(t, tm, "replayed")
	press(tm, ":", "job replayed", "enter")
	waitText(t, tm, "allreduce: topology and trees", "w4 ← w6 w7 w0")
	press(tm, "[")
	waitText(t, tm, "⏸ replay 20s in", "now, at iteration 120: the timeline keeps no exchange")
	if err := tm.Quit(); err != nil {
		t.Fatal(err)
	}
}
