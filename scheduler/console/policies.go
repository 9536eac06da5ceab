package console

import (
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// policyCatalog is the registered policies' declarations as the Welcome
// carries them, so that a client's forms read the parameters, their
// types, defaults and bounds instead of knowing them.
func policyCatalog() []*consolepb.PolicyDecl {
	var out []*consolepb.PolicyDecl
	for _, p := range policy.All() {
		d := p.Decl()
		pd := &consolepb.PolicyDecl{Name: d.Name, Doc: d.Doc}
		for _, q := range d.Params {
			pd.Params = append(pd.Params, &consolepb.PolicyParam{Key: q.Key(), SpecKey: q.Name, Type: q.Type.String(),
				Default: q.Default, Min: q.Min, Max: q.Max, MinOpen: q.MinOpen, MaxOpen: q.MaxOpen, ZeroDefault: q.ZeroDefault,
				Range: q.Range(), Source: q.Source})
		}
		out = append(out, pd)
	}
	return out
}
