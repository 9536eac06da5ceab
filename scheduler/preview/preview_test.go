package preview

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	tests := []struct {
		name     string
		in       Input
		canStart bool
		start    string // parts of the preview's lines
		cost     string
		shards   int64
		lost     float64
	}{
		{"a worker's restart, locally", Input{Kind: "KILL_RESTART", Target: "worker-2", TargetRole: "worker", CPUs: 2, Running: 6,
			Held: []Held{{AgeSeconds: 3.5}, {AgeSeconds: 1}}}, true, "local: 6 nodes running on 2 CPUs", "2 shard(s) back to the queue, ~3.5 s", 2, 3.5},
		{"an oversubscribed machine", Input{Kind: "ADD_WORKER", CPUs: 2, Running: 8}, false, "oversubscribe", "no shard", 0, 0},
		{"a batch split starts nothing", Input{Kind: "ADJUST_BS", CPUs: 2, Running: 100}, true, "starts nothing", "no shard", 0, 0},
		{"Pods Pending on the cluster", Input{Kind: "KILL_RESTART", Target: "worker-0", TargetRole: "worker",
			Cluster: &Cluster{Pending: []string{"a", "b", "c", "d"}}}, false, "4 Pod(s) Pending now (a, b, c and 1 more)", "0 shard(s)", 0, 0},
		{"a full quota", Input{Kind: "ADD_SERVER", Cluster: &Cluster{Quota: "pods 10/10", Full: true}}, false, "quota full (pods 10/10)", "no shard", 0, 0},
		{"room on the cluster", Input{Kind: "ADD_SERVER", Cluster: &Cluster{Quota: "pods 3/10"}}, true, "quota pods 3/10", "no shard", 0, 0},
		{"a server's restart keeps the shards", Input{Kind: "KILL_RESTART", Target: "server-0", TargetRole: "server", CPUs: 2},
			true, "local", "no shard", 0, 0},
	}
	for _, tt := range tests {
		p := Of(tt.in)
		if p.CanStart != tt.canStart || !strings.Contains(p.Start, tt.start) || !strings.Contains(p.Cost, tt.cost) ||
			p.ShardsRequeued != tt.shards || p.ProgressLostS != tt.lost {
			t.Errorf("%s: Of() = %v; want can_start %v, start ~%q, cost ~%q, %d shards, %g s lost", tt.name, p, tt.canStart, tt.start, tt.cost, tt.shards, tt.lost)
		}
	}
	p := Of(Input{Kind: "ADJUST_BS", Predicted: "worker-2 keeps up", PredictedThroughput: 1200, Rate: 1000})
	if want := "worker-2 keeps up (1000 → 1200 samples/s, +20 %)"; p.Predicted != want {
		t.Errorf("Of().Predicted = %q; want %q", p.Predicted, want)
	}
}
