package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/tui"
)

// runConsole opens the TUI on a scheduler; quitNote says what quitting does
// besides closing the console ("": the jobs keep running).
func runConsole(ctx context.Context, addr, token, job, quitNote string) error {
	return tui.Run(ctx, tui.Options{Scheduler: addr, Token: token, Job: job, QuitNote: quitNote})
}

func tuiCmd() *cobra.Command {
	var o tui.Options
	var conn connFlags
	c := &cobra.Command{
		Use:   "tui",
		Short: "the console: watch and steer the jobs of a scheduler",
		Long: `tui opens kelpie's console on a scheduler's console API (kelpie scheduler --http, or
kelpie demo). Keys: ? help, : command mode (:jobs, :job NAME, :actions, :policies, :events,
:theme NAME), / filter, esc back, q quit. Settings: $XDG_CONFIG_HOME/kelpie/config.yaml.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Token, err = conn.token(o.Token); err != nil {
				return exitCode(2, err)
			}
			if o.TLS, err = conn.tls(); err != nil {
				return exitCode(2, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return tui.Run(ctx, o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.Scheduler, "scheduler", os.Getenv("KELPIE_SCHEDULER"), "the scheduler's console address host:port, several replicas' comma-separated (default: config, then 127.0.0.1:7080)")
	f.StringVar(&o.Token, "token", os.Getenv("KELPIE_TOKEN"), "bearer token ($KELPIE_TOKEN; prefer it or --token-file: a command line is visible to other users)")
	conn.add(f)
	f.BoolVar(&o.ReadOnly, "readonly", false, "hide every control that changes the cluster")
	f.StringVar(&o.Job, "job", "", "open this job first")
	f.StringVar(&o.Theme, "theme", "", "dark | light | high-contrast")
	f.StringVar(&o.Config, "config", "", `config file ("-" reads none)`)
	return c
}
