package manager

import (
	"strings"
	"testing"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// TestAllreduceRefusesPSActions: an allreduce job takes ADJUST_BS,
// ADJUST_LR and worker changes (its ring or trees are rebuilt), and
// refuses server and table actions with a message that says why; a PS job
// refuses none of them here.
func TestAllreduceRefusesPSActions(t *testing.T) {
	rat, err := spec.Parse("x.yaml", []byte("name: x\ncluster: {exchange: rat, workers: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := spec.Parse("x.yaml", []byte("name: x\ncluster: {workers: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kind policy.Kind
		want string // "" accepted
	}{
		{policy.KindAdjustBS, ""},
		{policy.KindAdjustLR, ""},
		{policy.KindAddServer, "no parameter servers"},
		{policy.KindRemoveServer, "no parameter servers"},
		{policy.KindReassign, "no parameter servers"},
		{policy.KindSetSync, "no parameter servers"},
		{policy.KindBackupWorkers, "no parameter servers"},
		{policy.KindKillRestart, ""},
		{policy.KindAddWorker, ""},
		{policy.KindRemoveWorker, ""},
	} {
		err := allreduceRefuses(rat, string(c.kind))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s refused for rat: %v", c.kind, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s for rat = %v; want an error saying %q", c.kind, err, c.want)
		}
		if err := allreduceRefuses(ps, string(c.kind)); err != nil {
			t.Errorf("%s refused for ps: %v", c.kind, err)
		}
	}
}
