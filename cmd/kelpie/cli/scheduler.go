package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/scheduler/daemon"
)

func schedulerCmd() *cobra.Command {
	var cfg daemon.Config
	var stopJobs bool
	c := &cobra.Command{
		Use:   "scheduler",
		Short: "run the control plane: gRPC node plane, WebSocket console API and /metrics",
		Long: `scheduler runs kelpie's control plane. Agents and roles dial --grpc; the console (kelpie tui),
kelpie job and scripts use the WebSocket API on --http, which also serves /metrics. Jobs,
actions, policy settings and the audit log live in --data-dir and survive a restart: live
jobs' agents reconnect to a scheduler restarted on the same addresses and data dir.

With --capacity-workers/--capacity-servers the jobs share that many worker and server slots:
a job that does not fit is queued (state "queued") and launched when it does, first in first
out. EPS multi-job scheduling (--eps auto, the default) then shrinks running jobs past their
early-feedback phase to admit a queued one, launches it smaller down to its
cluster.min_workers/min_servers if need be, and grows jobs into idle slots, backing off when a
growth made a job slower; --eps off is a plain first-in-first-out queue.

Token file lines: TOKEN ROLE NAME, role viewer or operator.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
			d, err := daemon.Start(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "kelpie scheduler: grpc %s, console ws://%s/api/v1/console, metrics http://%s/metrics\n",
				d.GRPCAddr(), d.HTTPAddr(), d.HTTPAddr())
			<-ctx.Done()
			d.Close(stopJobs)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.GRPC, "grpc", "127.0.0.1:7070", "node plane listen address")
	f.StringVar(&cfg.HTTP, "http", "127.0.0.1:7080", "console API and /metrics listen address")
	f.StringVar(&cfg.DataDir, "data-dir", "kelpie-data", "directory of the durable state and node logs")
	f.StringVar(&cfg.Tokens, "tokens", "", "token file (TOKEN ROLE NAME per line)")
	f.BoolVar(&cfg.AllowAnonymousViewer, "anonymous-viewer", false, "let clients without a token watch (never command)")
	f.BoolVar(&cfg.NoLaunch, "no-launch", false, "admit jobs without starting their nodes (their agents connect from elsewhere: simulations)")
	f.IntVar(&cfg.Capacity.Workers, "capacity-workers", 0, "worker slots all jobs share (0: unlimited)")
	f.IntVar(&cfg.Capacity.Servers, "capacity-servers", 0, "server slots all jobs share (0: unlimited)")
	f.StringVar(&cfg.EPS, "eps", "auto", "EPS multi-job scheduling under a capacity: auto, approve (its actions wait for an operator) or off (first in, first out)")
	f.DurationVar(&cfg.EPSInterval, "eps-interval", 5*time.Second, "how often EPS grows running jobs into idle slots")
	f.IntVar(&cfg.EarlyFeedbackIterations, "early-feedback-iterations", 100, "a job's early-feedback phase (protected from shrinking, not grown): its first N iterations (-1: none)")
	f.DurationVar(&cfg.EarlyFeedback, "early-feedback", 0, "a job's early-feedback phase also lasts this long after it started (0: iterations only)")
	f.BoolVar(&stopJobs, "stop-jobs-on-exit", true, "stop the jobs' processes when the scheduler exits (false: leave them for a restarted scheduler)")
	return c
}
