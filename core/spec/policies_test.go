package spec

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/core/policydecl"
)

// The spec decodes `policies:` against whatever is declared; core/spec
// links no policy (scheduler/policy declares the real ones, and tests
// them there). Its tests declare one toy policy with a parameter of each
// type, a rule between two of them and a rule on the mode.
var (
	toyRatio  = policydecl.Param{Name: "ratio", Type: policydecl.Float, Default: 1.5, Min: 1, MinOpen: true, Max: math.Inf(1), Source: "toy §1"}
	toyWindow = policydecl.Param{Name: "window", Type: policydecl.Duration, Default: 5, Min: 0, MinOpen: true, Max: math.Inf(1), Source: "toy §2"}
	toyCount  = policydecl.Param{Name: "count", Type: policydecl.Int, Default: 1, Min: 1, Max: math.Inf(1), Source: "toy §3"}
	toyLimit  = policydecl.Param{Name: "limit", Type: policydecl.Int, Default: 0, Min: 1, Max: math.Inf(1), ZeroDefault: true, Source: "toy §4"}
	toyFlag   = policydecl.Param{Name: "flag", Type: policydecl.Bool, Default: 0, Min: 0, Max: 1, Source: "toy §5"}
)

func init() {
	policydecl.Register(policydecl.Policy{Name: "toy", Params: []policydecl.Param{toyRatio, toyWindow, toyCount, toyLimit, toyFlag},
		Rules: func(v policydecl.Values, c policydecl.Context) []policydecl.Violation {
			var out []policydecl.Violation
			if l := v.Int(toyLimit); l != 0 && l < v.Int(toyCount) {
				out = append(out, policydecl.Violation{Param: "limit", Msg: fmt.Sprintf("must be at least count (%d), not %d", v.Int(toyCount), l)})
			}
			if c.Workers > 0 && v.Int(toyCount) > c.Workers {
				out = append(out, policydecl.Violation{Param: "count", Msg: fmt.Sprintf("must be at most the %d workers", c.Workers)})
			}
			if c.Mode == ModeAuto && c.Exchange != "" && c.Exchange != ExchangePS {
				out = append(out, policydecl.Violation{Param: "mode", Msg: "needs exchange ps (exchange is " + c.Exchange + ")"})
			}
			return out
		}})
}

// toyDefaults is the toy policy as a spec that leaves it out has it.
func toyDefaults() Policies {
	return Policies{"toy": {Mode: ModeOff, Params: policydecl.Values{"ratio": 1.5, "window_s": 5, "count": 1, "limit": 0, "flag": 0}}}
}

func TestPoliciesDecoded(t *testing.T) {
	s, err := Parse("spec.yaml", []byte("name: x\ncluster: {workers: 3}\npolicies:\n  toy: {mode: approve, ratio: 1.25, window: 1m30s, count: 2, limit: 4, flag: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := policydecl.Values{"ratio": 1.25, "window_s": 90, "count": 2, "limit": 4, "flag": 1}
	got := s.Policies["toy"]
	if got.Mode != ModeApprove || fmt.Sprint(got.Params) != fmt.Sprint(want) {
		t.Errorf("toy = %+v; want approve %v", got, want)
	}
	if got.Params.Duration(toyWindow).Seconds() != 90 || !got.Params.Bool(toyFlag) || got.Params.Int(toyCount) != 2 {
		t.Errorf("typed accessors read %v", got.Params)
	}
	again, err := Parse("again.yaml", s.YAML())
	if err != nil {
		t.Fatalf("the canonical form does not parse: %v\n%s", err, s.YAML())
	}
	if fmt.Sprint(again.Policies) != fmt.Sprint(s.Policies) {
		t.Errorf("round trip: %v; want %v", again.Policies, s.Policies)
	}
	if !strings.Contains(string(s.YAML()), "  toy: {mode: approve, ratio: 1.25, window: 1m30s, count: 2, limit: 4, flag: true}\n") {
		t.Errorf("YAML() writes the toy policy as\n%s", s.YAML())
	}
}

// TestPolicyErrors: every error names the key and its line.
func TestPolicyErrors(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"unknown policy", "name: x\npolicies:\n  toi: {mode: auto}\n", `spec.yaml:3: policies.toi: unknown key (did you mean "toy"?)`},
		{"unknown parameter", "name: x\npolicies:\n  toy: {ratios: 2}\n", `spec.yaml:3: policies.toy.ratios: unknown key (did you mean "ratio"?)`},
		{"mode", "name: x\npolicies:\n  toy: {mode: on}\n", `spec.yaml:3: policies.toy.mode: must be one of auto, approve, off (got "on")`},
		{"float bound", "name: x\npolicies:\n  toy:\n    ratio: 1\n", "spec.yaml:4: policies.toy.ratio: must be > 1, not 1 (toy §1)"},
		{"duration type", "name: x\npolicies: {toy: {window: 5}}\n", "spec.yaml:2: policies.toy.window: want a duration"},
		{"duration bound", "name: x\npolicies: {toy: {window: -2s}}\n", "spec.yaml:2: policies.toy.window: must be > 0 seconds, not -2 (toy §2)"},
		{"int type", "name: x\npolicies: {toy: {count: 1.5}}\n", "spec.yaml:2: policies.toy.count: want an integer"},
		{"bool type", "name: x\npolicies: {toy: {flag: 1}}\n", "spec.yaml:2: policies.toy.flag: want true or false, got 1"},
		{"rule between parameters", "name: x\npolicies:\n  toy:\n    count: 3\n    limit: 2\n", "spec.yaml:5: policies.toy.limit: must be at least count (3), not 2"},
		{"rule on the workers", "name: x\ncluster: {workers: 2}\npolicies: {toy: {mode: approve, count: 3}}\n", "spec.yaml:3: policies.toy.count: must be at most the 2 workers"},
		{"rule on the mode", "name: x\ncluster: {exchange: ring}\npolicies: {toy: {mode: auto}}\n", "spec.yaml:3: policies.toy.mode: needs exchange ps (exchange is ring)"},
	} {
		_, err := Parse("spec.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Parse = %v; want an error containing %q", c.name, err, c.want)
		}
	}
	// A rule on the workers binds a policy that runs.
	if _, err := Parse("spec.yaml", []byte("name: x\ncluster: {workers: 2}\npolicies: {toy: {count: 3}}\n")); err != nil {
		t.Errorf("count 3 with the toy off: %v", err)
	}
}
