package policy

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/core/policydecl"
)

// TestBoundsCoverEveryParam: every declared parameter names its source,
// and each rejects a value just outside its bound and takes one inside
// and its default.
func TestBoundsCoverEveryParam(t *testing.T) {
	for _, p := range All() {
		d := p.Decl()
		for _, b := range d.Params {
			if !strings.Contains(b.Source, "§") && !strings.Contains(b.Source, "Table") && !strings.Contains(b.Source, "Alg.") && !strings.HasPrefix(b.Source, "kelpie") {
				t.Errorf("%s %s: source %q names no section", d.Name, b.Name, b.Source)
			}
			if err := b.Check(b.Default); err != nil {
				t.Errorf("%s %s: its default %v is out of its bound: %v", d.Name, b.Name, b.Default, err)
			}
			in := b.Min
			if b.MinOpen {
				in = b.Min + 0.5
			}
			if err := b.Check(in); err != nil {
				t.Errorf("%s %s: Check(%v) = %v; want nil", d.Name, b.Name, in, err)
			}
			out := b.Min - 1
			if b.ZeroDefault && out == 0 {
				out = -0.5
			}
			if b.MinOpen && !(b.ZeroDefault && b.Min == 0) {
				out = b.Min
			}
			if err := b.Check(out); err == nil {
				t.Errorf("%s %s: Check(%v) = nil; want a refusal (%s)", d.Name, b.Name, out, b.Range())
			}
			if err := b.Check(math.NaN()); err == nil {
				t.Errorf("%s %s: NaN accepted", d.Name, b.Name)
			}
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
		{NameAntDTND, map[string]float64{"window_transient_s": 30, "window_persistent_s": 20}, 4, "window_persistent_s must be at least window_transient_s (30), not 20"},
		{NameAntDTND, map[string]float64{"window_transient_s": 30}, 4, "window_persistent_s must be at least window_transient_s (30), not 20"}, // against the default
		{NameAntDTND, map[string]float64{"window_transient": 3}, 4, "window_transient is not a parameter of antdt-nd (one of lambda, window_transient_s, window_persistent_s)"},
		{NameAntDTDD, map[string]float64{"min_batch": 8, "max_batch": 0}, 4, ""},
		{NameAntDTDD, map[string]float64{"min_batch": 8, "max_batch": 4}, 4, "max_batch must be at least min_batch (8), not 4"},
		{NameAntDTDD, map[string]float64{"min_accumulation": 1.5}, 4, "min_accumulation must be a whole number ≥ 1, not 1.5"},
		{NameBackupWorkers, map[string]float64{"drop": 3}, 4, ""},
		{NameBackupWorkers, map[string]float64{"drop": 4}, 4, "less than the job's 4 workers"},
		{NameBackupWorkers, map[string]float64{"drop": 4}, 0, ""}, // workers unknown
		{NameAdjustLR, map[string]float64{"min_scale": 0}, 4, ""},
		{NameAdjustLR, map[string]float64{"min_scale": 1.5}, 4, "min_scale must be in (0, 1] (or 0 for the default)"},
		{NamePSLD, map[string]float64{"scale_threshold": 1.01}, 4, "scale_threshold must be in [0, 1]"},
		{NamePSLD, map[string]float64{"strawman": 0.5}, 4, "strawman must be 0 or 1"},
		{"nope", nil, 4, "unknown policy nope (one of antdt-nd, antdt-dd, backup-workers, adjust-lr and psld)"},
	} {
		err := CheckParams(c.policy, c.p, c.workers)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckParams(%s, %v, %d) = %v; want %q", c.policy, c.p, c.workers, err, c.want)
		}
	}
}

// TestRegistry: the builtin policies are registered in display order,
// each under its Name constant, and each declaration is the one the job
// spec reads (policydecl).
func TestRegistry(t *testing.T) {
	want := []string{NameAntDTND, NameAntDTDD, NameBackupWorkers, NameAdjustLR, NamePSLD}
	if got := Names(); !slices.Equal(got[:len(want)], want) {
		t.Fatalf("Names() = %v; want %v first", got, want)
	}
	for _, name := range want {
		p, ok := Lookup(name)
		if !ok {
			t.Fatalf("Lookup(%s): not registered", name)
		}
		d, ok := policydecl.Lookup(name)
		if !ok || len(d.Params) != len(p.Decl().Params) {
			t.Errorf("%s: the spec's declaration %+v is not the policy's", name, d)
		}
	}
	if !Explores(mustLookup(t, NamePSLD)) || Explores(mustLookup(t, NameAntDTND)) {
		t.Error("PSLD explores and AntDT-ND does not")
	}
	defer func() {
		if recover() == nil {
			t.Error("registering antdt-nd twice did not panic")
		}
	}()
	Register(antdtNDPolicy{})
}

func mustLookup(t *testing.T, name string) Policy {
	t.Helper()
	p, ok := Lookup(name)
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	return p
}
