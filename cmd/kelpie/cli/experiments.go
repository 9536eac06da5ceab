package cli

import (
	"context"
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
			if out != "" {
				if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
					return err
				}
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = io.MultiWriter(f, os.Stdout)
			}
			return experiments.Run(ctx, exe, only, w, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		},
	}
	c.Flags().StringVar(&out, "out", "", "also write the table to this file")
	c.Flags().StringVar(&only, "only", "", "run one group of experiments (antdt, psld, rat, sync, elastic, eps), or those whose name contains this")
	return c
}
