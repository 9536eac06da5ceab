package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/cmd/kelpie/internal/loadtest"
)

func benchSchedulerCmd() *cobra.Command {
	var o loadtest.Options
	var asJSON bool
	c := &cobra.Command{
		Use:   "scheduler",
		Short: "a scheduler process ingesting reports from thousands of simulated agents",
		Long: `bench scheduler starts a real scheduler process that admits a job without launching it,
plays --agents worker agents (and the job's servers) over gRPC streams, each sending a
report of 10 BPT samples and 4 push/pull samples per second, with one console client
subscribed to the job, and reports the scheduler's CPU, its ingest time per message
(p50, p99, from its /metrics histogram) and the console stream's bytes per second.
It measures the steady state: from two report periods after every agent has connected and
sent its first message (no sooner than 3 s after they began), for --duration; the console
client must stay connected throughout, or the run fails.
With --store etcd://HOST:PORT[,…] the scheduler keeps its state in that etcd (a replica that
leads at once, under a key prefix of the run's own) instead of bbolt, and the run also reports
etcd's write rate over the measured window, from etcd's own /metrics on the first endpoint:
keys put and deleted and raft proposals committed per second (each write transaction of the
scheduler is one proposal), and the proposals committed while the agents registered.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			o.Exe = exe
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			r, err := loadtest.Run(ctx, o)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(r)
			}
			fmt.Printf("%d agents for %.1fs: %.0f messages/s; scheduler CPU %.2f cores, RSS %.0f MiB; ingest p50 %.1f µs, p99 %.1f µs; console %.0f KB/s on the wire (views %.0f KB/s) in %d frames\n",
				r.Agents, r.Seconds, r.MessagesPerS, r.CPUCores, r.RSSMiB, r.IngestP50Us, r.IngestP99Us, r.ConsoleWireBytesPerS/1e3,
				r.ConsoleBytesPerS/1e3, r.ConsoleFrames)
			if e := r.Etcd; e != nil {
				fmt.Printf("store %s: etcd %.1f puts/s, %.1f deletes/s, %.1f raft proposals/s measured; %.0f proposals while the agents registered (%.1fs); db in use %.1f MiB\n",
					r.Store, e.PutsPerS, e.DeletesPerS, e.ProposalsPerS, e.SetupProposals, r.SetupSeconds, e.DBSizeInUseMiB)
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&o.Agents, "agents", 5000, "simulated worker agents")
	f.IntVar(&o.Servers, "servers", 50, "servers in the simulated job")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "measured time")
	f.Float64Var(&o.Rate, "rate", 1, "reports per agent per second")
	f.IntVar(&o.Conns, "conns", 0, "gRPC connections the simulated agents share (0: 64, or enough to keep each at 200 streams, under the scheduler's 256 per connection)")
	f.BoolVar(&o.NoWatch, "no-watch", false, "no console client subscribed to the job")
	f.StringVar(&o.SchedulerProfile, "scheduler-cpuprofile", "", "the scheduler writes a CPU profile of the run to `file`")
	f.StringVar(&o.SchedulerLog, "scheduler-log", "", "write the scheduler's log to `file` (else it is discarded)")
	f.StringVar(&o.SchedulerMemProfile, "scheduler-memprofile", "", "the scheduler writes an allocation profile of the run to `file`")
	f.StringVar(&o.SchedulerMutexProfile, "scheduler-mutexprofile", "", "the scheduler writes a lock-contention profile of the run to `file`")
	f.StringVar(&o.SchedulerExe, "scheduler-binary", "", "run this kelpie `binary` as the scheduler (default: this one), to compare two builds under the same load")
	f.BoolVar(&o.WholeViews, "whole-views", false, "the console client takes whole views (every node row, heatmap row and series), not the window a console shows")
	f.StringVar(&o.Store, "store", "", "the scheduler's store: etcd://HOST:PORT[,HOST:PORT…] (plain HTTP) instead of bbolt; etcd's write rate is reported")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}
