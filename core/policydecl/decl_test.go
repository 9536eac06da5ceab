package policydecl

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParam(t *testing.T) {
	w := Param{Name: "window", Type: Duration, Default: 5, Min: 0, MinOpen: true, Max: math.Inf(1), Source: "s"}
	n := Param{Name: "n", Type: Int, Default: 0, Min: 2, Max: 8, MaxOpen: true, ZeroDefault: true, Source: "s"}
	f := Param{Name: "f", Type: Bool, Source: "s"}
	if w.Key() != "window_s" || n.Key() != "n" {
		t.Errorf("keys %q %q", w.Key(), n.Key())
	}
	for p, want := range map[*Param]string{&w: "> 0 seconds", &n: "a whole number in [2, 8) (or 0 for the default)", &f: "0 or 1"} {
		if got := p.Range(); got != want {
			t.Errorf("%s.Range() = %q; want %q", p.Name, got, want)
		}
	}
	for _, c := range []struct {
		p  Param
		x  float64
		ok bool
	}{{w, 0, false}, {w, 0.1, true}, {n, 0, true}, {n, 1, false}, {n, 2, true}, {n, 2.5, false}, {n, 8, false}, {f, 1, true}, {f, 0.5, false}, {w, math.NaN(), false}} {
		if err := c.p.Check(c.x); (err == nil) != c.ok {
			t.Errorf("%s.Check(%v) = %v; want ok=%v", c.p.Name, c.x, err, c.ok)
		}
	}
	v := Values{"window_s": 1.5}
	if v.Duration(w) != 1500*time.Millisecond || v.Int(n) != 0 || v.Bool(f) || Values(nil).Float(w) != 5 {
		t.Errorf("accessors on %v", v)
	}
}

func TestPolicyCheck(t *testing.T) {
	lo := Param{Name: "lo", Type: Int, Default: 1, Min: 1, Max: math.Inf(1), Source: "s"}
	hi := Param{Name: "hi", Type: Int, Default: 4, Min: 1, Max: math.Inf(1), Source: "s"}
	p := Policy{Name: "p", Params: []Param{lo, hi}, Rules: func(v Values, c Context) []Violation {
		if v.Int(hi) < v.Int(lo) {
			return []Violation{{Param: "hi", Msg: "must be at least lo"}}
		}
		return nil
	}}
	if got := p.Check(Values{"lo": 2}, Context{}); len(got) != 0 {
		t.Errorf("lo 2 (hi defaults to 4): %v", got)
	}
	if got := p.Check(Values{"lo": 5}, Context{}); len(got) != 1 || got[0].Param != "hi" {
		t.Errorf("lo 5 against the default hi: %v", got)
	}
	// A value out of its bound is blamed once, and the rules see its default.
	if got := p.Check(Values{"hi": 0}, Context{}); len(got) != 1 || got[0].Param != "hi" || !strings.Contains(got[0].Msg, "a whole number ≥ 1") {
		t.Errorf("hi 0: %v", got)
	}
	if got := p.Check(Values{"mid": 1}, Context{}); len(got) != 1 || got[0].Error() != "mid is not a parameter of p (one of lo, hi)" {
		t.Errorf("an undeclared key: %v", got)
	}
}

func TestRegister(t *testing.T) {
	Register(Policy{Name: "decl-test", Params: []Param{{Name: "x", Type: Float, Max: 1}}})
	if p, ok := Lookup("decl-test"); !ok || p.Params[0].Name != "x" || Names()[len(Names())-1] != "decl-test" {
		t.Errorf("Lookup = %+v, %v; Names = %v", p, ok, Names())
	}
	for _, bad := range []Policy{
		{Name: "decl-test"},
		{Name: ""},
		{Name: "twice", Params: []Param{{Name: "x", Type: Float}, {Name: "x", Type: Int}}},
		{Name: "mode", Params: []Param{{Name: "mode", Type: Float}}},
		{Name: "untyped", Params: []Param{{Name: "x"}}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%+v) did not panic", bad)
				}
			}()
			Register(bad)
		}()
	}
}
