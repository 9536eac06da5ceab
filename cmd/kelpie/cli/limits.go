package cli

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/core/spec"
)

// limitsFlag is --spec-limit NAME=N, repeatable: the bounds on submitted
// specs' sizes, starting from spec.DefaultLimits.
type limitsFlag struct{ l spec.Limits }

func (f *limitsFlag) String() string { return "" }
func (f *limitsFlag) Type() string   { return "NAME=N" }
func (f *limitsFlag) Set(v string) error {
	for _, kv := range strings.Split(v, ",") {
		if err := f.l.Set(kv); err != nil {
			return err
		}
	}
	return nil
}

func addLimitsFlag(c *cobra.Command) *spec.Limits {
	f := &limitsFlag{l: spec.DefaultLimits()}
	c.Flags().Var(f, "spec-limit", "raise (or lower) a bound on job specs, repeatable: NAME=N with NAME one of "+
		strings.Join(spec.LimitNames(), ", ")+"; defaults: "+spec.DefaultLimits().String())
	return &f.l
}
