package policy

import (
	"math"
	"strings"
	"testing"
)

// TestBoundsCoverEveryParam: every bound names its source, and each
// rejects a value just outside it and takes one inside.
func TestBoundsCoverEveryParam(t *testing.T) {
	for _, b := range Bounds {
		if !strings.Contains(b.Source, "§") && !strings.Contains(b.Source, "Table") && !strings.Contains(b.Source, "Alg.") && !strings.HasPrefix(b.Source, "kelpie") {
			t.Errorf("%s %s: source %q names no section", b.Policy, b.Param, b.Source)
		}
		in := b.Min
		if b.MinOpen {
			in = b.Min + 0.5
		}
		if err := b.Check(in); err != nil {
			t.Errorf("%s %s: Check(%v) = %v; want nil", b.Policy, b.Param, in, err)
		}
		out := b.Min - 1
		if b.ZeroDefault && out == 0 {
			out = -0.5
		}
		if b.MinOpen && !(b.ZeroDefault && b.Min == 0) {
			out = b.Min
		}
		if err := b.Check(out); err == nil {
			t.Errorf("%s %s: Check(%v) = nil; want a refusal (%s)", b.Policy, b.Param, out, b.Range())
		}
		if err := b.Check(math.NaN()); err == nil {
			t.Errorf("%s %s: NaN accepted", b.Policy, b.Param)
		}
	}
}

func TestCheckParams(t *testing.T) {
	for _, c := range []struct {
		policy  string
		p       map[string]float64
		workers int
		want    string // "" for nil
	}{
		{NameAntDTND, map[string]float64{"lambda": 1.5, "window_transient_s": 5, "window_persistent_s": 20}, 4, ""},
		{NameAntDTND, map[string]float64{"lambda": 0.2}, 4, "lambda must be > 1, not 0.2"},
		{NameAntDTND, map[string]float64{"window_transient_s": 30, "window_persistent_s": 20}, 4, "must be at least window_transient_s"},
		{NameAntDTDD, map[string]float64{"min_batch": 8, "max_batch": 0}, 4, ""},
		{NameAntDTDD, map[string]float64{"min_batch": 8, "max_batch": 4}, 4, "max_batch (4) must be at least min_batch (8)"},
		{NameBackupWorkers, map[string]float64{"drop": 3}, 4, ""},
		{NameBackupWorkers, map[string]float64{"drop": 4}, 4, "less than the job's 4 workers"},
		{NamePSLD, map[string]float64{"scale_threshold": 1.01}, 4, "scale_threshold must be in [0, 1]"},
	} {
		err := CheckParams(c.policy, c.p, c.workers)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckParams(%s, %v, %d) = %v; want %q", c.policy, c.p, c.workers, err, c.want)
		}
	}
}
