package cli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/cmd/kelpie/internal/racks"
)

// netnsExecCmd is the launcher of `kelpie run --hosts netns`: the
// scheduler runs it (through a script racks writes) in place of `kelpie
// agent ...`, and it becomes that agent inside the node's host.
func netnsExecCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:    racks.ExecCommand + " --dir DIR -- agent ARGS...",
		Short:  "start a node's agent inside its host of a netns network (started by kelpie itself)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			return racks.Exec(dir, exe, args)
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "the network's directory (racks.Up)")
	_ = c.MarkFlagRequired("dir")
	return c
}
