package manager

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// TestEveryKindDefined: every ActionKind has one definition, able to
// validate and dispatch, and its console name is the policies' name.
func TestEveryKindDefined(t *testing.T) {
	policyKinds := map[string]bool{}
	for _, k := range []policy.Kind{policy.KindAdjustBS, policy.KindKillRestart, policy.KindBackupWorkers, policy.KindAdjustLR,
		policy.KindReassign, policy.KindAddServer, policy.KindRemoveServer, policy.KindAddWorker, policy.KindRemoveWorker, policy.KindSetSync} {
		policyKinds[string(k)] = true
	}
	for v := range consolepb.ActionKind_name {
		k := consolepb.ActionKind(v)
		if k == consolepb.ActionKind_ACTION_KIND_UNSPECIFIED {
			continue
		}
		name := consolepb.ActionKindName(k)
		d, err := kindOf(name)
		if err != nil {
			t.Errorf("kindOf(%q) = %v; want a definition", name, err)
			continue
		}
		if d.kind != k || d.validate == nil || d.dispatch == nil {
			t.Errorf("definition of %s: kind %v, validate set %v, dispatch set %v", name, d.kind, d.validate != nil, d.dispatch != nil)
		}
		if !policyKinds[name] {
			t.Errorf("%s has no policy.Kind of that name", name)
		}
	}
	if len(kindDefs) != len(policyKinds) {
		t.Errorf("%d definitions for %d kinds", len(kindDefs), len(policyKinds))
	}
	if _, err := kindOf("NONE"); err == nil || !strings.Contains(err.Error(), "ADJUST_BS") {
		t.Errorf("kindOf(NONE) = %v; want an error listing the kinds", err)
	}
}

// TestTypedArgs: the console API's params map converts to the typed
// arguments at the edge; typed arguments are taken as they are and shown
// in the params map as before.
func TestTypedArgs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     *consolepb.Action
		args   proto.Message
		params map[string]float64
		err    string
	}{
		{name: "lr target", in: &consolepb.Action{Kind: "ADJUST_LR", Target: "worker-1", Params: map[string]float64{"lr_scale": 0.5}},
			args:   &consolepb.AdjustLRArgs{LrScale: map[string]float64{"worker-1": 0.5}},
			params: map[string]float64{"lr_scale": 0.5}},
		{name: "lr several", in: &consolepb.Action{Kind: "ADJUST_LR", Params: map[string]float64{"lr_scale/worker-0": 0.5, "lr_scale/worker-2": 2}},
			args:   &consolepb.AdjustLRArgs{LrScale: map[string]float64{"worker-0": 0.5, "worker-2": 2}},
			params: map[string]float64{"lr_scale/worker-0": 0.5, "lr_scale/worker-2": 2}},
		{name: "lr typed", in: &consolepb.Action{Kind: "ADJUST_LR", Args: &consolepb.Action_AdjustLr{AdjustLr: &consolepb.AdjustLRArgs{LrScale: map[string]float64{"worker-3": 0.25}}}},
			args:   &consolepb.AdjustLRArgs{LrScale: map[string]float64{"worker-3": 0.25}},
			params: map[string]float64{"lr_scale/worker-3": 0.25}},
		{name: "backup", in: &consolepb.Action{Kind: "BACKUP_WORKERS", Params: map[string]float64{"drop": 1}},
			args: &consolepb.BackupWorkersArgs{Drop: 1}, params: map[string]float64{"drop": 1}},
		{name: "backup off", in: &consolepb.Action{Kind: "BACKUP_WORKERS"},
			args: &consolepb.BackupWorkersArgs{}, params: map[string]float64{"drop": 0}},
		{name: "backup fraction", in: &consolepb.Action{Kind: "BACKUP_WORKERS", Params: map[string]float64{"drop": 1.5}},
			err: "params.drop must be a whole number"},
		{name: "sync", in: &consolepb.Action{Kind: "SET_SYNC", SyncModel: "ssp", Params: map[string]float64{"staleness": 3, "soft_barrier": 1}},
			args:   &consolepb.SetSyncArgs{Model: "ssp", Staleness: 3, SoftBarrier: true},
			params: map[string]float64{"staleness": 3, "soft_barrier": 1, "pssp_c": 0, "pssp_alpha": 0, "drop_wait_for": 0}},
		{name: "sync typed", in: &consolepb.Action{Kind: "SET_SYNC", Args: &consolepb.Action_SetSync{SetSync: &consolepb.SetSyncArgs{Model: "pssp", Staleness: 2, PsspC: 0.5, PsspDynamic: true}}},
			args:   &consolepb.SetSyncArgs{Model: "pssp", Staleness: 2, PsspC: 0.5, PsspDynamic: true},
			params: map[string]float64{"staleness": 2, "pssp_c": 0.5, "pssp_alpha": 0, "drop_wait_for": 0, "pssp_dynamic": 1}},
		{name: "sync fraction", in: &consolepb.Action{Kind: "SET_SYNC", SyncModel: "ssp", Params: map[string]float64{"staleness": 2.5}},
			err: "params.staleness must be a whole number"},
		{name: "restart", in: &consolepb.Action{Kind: "KILL_RESTART", Target: "worker-1"}},
		{name: "unknown", in: &consolepb.Action{Kind: "SHRINK"}, err: "unknown action kind"},
	} {
		err := typedArgs(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: typedArgs = %v; want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: typedArgs = %v", tc.name, err)
			continue
		}
		var got proto.Message
		switch x := tc.in.Args.(type) {
		case *consolepb.Action_AdjustLr:
			got = x.AdjustLr
		case *consolepb.Action_BackupWorkers:
			got = x.BackupWorkers
		case *consolepb.Action_SetSync:
			got = x.SetSync
		}
		if (got == nil) != (tc.args == nil) || (got != nil && !proto.Equal(got, tc.args)) {
			t.Errorf("%s: args = %v; want %v", tc.name, got, tc.args)
		}
		if tc.params != nil && !equalParams(tc.in.Params, tc.params) {
			t.Errorf("%s: params = %v; want %v", tc.name, tc.in.Params, tc.params)
		}
	}
}

func equalParams(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestTriggerJSON: the console API decodes both forms of a trigger's
// arguments (protojson, as scheduler/console reads frames).
func TestTriggerJSON(t *testing.T) {
	for _, src := range []string{
		`{"kind":"ADJUST_LR","target":"worker-1","params":{"lr_scale":0.5}}`,
		`{"kind":"ADJUST_LR","adjustLr":{"lrScale":{"worker-1":0.5}}}`,
	} {
		var a consolepb.Action
		if err := protojson.Unmarshal([]byte(src), &a); err != nil {
			t.Fatalf("Unmarshal(%s) = %v", src, err)
		}
		if err := typedArgs(&a); err != nil {
			t.Fatalf("typedArgs(%s) = %v", src, err)
		}
		if got := lrScales(&a); len(got) != 1 || got["worker-1"] != 0.5 {
			t.Errorf("%s: lr scales %v; want worker-1: 0.5", src, got)
		}
	}
}

// TestCheckAssignment: a table change's assignment has one entry per
// block, each on an active server, none on the server a REMOVE_SERVER
// takes out.
func TestCheckAssignment(t *testing.T) {
	active := []int{0, 1, 3}
	tests := []struct {
		name       string
		kind       string
		assignment []int32
		leaving    int
		want       string // "" for valid
	}{
		{"reassign", "REASSIGN", []int32{0, 1, 3, 0}, -1, ""},
		{"too few entries", "REASSIGN", []int32{0, 1, 3}, -1, "3 entries for 4 blocks"},
		{"inactive server", "REASSIGN", []int32{0, 2, 3, 0}, -1, "block 1 to server 2, which is not active"},
		{"remove with its blocks moved", "REMOVE_SERVER", []int32{0, 1, 0, 1}, 3, ""},
		{"remove keeping a block", "REMOVE_SERVER", []int32{0, 1, 3, 1}, 3, "block 2 to server 3, which is leaving"},
	}
	for _, tt := range tests {
		err := checkAssignment(tt.kind, tt.assignment, 4, active, tt.leaving)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v; want valid", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.kind+": "+tt.want)):
			t.Errorf("%s: %v; want %q", tt.name, err, tt.want)
		}
	}
}
