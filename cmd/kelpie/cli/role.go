package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/runtime/role"
)

// roleCmd runs one node's role; launchers and agents start it, not users.
func roleCmd() *cobra.Command {
	var o role.Options
	var reportFD, commandFD int
	c := &cobra.Command{
		Use:       "role server|worker",
		Short:     "run one node's role of a job (started by kelpie itself)",
		Hidden:    true,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"server", "worker"},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if reportFD > 0 && commandFD > 0 {
				o.Agent = role.NewAgentChannel(os.NewFile(uintptr(reportFD), "agent-report"), os.NewFile(uintptr(commandFD), "agent-command"))
			}
			switch args[0] {
			case "server":
				return role.RunServer(ctx, o)
			case "worker":
				if o.Agent == nil {
					return exitCode(2, role.ErrNoAgent)
				}
				return role.RunWorker(ctx, o)
			default:
				return exitCode(2, fmt.Errorf("role must be server or worker, not %q", args[0]))
			}
		},
	}
	c.Flags().StringVar(&o.Coordinator, "coordinator", "", "coordinator address host:port")
	c.Flags().StringVar(&o.Job, "job", "", "job name")
	c.Flags().StringVar(&o.Node, "node", "", "node name (server-0, worker-1, ...)")
	c.Flags().StringVar(&o.Listen, "listen", "", "servers: listen address (default 127.0.0.1:0)")
	c.Flags().StringVar(&o.SnapshotDir, "snapshot-dir", "", "servers: where to keep the periodic snapshot and restore it from")
	c.Flags().BoolVar(&o.Relaunched, "relaunched", false, "the agent relaunched this role by a KILL_RESTART (in place: injections marked cured_by_restart are gone)")
	c.Flags().StringVar(&o.Host, "host", "", "the simulated host this role runs on (cluster.spare_hosts; set by the agent): it carries that host's injections and its own marked follows_restart (default: its own host)")
	c.Flags().DurationVar(&o.RetryFor, "retry-for", role.DefaultRetryFor, "how long calls to the coordinator are retried while the scheduler is away")
	c.Flags().IntVar(&reportFD, "report-fd", 0, "file descriptor of the pipe to the agent (set by the agent)")
	c.Flags().IntVar(&commandFD, "command-fd", 0, "file descriptor of the pipe from the agent (set by the agent)")
	for _, f := range []string{"coordinator", "job", "node"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}
