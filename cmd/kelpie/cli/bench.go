package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/runtime/bench"
	"github.com/kelpie/kelpie/scheduler/pki"
)

// benchCmd groups the runtime's micro-benchmarks.
func benchCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "micro-benchmarks of the runtime with machine-readable output",
	}
	c.AddCommand(benchPushPullCmd(), benchServeCmd())
	return c
}

func benchPushPullCmd() *cobra.Command {
	def := bench.DefaultConfig()
	var (
		sizes      = []string{"4K", "64K", "1M", "4M"}
		ops        = []string{"push", "pull", "pushpull"}
		configs    = []string{"1x1", "2x2"}
		inflight   = def.Inflight
		asJSON     bool
		mtls       bool
		encryption = "off"
		cpuProfile string
		cfg        = def
	)
	c := &cobra.Command{
		Use:   "pushpull",
		Short: "push/pull throughput and latency against parameter-server processes, beside raw TCP",
		Long: `pushpull measures the parameter-server data plane the way ps-lite's benchmark does:
servers in their own processes, worker goroutines here, one key per server of each size,
push, pull and pushpull with 1 and 8 requests in flight per worker and server; median of
3 timed runs with min and max, latency p50/p99 of the median run, and a raw TCP ping-pong
of the same shape so each row shows kelpie/raw. MB = 10^6 value bytes summed over workers;
pushpull counts pushed plus pulled bytes. --transport picks what carries kelpie's rows
(tcp: the framed transport; unix: the same over the server's Unix socket, what jobs on one
host use; grpc: the Exchange stream). --security-cost measures each row a second time
against servers with no data-plane security, for the cost of authentication (--mtls) and
encryption (--encryption on) in the same run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			cfg.Sizes = nil
			for _, s := range sizes {
				n, err := bench.ParseSize(s)
				if err != nil {
					return exitCode(2, err)
				}
				cfg.Sizes = append(cfg.Sizes, n)
			}
			cfg.Ops = nil
			for _, s := range ops {
				o, err := bench.ParseOp(s)
				if err != nil {
					return exitCode(2, err)
				}
				cfg.Ops = append(cfg.Ops, o)
			}
			cfg.Topologies = nil
			for _, s := range configs {
				t, err := bench.ParseTopology(s)
				if err != nil {
					return exitCode(2, err)
				}
				cfg.Topologies = append(cfg.Topologies, t)
			}
			cfg.Inflight = inflight
			if cfg.Launcher.Exe, err = os.Executable(); err != nil {
				return fmt.Errorf("bench: find own executable: %v", err)
			}
			cfg.Launcher.Args = []string{"bench", "serve"}
			cfg.Log = cmd.ErrOrStderr()
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			switch encryption {
			case "on":
				cfg.Encrypt = true
			case "off":
			default:
				return exitCode(2, fmt.Errorf("bench: --encryption %q: want off or on", encryption))
			}
			if mtls || cfg.Encrypt || cfg.SecurityCost {
				dir, err := benchCredentials()
				if dir != "" {
					defer os.RemoveAll(dir)
				}
				if err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := bench.Run(ctx, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				return enc.Encode(rep)
			}
			return bench.WriteTable(cmd.OutOrStdout(), rep)
		},
	}
	f := c.Flags()
	f.StringSliceVar(&sizes, "sizes", sizes, "block sizes (bytes; K and M are 1024 and 1024²)")
	f.StringSliceVar(&ops, "ops", ops, "operations: push, pull, pushpull")
	f.StringSliceVar(&configs, "configs", configs, "SERVERSxWORKERS topologies")
	f.IntSliceVar(&inflight, "inflight", inflight, "requests in flight per worker and server")
	f.DurationVar(&cfg.Duration, "duration", def.Duration, "target length of one timed run")
	f.IntVar(&cfg.Repeats, "repeats", def.Repeats, "timed runs per row (the median is reported)")
	f.IntVar(&cfg.Warmup, "warmup", def.Warmup, "warm-up operations per stream")
	f.IntVar(&cfg.MaxOps, "max-ops", def.MaxOps, "bound on operations per stream in one run")
	f.BoolVar(&cfg.Pin, "pin", def.Pin, "pin this process to cpu 0 and the servers to cpu 1 (needs 2 cpus)")
	f.StringVar(&cfg.Transport, "transport", def.Transport, "what carries kelpie's rows: tcp (the framed transport jobs use), unix (framed, over the server's Unix socket) or grpc")
	f.BoolVar(&asJSON, "json", false, "print one JSON object on stdout")
	f.BoolVar(&mtls, "mtls", false, "run the data plane as a job does: node certificates from a throwaway CA (framed connections prove the job's secret, gRPC runs mTLS)")
	f.StringVar(&encryption, "encryption", encryption, "off or on: on puts framed TCP connections in TLS, as cluster.data_plane_encryption: on does (implies --mtls)")
	f.BoolVar(&cfg.SecurityCost, "security-cost", false, "measure every row also against servers without data-plane security and report secure/plain (implies --mtls)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process to `file`")
	f.StringVar(&cfg.ServerProfile, "server-cpuprofile", "", "parameter servers write CPU profiles to `prefix`.CONFIG.INDEX")
	return c
}

// benchServeCmd is a benchmark server process; pushpull starts it.
func benchServeCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "serve",
		Short:              "run one benchmark server process (started by kelpie bench itself)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bench.RunServer(ctx, args, os.Stdin, cmd.OutOrStdout())
		},
	}
}

// benchCredentials makes a throwaway CA, gives this process a worker's
// certificate and the server processes it starts a server's, through
// $KELPIE_CERT: this process reads its own once, before the variable is
// switched to the servers' file that the children inherit.
func benchCredentials() (dir string, err error) {
	dir, err = os.MkdirTemp("", "kelpie-bench-pki-")
	if err != nil {
		return "", err
	}
	ca, err := pki.New("kelpie bench CA", time.Now())
	if err != nil {
		return dir, err
	}
	worker, server := filepath.Join(dir, "worker.pem"), filepath.Join(dir, "server.pem")
	secret := pki.JobSecret([]byte("kelpie bench: a throwaway key...."), "bench")
	if err := ca.WriteNodeBundle(worker, identity.Node("bench", "worker-0"), time.Hour, secret, pki.LocalHosts()...); err != nil {
		return dir, err
	}
	if err := ca.WriteNodeBundle(server, identity.Node("bench", "server-0"), time.Hour, secret, pki.LocalHosts()...); err != nil {
		return dir, err
	}
	if err := os.Setenv(identity.EnvCert, worker); err != nil {
		return dir, err
	}
	if _, err := identity.Process(); err != nil {
		return dir, err
	}
	return dir, os.Setenv(identity.EnvCert, server)
}
