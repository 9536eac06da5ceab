package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/cmd/kelpie/internal/experiments"
)

func experimentsCmd() *cobra.Command {
	var out, only string
	var runs int
	var asJSON bool
	c := &cobra.Command{
		Use:   "experiments",
		Short: "run the papers' experiments (examples/experiments) and write a Markdown results table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var w io.Writer = os.Stdout
			opts := experiments.Options{Only: only, Runs: runs}
			if asJSON {
				// stdout carries only the JSON; the table goes to --out.
				w, opts.JSON = io.Discard, os.Stdout
			}
			if out != "" {
				if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
					return err
				}
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = io.MultiWriter(f, w)
			}
			if runs < 1 {
				return fmt.Errorf("--runs must be at least 1 (got %d)", runs)
			}
			return experiments.Run(ctx, exe, opts, w, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		},
	}
	c.Flags().StringVar(&out, "out", "", "also write the table to this file")
	c.Flags().StringVar(&only, "only", "", "run one group of experiments (antdt, psld, rat, sync, elastic, eps), or those whose name contains this")
	c.Flags().IntVar(&runs, "runs", 3, "rounds: each row runs its sides this many times, interleaved, and is judged on the medians")
	c.Flags().BoolVar(&asJSON, "json", false, "print every run of every row as one JSON object on stdout (the table goes to --out)")
	return c
}
