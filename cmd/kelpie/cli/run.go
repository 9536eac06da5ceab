package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/cmd/kelpie/internal/racks"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/runtime/role"
	"github.com/kelpie/kelpie/runtime/torch"
	"github.com/kelpie/kelpie/scheduler/daemon"
)

func runCmd() *cobra.Command {
	var headless, asJSON, quiet bool
	var hosts string
	var limits *spec.Limits
	c := &cobra.Command{
		Use:   "run SPEC.yaml",
		Short: "run one job from a spec on a local cluster of processes, to completion",
		Long: `run starts an embedded scheduler, launches the job's nodes (an agent per node, each
supervising its parameter-server or worker process) on 127.0.0.1, trains to the end and
prints a summary. With --hosts netns (or cluster.hosts: netns in the spec) every host runs
in a network namespace of its own, with its own address, racks joined by shaped uplinks
(cluster.topology, cluster.links; root only); everything is removed at the end. With --json
it prints exactly one JSON object on stdout (logs go to stderr). At a terminal (and without
--json) the console opens on the job, read-only; quitting it leaves the job running to its end.
With --headless, --json or no terminal there is no console: a progress line goes to stderr every
5 s ("kelpie run: NAME running · iteration 1200/9375 · loss 0.412 · 2.13k samples/s"). Exit code 0 only when the job completed; a bad spec exits 2. A job whose training
diverges (a non-finite loss or parameter) exits 1 after printing its result, whose
final_loss and accuracy are null and whose "diverged" object names the node and iteration.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return exitCode(2, err)
			}
			s, err := spec.ParseLimits(args[0], src, *limits)
			if err != nil {
				return exitCode(2, err)
			}
			// A torch spec's tensors and sample counts come from running
			// its script once, here: the scheduler never runs Python.
			if err := torch.Complete(s, filepath.Dir(args[0]), os.Stderr); err != nil {
				return exitCode(2, fmt.Errorf("%s: %v", args[0], err))
			}
			switch hosts {
			case "":
			case spec.HostsLocal, spec.HostsNetns:
				s.Cluster.Hosts = hosts
			default:
				return exitCode(2, fmt.Errorf("--hosts must be local or netns, not %q", hosts))
			}
			if need := s.NeedsNetns(); need != "" && s.Cluster.Hosts != spec.HostsNetns {
				return exitCode(2, fmt.Errorf("%s: %s", args[0], need))
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			dir, err := os.MkdirTemp("", "kelpie-run-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			var nodeLog io.Writer = os.Stderr
			if quiet {
				nodeLog = io.Discard
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			cfg := daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir,
				AllowAnonymousViewer: true, NodeLog: nodeLog, CheckData: role.CheckData, SpecLimits: limits, Log: log}
			var network *racks.Network
			if s.Cluster.Hosts == spec.HostsNetns {
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				if network, err = racks.Up(ctx, s, dir, exe); err != nil {
					return err
				}
				defer network.Close()
				cfg.GRPC, cfg.Exe = network.Addr()+":0", network.Exe
				fmt.Fprintf(os.Stderr, "kelpie run: %d hosts in %d racks on %s.0.0/16 (namespaces %s-*)\n",
					len(network.Cluster.Hosts), len(network.Layout.Racks), network.Cluster.Subnet, network.Cluster.Tag)
			}
			d, err := daemon.Start(cfg)
			if err != nil {
				return err
			}
			defer d.Close(true)
			fmt.Fprintf(os.Stderr, "kelpie run: watch with `kelpie tui --scheduler %s`\n", d.HTTPAddr())
			name, err := d.Manager.SubmitSpec(s, "kelpie-run")
			if err != nil {
				if status.Code(err) == codes.InvalidArgument {
					return exitCode(2, fmt.Errorf("%s: %s", args[0], status.Convert(err).Message()))
				}
				return err
			}
			done := make(chan struct{})
			go func() {
				select {
				case <-ctx.Done():
					_ = d.Manager.Kill(name, "interrupt")
				case <-done:
				}
			}()
			// The console on the job when a person is at a terminal;
			// otherwise (--headless, --json, or no terminal) a progress
			// line on stderr every progressEvery.
			consoleDone := make(chan struct{})
			if !headless && !asJSON && terminal(os.Stdin) && terminal(os.Stdout) {
				go func() {
					defer close(consoleDone)
					if err := runConsole(ctx, d.HTTPAddr(), "", name, "The job runs on to its end; Ctrl-C then stops it."); err != nil {
						fmt.Fprintf(os.Stderr, "kelpie run: console: %v\n", err)
					}
					fmt.Fprintf(os.Stderr, "kelpie run: console closed; %s runs on to the end (Ctrl-C stops it)\n", name)
				}()
			} else {
				close(consoleDone)
				ticker := time.NewTicker(progressEvery)
				defer ticker.Stop()
				go progressLines(done, ticker.C, os.Stderr, func() *consolepb.JobView {
					if v := d.Manager.View([]string{name}, 0); len(v) > 0 {
						return v[0]
					}
					return nil
				})
			}
			defer func() { <-consoleDone }()
			if network != nil {
				shapeCtx, stopShaping := context.WithCancel(ctx)
				defer stopShaping()
				go shapeWhenStarted(shapeCtx, d, name, s, network, log)
			}
			res, err := d.Manager.Wait(context.Background(), name)
			close(done)
			if err != nil && res != nil && res.Diverged != nil {
				// A real outcome with a result: print it, then fail.
				if asJSON {
					if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
						return err
					}
				}
				return exitCode(1, fmt.Errorf("job %s diverged: %s", res.Name, res.Diverged))
			}
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(res)
			}
			fmt.Printf("job %s completed in %.1fs: %d iterations, %d samples (%.0f samples/s), test accuracy %.4f, loss %.4f, %d DPRs, %d actions\n",
				res.Name, res.JCTSeconds, res.Iterations, res.Samples, res.Throughput, res.Accuracy, res.FinalLoss, res.DPRs, len(res.Actions))
			return nil
		},
	}
	limits = addLimitsFlag(c)
	c.Flags().BoolVar(&headless, "headless", false, "no console, even at a terminal: a progress line on stderr every 5 s (the default without a terminal or with --json)")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON result object on stdout")
	c.Flags().BoolVar(&quiet, "quiet", false, "do not copy the nodes' logs to stderr")
	c.Flags().StringVar(&hosts, "hosts", "", "where the nodes run: local (127.0.0.1) or netns (a network namespace per host; root); default: the spec's cluster.hosts")
	return c
}

// shapeWhenStarted carries out the job's link stragglers from the job's
// time zero on.
// progressEvery is how often a run without a console reports progress.
const progressEvery = 5 * time.Second

// terminal says whether f is a terminal (a character device).
func terminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLines writes one progress line to w at every tick until done is
// closed: the job's state, iteration, loss and throughput as the console
// shows them.
func progressLines(done <-chan struct{}, tick <-chan time.Time, w io.Writer, view func() *consolepb.JobView) {
	for {
		select {
		case <-done:
			return
		case <-tick:
			if v := view(); v != nil {
				fmt.Fprintln(w, progressLine(v))
			}
		}
	}
}

// progressLine is one line of progress.
func progressLine(v *consolepb.JobView) string {
	parts := []string{fmt.Sprintf("kelpie run: %s %s", v.GetName(), v.GetState())}
	if v.GetIterations() > 0 {
		parts = append(parts, fmt.Sprintf("iteration %d/%d", v.GetIteration(), v.GetIterations()))
	} else {
		parts = append(parts, fmt.Sprintf("iteration %d", v.GetIteration()))
	}
	if l := v.GetLoss(); l != 0 {
		parts = append(parts, "loss "+lossText(l))
	}
	if t := v.GetThroughput(); t > 0 {
		parts = append(parts, fmt.Sprintf("%.0f samples/s", t))
	}
	return strings.Join(parts, " · ")
}

func shapeWhenStarted(ctx context.Context, d *daemon.Daemon, name string, s *spec.Spec, network *racks.Network, log *slog.Logger) {
	cj, ok := d.Manager.Coordinator().Job(name)
	if !ok {
		return
	}
	select {
	case <-cj.Started():
	case <-ctx.Done():
		return
	}
	network.Shape(ctx, s, cj.Start(), log)
}
