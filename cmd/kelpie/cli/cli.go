// Package cli wires kelpie's subcommands (cobra) to the packages that do the
// work. It holds no logic of its own beyond flags, output and exit codes.
package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(code int, err error) error { return &exitError{code: code, err: err} }

// Run executes kelpie with args and returns the process exit code.
func Run(args []string) int {
	root := &cobra.Command{
		Use:           "kelpie",
		Short:         "kelpie: a cluster console for parameter-server training jobs",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	bench := benchCmd()
	bench.AddCommand(benchSchedulerCmd())
	root.AddCommand(certsCmd(), runCmd(), demoCmd(), tuiCmd(), experimentsCmd(), schedulerCmd(), agentCmd(), jobCmd(), roleCmd(), netnsExecCmd(), bench)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "kelpie:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}
