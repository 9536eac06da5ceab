package rollback

import (
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
)

func TestDue(t *testing.T) {
	undo := &consolepb.ActionUndo{BatchSizes: map[string]int32{"worker-0": 32, "worker-1": 32}}
	cut := &timelinepb.Realized{Miss: true, ThroughputBefore: 1000, ThroughputAfter: 800, PredictedThroughput: 1300}
	tests := []struct {
		name string
		a    *consolepb.Action
		want bool
	}{
		{"a batch cut that cost throughput", &consolepb.Action{Id: "a-1", Kind: "ADJUST_BS", Undo: undo, Realized: cut}, true},
		{"a hit", &consolepb.Action{Kind: "ADJUST_BS", Undo: undo, Realized: &timelinepb.Realized{ThroughputBefore: 1000, ThroughputAfter: 1300}}, false},
		{"a miss that gained a little: its prediction did not hold", &consolepb.Action{Kind: "ADJUST_BS", Undo: undo,
			Realized: &timelinepb.Realized{Miss: true, ThroughputBefore: 1000, ThroughputAfter: 1050, PredictedThroughput: 1300}}, true},
		{"not measured yet", &consolepb.Action{Kind: "ADJUST_BS", Undo: undo}, false},
		{"a restart cannot be undone", &consolepb.Action{Kind: "KILL_RESTART", Undo: undo, Realized: cut}, false},
		{"no state before recorded", &consolepb.Action{Kind: "ADJUST_BS", Realized: cut}, false},
		{"a rollback is not rolled back", &consolepb.Action{Kind: "ADJUST_BS", Undo: undo, Realized: cut, RollbackOf: "a-0"}, false},
	}
	for _, tt := range tests {
		if got, why := Due(tt.a); got != tt.want || got && !strings.Contains(why, "missed its prediction") {
			t.Errorf("%s: Due() = %v, %q; want %v", tt.name, got, why, tt.want)
		}
	}
}

func TestOf(t *testing.T) {
	r := &timelinepb.Realized{Miss: true, ThroughputBefore: 1000, ThroughputAfter: 800}
	bs := Of(&consolepb.Action{Id: "a-3", Kind: "ADJUST_BS", Realized: r,
		Undo: &consolepb.ActionUndo{BatchSizes: map[string]int32{"worker-0": 64, "worker-1": 64}}}, "why")
	if bs.RollbackOf != "a-3" || bs.Policy != Policy || bs.BatchSizes["worker-1"] != 64 || bs.Evidence["throughput_before"] != 1000 {
		t.Errorf("Of(ADJUST_BS) = %v", bs)
	}
	lr := Of(&consolepb.Action{Kind: "ADJUST_LR", Realized: r, Undo: &consolepb.ActionUndo{LrScale: map[string]float64{"worker-2": 1}}}, "why")
	if lr.GetAdjustLr().GetLrScale()["worker-2"] != 1 {
		t.Errorf("Of(ADJUST_LR) = %v", lr)
	}
	sync := Of(&consolepb.Action{Kind: "SET_SYNC", Realized: r, Undo: &consolepb.ActionUndo{Sync: &consolepb.SetSyncArgs{Model: "bsp"}}}, "why")
	if sync.GetSetSync().GetModel() != "bsp" || sync.SyncModel != "bsp" {
		t.Errorf("Of(SET_SYNC) = %v", sync)
	}
	re := Of(&consolepb.Action{Kind: "REASSIGN", Realized: r, Undo: &consolepb.ActionUndo{Assignment: []int32{0, 1, 0}}}, "why")
	if len(re.Assignment) != 3 || re.Assignment[1] != 1 {
		t.Errorf("Of(REASSIGN) = %v", re)
	}
}
