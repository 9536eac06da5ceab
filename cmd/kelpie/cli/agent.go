package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/agent"
	"github.com/kelpie/kelpie/proto/kelpiepb"
)

func agentCmd() *cobra.Command {
	var o agent.Options
	var roleName string
	c := &cobra.Command{
		Use:   "agent",
		Short: "run a node agent: start and supervise the node's role, stream its telemetry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch roleName {
			case "server":
				o.Role = kelpiepb.Role_ROLE_SERVER
			case "worker":
				o.Role = kelpiepb.Role_ROLE_WORKER
			default:
				return exitCode(2, fmt.Errorf("--role must be server or worker, not %q", roleName))
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
			return agent.New(o).Run(ctx)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Scheduler, "scheduler", "127.0.0.1:7070", "the scheduler's gRPC address")
	f.StringVar(&o.Job, "job", "", "job name")
	f.StringVar(&o.Node, "node", "", "node name (server-0, worker-1, ...)")
	f.StringVar(&roleName, "role", "", "server or worker")
	f.StringVar(&o.Host, "host", "", "host name reported to the scheduler (default: the machine's)")
	f.StringVar(&o.SnapshotDir, "snapshot-dir", "", "servers: directory of the periodic snapshots")
	f.IntVar(&o.MaxRestarts, "max-restarts", 10, "consecutive crashes restarted before giving up")
	for _, n := range []string{"job", "node", "role"} {
		_ = c.MarkFlagRequired(n)
	}
	return c
}
