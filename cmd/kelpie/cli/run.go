package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/runner"
)

func runCmd() *cobra.Command {
	var headless, asJSON bool
	c := &cobra.Command{
		Use:   "run SPEC.yaml",
		Short: "run one job from a spec on a local cluster of processes, to completion",
		Long: `run starts a coordinator and the job's servers and workers as processes on
127.0.0.1, trains to the end and prints a summary. With --json it prints exactly one
JSON object on stdout (logs go to stderr). Exit code 0 only when the job completed;
a bad spec exits 2.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return exitCode(2, err)
			}
			s, err := spec.Parse(args[0], src)
			if err != nil {
				return exitCode(2, err)
			}
			_ = headless // the console arrives with the TUI; run is headless today
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			res, err := runner.Run(ctx, s, runner.Options{Log: log})
			if err != nil {
				return fmt.Errorf("job %s failed: %w", s.Name, err)
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				return enc.Encode(res)
			}
			fmt.Printf("job %s completed in %.1fs: %d iterations, %d samples (%.0f samples/s), test accuracy %.4f, loss %.4f, %d DPRs\n",
				res.Name, res.JCTSeconds, res.Iterations, res.Samples, res.Throughput, res.Accuracy, res.FinalLoss, res.DPRs)
			return nil
		},
	}
	c.Flags().BoolVar(&headless, "headless", false, "run without the console")
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON result object on stdout")
	return c
}
