package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/examples"
	"github.com/kelpie/kelpie/runtime/role"
	"github.com/kelpie/kelpie/scheduler/daemon"
	"github.com/kelpie/kelpie/scheduler/launch"
)

func demoCmd() *cobra.Command {
	var cfg daemon.Config
	var headless, auto bool
	c := &cobra.Command{
		Use:   "demo",
		Short: "an embedded local cluster training a real model with a scripted straggler, and the console on it",
		Long: `demo starts a scheduler on this machine and runs the demo job (an MLP on MNIST, 2 servers,
4 workers; worker-2 turns into a straggler after 5 s, worker-3 is slow on and off) again and
again until interrupted, each run under a new name (straggler-demo, straggler-demo-2, ...) so
that a finished run keeps its history and replay. Quitting the console stops the demo. AntDT-ND runs in approve mode: its proposals wait for you (with
--auto, it and PSLD act on their own).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if cfg.DataDir == "" {
				dir, err := os.MkdirTemp("", "kelpie-demo-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				cfg.DataDir = dir
			}
			// The person at the console is the operator of their demo; others
			// may watch without a token.
			cfg.AllowAnonymousViewer = true
			token := randomToken()
			cfg.Tokens = filepath.Join(cfg.DataDir, "tokens")
			if err := os.WriteFile(cfg.Tokens, []byte(token+" operator demo\n"), 0o600); err != nil {
				return err
			}
			// The token alone, for --token-file: never on a command line.
			tokenFile := filepath.Join(cfg.DataDir, "operator.token")
			if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
				return err
			}
			// The logs, 0600 in the 0700 logs directory beside the
			// launcher's node logs: they hold addresses, paths and
			// refusals no other local user should read.
			logDir := filepath.Join(cfg.DataDir, "logs")
			logf, nodeLog, err := openDemoLogs(logDir)
			if err != nil {
				return err
			}
			defer logf.Close()
			defer nodeLog.Close()
			cfg.Log = slog.New(slog.NewTextHandler(logf, nil))
			// Nodes are attached (they die with the demo) and log to a file,
			// not over the console.
			cfg.NodeLog = nodeLog
			cfg.CheckData = role.CheckData
			d, err := daemon.Start(cfg)
			if err != nil {
				return err
			}
			defer d.Close(true)
			s, err := spec.Parse("straggler-demo.yaml", examples.Demo())
			if err != nil {
				return err
			}
			if auto {
				s.Policies.SetMode("antdt-nd", spec.ModeAuto)
				s.Policies.SetMode("psld", spec.ModeAuto)
			}
			go keepDemoRunning(ctx, d, s)
			fmt.Fprintf(os.Stderr, "kelpie demo: scheduler grpc %s, console %s (logs in %s)\n", d.GRPCAddr(), d.HTTPAddr(), logDir)
			if headless {
				fmt.Fprintf(os.Stderr, "kelpie demo: headless; attach with `kelpie tui --scheduler %s --token-file %s` (or KELPIE_TOKEN=$(cat %s)), stop with Ctrl-C\n",
					d.HTTPAddr(), tokenFile, tokenFile)
				<-ctx.Done()
				return nil
			}
			return runConsole(ctx, d.HTTPAddr(), token, s.Name, "This stops the demo: its scheduler and its jobs end with it.")
		},
	}
	f := c.Flags()
	f.BoolVar(&headless, "headless", false, "no console: keep the cluster running until interrupted")
	f.BoolVar(&auto, "auto", false, "AntDT-ND and PSLD act on their own (auto mode) instead of waiting for approval (make soak)")
	f.StringVar(&cfg.GRPC, "grpc", "127.0.0.1:0", "node plane listen address")
	f.StringVar(&cfg.HTTP, "http", "127.0.0.1:7080", "console API listen address")
	f.StringVar(&cfg.DataDir, "data-dir", "", "state directory (default: a temporary one)")
	return c
}

// demoRunName names the demo's run-th run: the spec's name, then NAME-2,
// NAME-3, ...
func demoRunName(base string, run int) string {
	if run <= 1 {
		return base
	}
	return fmt.Sprintf("%s-%d", base, run)
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// keepDemoRunning submits the demo job and, when it ends, a new run under a
// new name (straggler-demo, straggler-demo-2, ...): a finished run stays
// with its history and replay instead of being replaced by the next one.
func keepDemoRunning(ctx context.Context, d *daemon.Daemon, s *spec.Spec) {
	for run := 1; ctx.Err() == nil; {
		sp := *s // the manager keeps the spec it is given: each run its own
		sp.Name = demoRunName(s.Name, run)
		name, err := d.Manager.SubmitSpec(&sp, "kelpie-demo")
		if err != nil {
			select {
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
			}
			continue
		}
		run++
		_, _ = d.Manager.Wait(ctx, name)
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
		}
	}
}

// openDemoLogs opens the demo's scheduler.log and nodes.log in dir for
// appending, private to this user (launch.OpenPrivate).
func openDemoLogs(dir string) (schedLog, nodeLog *os.File, err error) {
	if schedLog, err = launch.OpenPrivate(filepath.Join(dir, "scheduler.log")); err != nil {
		return nil, nil, err
	}
	if nodeLog, err = launch.OpenPrivate(filepath.Join(dir, "nodes.log")); err != nil {
		schedLog.Close()
		return nil, nil, err
	}
	return schedLog, nodeLog, nil
}
