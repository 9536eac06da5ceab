package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/runtime/role"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/daemon"
)

func runCmd() *cobra.Command {
	var headless, asJSON, quiet bool
	var limits *spec.Limits
	c := &cobra.Command{
		Use:   "run SPEC.yaml",
		Short: "run one job from a spec on a local cluster of processes, to completion",
		Long: `run starts an embedded scheduler, launches the job's nodes (an agent per node, each
supervising its parameter-server or worker process) on 127.0.0.1, trains to the end and
prints a summary. With --json it prints exactly one JSON object on stdout (logs go to
stderr). Exit code 0 only when the job completed; a bad spec exits 2. A job whose training
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
			_ = headless // the console attaches to running jobs with `kelpie tui`; run itself is headless
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
			d, err := daemon.Start(daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir,
				AllowAnonymousViewer: true, NodeLog: nodeLog, CheckData: role.CheckData, SpecLimits: limits, Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
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
	c.Flags().BoolVar(&headless, "headless", false, "run without the console")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON result object on stdout")
	c.Flags().BoolVar(&quiet, "quiet", false, "do not copy the nodes' logs to stderr")
	return c
}
