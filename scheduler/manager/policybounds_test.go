package manager

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/scheduler/policy"
)

// TestSetPolicyBounds: a live edit outside the paper's bounds is refused
// with the bound and its source, and leaves the settings as they were; one
// within them is taken.
func TestSetPolicyBounds(t *testing.T) {
	m, j := testJob(t, Config{}, "bounds", 3, 1)
	for _, c := range []struct {
		policy string
		params map[string]float64
		want   string
	}{
		{policy.NameAntDTND, map[string]float64{"lambda": 0.2}, "lambda must be > 1, not 0.2 (AntDT §VI-A 3"},
		{policy.NameAntDTND, map[string]float64{"lambda": 1}, "lambda must be > 1, not 1"},
		{policy.NameAntDTND, map[string]float64{"window_persistent_s": 2}, "window_persistent_s must be at least window_transient_s (5), not 2"},
		{policy.NameAntDTDD, map[string]float64{"min_accumulation": 0}, "min_accumulation must be a whole number ≥ 1"},
		{policy.NameAntDTDD, map[string]float64{"max_batch": 2.5}, "max_batch must be a whole number ≥ 1 (or 0 for the default), not 2.5"},
		{policy.NameBackupWorkers, map[string]float64{"drop": 3}, "drop must be less than the job's 3 workers"},
		{policy.NamePSLD, map[string]float64{"epsilon": 1.5}, "epsilon must be in [0, 1], not 1.5 (PSLD"},
		{policy.NamePSLD, map[string]float64{"strawman": 0.5}, "strawman must be 0 or 1"},
	} {
		err := m.SetPolicy("bounds", c.policy, "", c.params, "test")
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetPolicy(%s, %v) = %v; want InvalidArgument with %q", c.policy, c.params, err, c.want)
		}
	}
	if l := j.policies[policy.NameAntDTND].Params["lambda"]; l != 1.5 {
		t.Errorf("after refused edits λ is %v; want 1.5 as before", l)
	}
	if err := m.SetPolicy("bounds", policy.NameAntDTND, "", map[string]float64{"lambda": 1.3}, "test"); err != nil {
		t.Fatalf("λ 1.3: %v", err)
	}
	if l := j.policies[policy.NameAntDTND].Params["lambda"]; l != 1.3 {
		t.Errorf("λ is %v after setting 1.3", l)
	}
}
