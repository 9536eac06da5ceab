package console

import (
	"math"
	"testing"

	"github.com/kelpie/kelpie/scheduler/policy"
)

// TestWelcomeCarriesPolicies: the Welcome declares every registered
// policy with its parameters, as the TUI's forms read them.
func TestWelcomeCarriesPolicies(t *testing.T) {
	cat := policyCatalog()
	if len(cat) != len(policy.Names()) {
		t.Fatalf("catalog has %d policies; registry %v", len(cat), policy.Names())
	}
	nd := cat[0]
	if nd.GetName() != policy.NameAntDTND || len(nd.GetParams()) != 3 {
		t.Fatalf("first policy = %v", nd)
	}
	l, w := nd.GetParams()[0], nd.GetParams()[1]
	if l.GetKey() != "lambda" || l.GetType() != "float" || l.GetDefault() != 1.5 || l.GetMin() != 1 || !l.GetMinOpen() || !math.IsInf(l.GetMax(), 1) || l.GetRange() != "> 1" || l.GetSource() == "" {
		t.Errorf("lambda = %v", l)
	}
	if w.GetKey() != "window_transient_s" || w.GetSpecKey() != "window_transient" || w.GetType() != "duration" || w.GetDefault() != 5 {
		t.Errorf("window_transient = %v", w)
	}
}
