package forms

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// Catalog is the policies the scheduler declared in its Welcome, with
// each parameter's type, default and bound. Empty (a scheduler that does
// not declare them): the forms fall back on the names in Policies and on
// "a number" for a parameter, and leave the bounds to the scheduler.
type Catalog []*consolepb.PolicyDecl

// Names lists the declared policies, or Policies when c is empty.
func (c Catalog) Names() []string {
	if len(c) == 0 {
		return Policies
	}
	out := make([]string, len(c))
	for i, p := range c {
		out[i] = p.GetName()
	}
	return out
}

// Lookup returns the declared policy of that name (nil: none).
func (c Catalog) Lookup(name string) *consolepb.PolicyDecl {
	for _, p := range c {
		if p.GetName() == name {
			return p
		}
	}
	return nil
}

// ParamOf returns a declared parameter by its key or spec key (nil: none).
func ParamOf(p *consolepb.PolicyDecl, name string) *consolepb.PolicyParam {
	for _, q := range p.GetParams() {
		if q.GetKey() == name || q.GetSpecKey() == name {
			return q
		}
	}
	return nil
}

// ParamHint is a declared parameter's hint: "float > 1, default 1.5".
func ParamHint(q *consolepb.PolicyParam) string {
	return fmt.Sprintf("%s %s, default %s", q.GetType(), q.GetRange(), strconv.FormatFloat(q.GetDefault(), 'g', -1, 64))
}

// CheckParam parses a value of a declared parameter and checks it
// against its declared type and bound.
func CheckParam(q *consolepb.PolicyParam, s string) (float64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%s must be a number, not %q", q.GetKey(), strings.TrimSpace(s))
	}
	if q.GetZeroDefault() && x == 0 {
		return x, nil
	}
	bad := x < q.GetMin() || q.GetMinOpen() && x == q.GetMin() || x > q.GetMax() || q.GetMaxOpen() && x == q.GetMax()
	switch q.GetType() {
	case "int":
		bad = bad || x != math.Trunc(x)
	case "bool":
		bad = x != 0 && x != 1
	}
	if bad {
		return 0, fmt.Errorf("%s must be %s, not %s", q.GetKey(), q.GetRange(), strconv.FormatFloat(x, 'g', -1, 64))
	}
	return x, nil
}

// PolicySettings parses the launch form's policies field, "antdt-nd=auto
// psld=approve psld.epsilon=0.05", into modes and parameters (by spec
// key) by policy, checking names, modes and values against c.
func (c Catalog) PolicySettings(text string) (modes map[string]string, params map[string]map[string]float64, err error) {
	modes, params = map[string]string{}, map[string]map[string]float64{}
	names := c.Names()
	for _, f := range strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == ',' }) {
		lhs, val, ok := strings.Cut(f, "=")
		if !ok {
			return nil, nil, fmt.Errorf("%q is not policy=mode or policy.param=value", f)
		}
		name, param, isParam := strings.Cut(lhs, ".")
		known := false
		for _, p := range names {
			known = known || p == name
		}
		if !known {
			return nil, nil, fmt.Errorf("unknown policy %s (have %s)", name, strings.Join(names, ", "))
		}
		if !isParam {
			if err := Mode(val); err != nil {
				return nil, nil, fmt.Errorf("%s: %v", name, err)
			}
			modes[name] = val
			continue
		}
		p := c.Lookup(name)
		if p == nil {
			return nil, nil, fmt.Errorf("%s.%s: the scheduler has not declared %s's parameters", name, param, name)
		}
		q := ParamOf(p, param)
		if q == nil {
			var have []string
			for _, q := range p.GetParams() {
				have = append(have, q.GetSpecKey())
			}
			return nil, nil, fmt.Errorf("%s has no parameter %s (have %s)", name, param, strings.Join(have, ", "))
		}
		x, err := CheckParam(q, val)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", name, err)
		}
		if params[name] == nil {
			params[name] = map[string]float64{}
		}
		params[name][q.GetSpecKey()] = x
	}
	return modes, params, nil
}

// policyYAML writes one policy's flow mapping for the spec: its mode, then
// its parameters in declared order (durations as seconds, flags as true
// or false).
func policyYAML(p *consolepb.PolicyDecl, mode string, params map[string]float64) string {
	var kv []string
	if mode != "" {
		kv = append(kv, "mode: "+mode)
	}
	var keys []string
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if p != nil { // declared order
		keys = keys[:0]
		for _, q := range p.GetParams() {
			if _, ok := params[q.GetSpecKey()]; ok {
				keys = append(keys, q.GetSpecKey())
			}
		}
	}
	for _, k := range keys {
		x := strconv.FormatFloat(params[k], 'g', -1, 64)
		if q := ParamOf(p, k); q != nil {
			switch q.GetType() {
			case "duration":
				x += "s"
			case "bool":
				x = strconv.FormatBool(params[k] != 0)
			}
		}
		kv = append(kv, k+": "+x)
	}
	return "{" + strings.Join(kv, ", ") + "}"
}
