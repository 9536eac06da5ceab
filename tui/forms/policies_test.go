package forms

import (
	"math"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
)

func testCatalog() Catalog {
	return Catalog{
		{Name: "antdt-nd", Params: []*consolepb.PolicyParam{
			{Key: "lambda", SpecKey: "lambda", Type: "float", Default: 1.5, Min: 1, MinOpen: true, Max: math.Inf(1), Range: "> 1"},
			{Key: "window_transient_s", SpecKey: "window_transient", Type: "duration", Default: 5, Min: 0, MinOpen: true, Max: math.Inf(1), Range: "> 0 seconds"},
		}},
		{Name: "toy", Params: []*consolepb.PolicyParam{
			{Key: "count", SpecKey: "count", Type: "int", Default: 1, Min: 1, Max: math.Inf(1), Range: "a whole number ≥ 1"},
			{Key: "flag", SpecKey: "flag", Type: "bool", Max: 1, Range: "0 or 1"},
		}},
	}
}

// TestLaunchPolicyParams: the launch form's policies field takes the
// declared policies (a policy no built-in list knows included) and their
// parameters, checks them against the declarations, and writes them into
// the spec with the spec's keys and units.
func TestLaunchPolicyParams(t *testing.T) {
	cat := testCatalog()
	v := map[string]string{FieldName: "x", FieldModel: "mlp", FieldData: "mnist", FieldServers: "1", FieldWorkers: "2",
		FieldBatch: "64", FieldSync: "bsp", FieldPolicies: "antdt-nd=approve antdt-nd.window_transient=2.5 toy.count=3 toy.flag=1"}
	l, errs := ParseLaunchWith(v, cat)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	y := l.YAML()
	for _, want := range []string{"policies:\n", "  antdt-nd: {mode: approve, window_transient: 2.5s}\n", "  toy: {count: 3, flag: true}\n"} {
		if !strings.Contains(y, want) {
			t.Errorf("YAML() =\n%s\nwant %q", y, want)
		}
	}
	for text, want := range map[string]string{
		"antdt-nd.lambda=1":   "antdt-nd: lambda must be > 1, not 1",
		"toy.count=1.5":       "toy: count must be a whole number ≥ 1, not 1.5",
		"toy.flag=2":          "toy: flag must be 0 or 1, not 2",
		"toy.speed=2":         "toy has no parameter speed (have count, flag)",
		"psld=auto":           "unknown policy psld (have antdt-nd, toy)",
		"toy=sometimes":       `toy: mode "sometimes" is not one of auto, approve, off`,
		"antdt-nd.lambda=abc": `lambda must be a number, not "abc"`,
	} {
		v[FieldPolicies] = text
		if _, errs := ParseLaunchWith(v, cat); !strings.Contains(errs[FieldPolicies], want) {
			t.Errorf("%q: errors %v; want %q", text, errs, want)
		}
	}
	// Without declarations (an older scheduler): the built-in names, modes only.
	v[FieldPolicies] = "psld=auto"
	if l, errs := ParseLaunch(v); len(errs) > 0 || !strings.Contains(l.YAML(), "  psld: {mode: auto}\n") {
		t.Errorf("fallback: %v %q", errs, l.YAML())
	}
	v[FieldPolicies] = "psld.epsilon=0.1"
	if _, errs := ParseLaunch(v); !strings.Contains(errs[FieldPolicies], "has not declared psld's parameters") {
		t.Errorf("fallback with a parameter: %v", errs)
	}
}
