package role

import (
	"slices"
	"testing"

	"github.com/kelpie/kelpie/proto/agentpb"
)

// TestWorkerCommand: an agent's command becomes what the worker loop
// applies: sizes by index (an added worker's index past the spec's
// workers), micro-batch × accumulation, the leave flag only for the worker
// being removed, a learning-rate factor only for its target.
func TestWorkerCommand(t *testing.T) {
	split := map[string]int32{"worker-0": 32, "worker-1": 16, "worker-3": 8}
	for _, tt := range []struct {
		name         string
		cmd          *agentpb.ActionCommand
		me           string
		local, accum []int
		leave        bool
		lr           float64
		wantErr      bool
	}{
		{"adjust-bs with an added worker", &agentpb.ActionCommand{Kind: "ADJUST_BS", BatchSizes: split, TargetIteration: 9},
			"worker-1", []int{32, 16, 0, 8}, []int{1, 1, 1, 1}, false, 0, false},
		{"accumulation multiplies the samples per iteration", &agentpb.ActionCommand{Kind: "ADJUST_BS",
			BatchSizes: map[string]int32{"worker-0": 8, "worker-1": 16}, Accumulation: map[string]int32{"worker-0": 4}},
			"worker-0", []int{32, 16}, []int{4, 1}, false, 0, false},
		{"remove-worker: the target leaves", &agentpb.ActionCommand{Kind: "REMOVE_WORKER", Target: "worker-2", BatchSizes: split},
			"worker-2", []int{32, 16, 0, 8}, []int{1, 1, 1, 1}, true, 0, false},
		{"remove-worker: the others re-split", &agentpb.ActionCommand{Kind: "REMOVE_WORKER", Target: "worker-2", BatchSizes: split},
			"worker-0", []int{32, 16, 0, 8}, []int{1, 1, 1, 1}, false, 0, false},
		{"adjust-lr", &agentpb.ActionCommand{Kind: "ADJUST_LR", Target: "worker-1", LrScale: map[string]float64{"worker-1": 0.5}},
			"worker-1", nil, nil, false, 0.5, false},
		{"adjust-lr for someone else", &agentpb.ActionCommand{Kind: "ADJUST_LR", LrScale: map[string]float64{"worker-1": 0.5}},
			"worker-0", nil, nil, false, 0, true},
		{"a name that is not a worker", &agentpb.ActionCommand{Kind: "ADJUST_BS", BatchSizes: map[string]int32{"server-0": 8}},
			"worker-0", nil, nil, false, 0, true},
		{"no sizes", &agentpb.ActionCommand{Kind: "ADD_WORKER"}, "worker-0", nil, nil, false, 0, true},
		{"a server's action", &agentpb.ActionCommand{Kind: "SET_SYNC"}, "worker-0", nil, nil, false, 0, true},
	} {
		got, err := workerCommand(tt.cmd, tt.me)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: workerCommand error = %v; want error %v", tt.name, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		if !slices.Equal(got.Local, tt.local) || !slices.Equal(got.Accum, tt.accum) || got.Leave != tt.leave || got.LRScale != tt.lr {
			t.Errorf("%s: workerCommand = local %v accum %v leave %v lr %g; want %v %v %v %g", tt.name,
				got.Local, got.Accum, got.Leave, got.LRScale, tt.local, tt.accum, tt.leave, tt.lr)
		}
		if got.At != tt.cmd.TargetIteration {
			t.Errorf("%s: At = %d; want %d", tt.name, got.At, tt.cmd.TargetIteration)
		}
	}
}
