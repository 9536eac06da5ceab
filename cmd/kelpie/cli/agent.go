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
	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

func agentCmd() *cobra.Command {
	var o agent.Options
	var roleName, cert string
	c := &cobra.Command{
		Use:   "agent",
		Short: "run a node agent: start and supervise the node's role, stream its telemetry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch roleName {
			case "server":
				o.Role = coordinatorpb.Role_ROLE_SERVER
			case "worker":
				o.Role = coordinatorpb.Role_ROLE_WORKER
			default:
				return exitCode(2, fmt.Errorf("--role must be server or worker, not %q", roleName))
			}
			if cert != "" {
				// The agent and the role it starts (which inherits the
				// environment) read the node's credentials from here.
				if err := os.Setenv(identity.EnvCert, cert); err != nil {
					return err
				}
			}
			if _, err := identity.Process(); err != nil {
				return exitCode(2, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
			return agent.New(o).Run(ctx)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Scheduler, "scheduler", "127.0.0.1:7070", "the scheduler's gRPC address; several replicas' comma-separated (the agent follows the one that leads)")
	f.StringVar(&o.Job, "job", "", "job name")
	f.StringVar(&o.Node, "node", "", "node name (server-0, worker-1, ...)")
	f.StringVar(&roleName, "role", "", "server or worker")
	f.StringVar(&o.Host, "host", "", "host name reported to the scheduler and handed to the role (with cluster.spare_hosts: the simulated host the node runs on; default: the machine's)")
	f.BoolVar(&o.Relaunched, "relaunched", false, "the scheduler launched this agent to relaunch its node by a KILL_RESTART on another host: its role starts relaunched")
	f.StringVar(&o.Listen, "listen", "", "servers: the data plane's listen address, registered with the scheduler (default 127.0.0.1:0; in a Pod $(POD_IP):0)")
	f.StringVar(&o.SnapshotDir, "snapshot-dir", "", "servers: directory of the periodic snapshots")
	f.StringVar(&o.PeerListen, "peer-listen", "", "the agent's peer service (a primary agent forwards global actions to the others), registered with the scheduler (default: --listen's host, else 127.0.0.1, port 0; off: none)")
	f.StringVar(&cert, "cert", "", "the node's credentials file (certificate, key, CA; mode 0600), also $"+identity.EnvCert+"; none: plaintext node plane")
	f.IntVar(&o.MaxRestarts, "max-restarts", 10, "consecutive crashes restarted before giving up")
	f.DurationVar(&o.OrphanTimeout, "orphan-timeout", agent.DefaultOrphanTimeout,
		"how long the role keeps running without a scheduler (restarting, unreachable) before the agent stops it and exits")
	for _, n := range []string{"job", "node", "role"} {
		_ = c.MarkFlagRequired(n)
	}
	return c
}
