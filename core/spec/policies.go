package spec

import (
	"fmt"
	"strings"
	"time"

	"github.com/kelpie/kelpie/core/policydecl"
)

// The `policies:` section is decoded generically: each key is a declared
// policy's name (policydecl, filled by scheduler/policy), each policy a
// mode and its declared parameters, typed, defaulted and bounded by the
// declaration. Nothing here knows what a policy does.

// Policies holds each declared policy's mode and parameters, by name.
// After Parse it has an entry for every declared policy (defaults for
// those the spec leaves out).
type Policies map[string]PolicySetting

// PolicySetting is one policy's mode and parameters.
type PolicySetting struct {
	Mode string // auto | approve | off
	// Params holds every declared parameter by its Key: durations in
	// seconds, flags 0 or 1 (policydecl.Values).
	Params policydecl.Values
}

// Mode is the named policy's mode ("" when it is not declared).
func (p Policies) Mode(name string) string { return p[name].Mode }

// SetMode sets the named policy's mode, keeping its parameters.
func (p Policies) SetMode(name, mode string) {
	s := p[name]
	s.Mode = mode
	p[name] = s
}

// decodePolicies reads the `policies:` section.
func (d *decoder) decodePolicies(top *mapping, s *Spec) {
	decls := policydecl.All()
	names := make([]string, len(decls))
	for i, pd := range decls {
		names[i] = pd.Name
	}
	pol := d.sub(top, "policies", names)
	s.Policies = Policies{}
	for _, pd := range decls {
		keys := []string{"mode"}
		for _, q := range pd.Params {
			keys = append(keys, q.Name)
		}
		m := d.sub(pol, pd.Name, keys)
		ps := PolicySetting{Params: policydecl.Values{}}
		d.str(m, "mode", &ps.Mode)
		for _, q := range pd.Params {
			if m.vals[q.Name] == nil {
				continue
			}
			switch q.Type {
			case policydecl.Float:
				var x float64
				d.float(m, q.Name, &x)
				ps.Params[q.Key()] = x
			case policydecl.Int:
				var x int
				d.int(m, q.Name, &x)
				ps.Params[q.Key()] = float64(x)
			case policydecl.Duration:
				var x time.Duration
				d.duration(m, q.Name, &x)
				ps.Params[q.Key()] = x.Seconds()
			case policydecl.Bool:
				var x bool
				d.bool(m, q.Name, &x)
				ps.Params[q.Key()] = b2f(x)
			}
		}
		s.Policies[pd.Name] = ps
	}
}

// defaultPolicies fills the modes (off) and parameters the spec left out.
func (d *decoder) defaultPolicies(s *Spec) {
	if s.Policies == nil {
		s.Policies = Policies{}
	}
	for _, pd := range policydecl.All() {
		ps := s.Policies[pd.Name]
		path := "policies." + pd.Name
		if !d.given(path + ".mode") {
			ps.Mode = ModeOff
		}
		if ps.Params == nil {
			ps.Params = policydecl.Values{}
		}
		for _, q := range pd.Params {
			if !d.given(path + "." + q.Name) {
				ps.Params[q.Key()] = q.Default
			}
		}
		s.Policies[pd.Name] = ps
	}
}

// validatePolicies checks each policy's mode, each parameter against its
// declared bound, and the declared rules between them, naming the key
// (and so the line) to blame.
func (c *checker) validatePolicies() {
	exchange := ""
	if contains(exchanges, c.s.Cluster.Exchange) {
		exchange = c.s.Cluster.Exchange
	}
	for _, pd := range policydecl.All() {
		ps := c.s.Policies[pd.Name]
		path := "policies." + pd.Name
		c.oneOf(path+".mode", ps.Mode, modes)
		ctx := policydecl.Context{Exchange: exchange}
		if contains(modes, ps.Mode) {
			ctx.Mode = ps.Mode
		}
		if ctx.Mode != "" && ctx.Mode != ModeOff {
			// A rule between a parameter and the cluster binds a policy
			// that runs.
			ctx.Workers = c.s.Cluster.Workers
		}
		for _, v := range pd.Check(ps.Params, ctx) {
			key := v.Param
			if q, ok := pd.Param(key); ok {
				key = q.Name
			}
			c.errorf(path+"."+key, "%s", v.Msg)
		}
	}
}

// encodePolicies writes the `policies:` section: every declared policy,
// one line each, its mode then its parameters in declared order.
func encodePolicies(s *Spec, w func(indent int, format string, args ...any)) {
	decls := policydecl.All()
	if len(decls) == 0 {
		return
	}
	w(0, "policies:")
	for _, pd := range decls {
		ps := s.Policies[pd.Name]
		kv := []string{"mode: " + yamlString(ps.Mode)}
		for _, q := range pd.Params {
			x := ps.Params.Float(q)
			var text string
			switch q.Type {
			case policydecl.Int:
				text = fmt.Sprintf("%d", int64(x))
			case policydecl.Duration:
				text = fmtDuration(time.Duration(x * float64(time.Second)))
			case policydecl.Bool:
				text = fmt.Sprint(x != 0)
			default:
				text = fmtFloat(x)
			}
			kv = append(kv, q.Name+": "+text)
		}
		w(1, "%s: {%s}", pd.Name, strings.Join(kv, ", "))
	}
}

// b2f is 1 for true: parameter values are numbers.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
