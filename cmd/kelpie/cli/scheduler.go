package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kelpie/kelpie/runtime/role"
	"github.com/kelpie/kelpie/scheduler/daemon"
	"github.com/kelpie/kelpie/scheduler/launch"
)

func schedulerCmd() *cobra.Command {
	var cfg daemon.Config
	var stopJobs bool
	var cpuProfile, mutexProfile, memProfile string
	var k *kubeFlags
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

Agents and roles ride out a scheduler outage: workers keep training on the shards they hold
and keep their shard reports, agents keep reconnecting, for up to --orphan-timeout; after that
an agent stops its role and exits, so that nothing is left running forever. A scheduler
restarted on the same data dir adopts every node that comes back, marks those that do not
come back within the heartbeat timeout lost and launches them again.

With --store etcd://HOST:PORT[,HOST:PORT…] the durable state lives in etcd instead, and
several schedulers (replicas) share it: the one elected through an etcd lease leads, the others
wait without serving until it is gone, then one of them leads within --lease-ttl and adopts
every job as a restarted scheduler does. Every write of the leader is conditioned on its
leadership, so a leader that lost its lease writes nothing; it exits. Agents, roles and the
console take the replicas' addresses comma-separated. See docs/ha.md.

Token file lines: TOKEN ROLE NAME, role viewer or operator.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			profiles, err := startProfiles(cpuProfile, mutexProfile, memProfile)
			if err != nil {
				return err
			}
			// Written when the signal comes, before the daemon closes: a
			// big scheduler may take longer to close than whoever stopped
			// it waits (kelpie bench scheduler kills it 5 s after SIGTERM),
			// and the profiles are of the run, not of the shutdown.
			defer profiles.write()
			cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
			cfg.CheckData = role.CheckData
			// The launcher runs first; its events wait in the channel
			// until the daemon drains it.
			events := make(chan launch.ClusterEvent, clusterEventQueue)
			pods, err := k.start(ctx, events)
			if err != nil {
				return err
			}
			if pods != nil {
				cfg.Pods, cfg.ClusterEvents = pods, events
				// The nodes read their data inside their Pods.
				cfg.CheckData = nil
			}
			cfg.Context = ctx
			d, err := daemon.Start(cfg)
			if err != nil {
				return err
			}
			ws, web := "ws", "http"
			if d.TLSFingerprint() != "" {
				ws, web = "wss", "https"
			}
			fmt.Fprintf(os.Stderr, "kelpie scheduler: grpc %s, console %s://%s/api/v1/console, metrics %s://%s/metrics\n",
				d.GRPCAddr(), ws, d.HTTPAddr(), web, d.HTTPAddr())
			if fp := d.TLSFingerprint(); fp != "" {
				fmt.Fprintf(os.Stderr, "kelpie scheduler: console TLS certificate sha256:%s (kelpie tui --tls-fingerprint %s)\n", fp, fp)
			}
			if fp := d.CAFingerprint(); fp != "" {
				fmt.Fprintf(os.Stderr, "kelpie scheduler: node plane mTLS, CA sha256:%s (kelpie certs show --data-dir %s)\n", fp, cfg.DataDir)
			} else {
				fmt.Fprintln(os.Stderr, "kelpie scheduler: WARNING: plaintext node plane, no authorization (--insecure-node-plane)")
			}
			select {
			case <-ctx.Done():
				profiles.write()
				d.Close(stopJobs)
				return nil
			case <-d.Lost():
				// Another replica leads (or will): its writes are
				// refused from now on. The jobs are its to adopt.
				if err := d.StepDown(); err != nil {
					cfg.Log.Warn("step-down not recorded", "err", err)
				}
				d.Close(false)
				return errors.New("lost the leadership (the etcd lease expired): exiting so that a supervisor restarts this replica as a standby")
			}
		},
	}
	f := c.Flags()
	f.StringVar(&cfg.GRPC, "grpc", "127.0.0.1:7070", "node plane listen address")
	f.StringVar(&cfg.HTTP, "http", "127.0.0.1:7080", "console API and /metrics listen address")
	f.StringVar(&cfg.Advertise, "advertise", "", "the node-plane address the nodes dial (default: --grpc; on Kubernetes the scheduler's Service, e.g. kelpie-scheduler.kelpie.svc:7070)")
	f.StringVar(&cfg.DataDir, "data-dir", "kelpie-data", "directory of the durable state and node logs")
	f.StringVar(&cfg.Exe, "agent-exe", "", "the program the local launcher runs for each node, with the arguments of `kelpie agent` (default: this kelpie binary); a wrapper can place nodes, e.g. each in its own network namespace (the fault suite does)")
	f.StringVar(&cfg.Tokens, "tokens", "", "token file (TOKEN ROLE NAME per line)")
	f.BoolVar(&cfg.AllowAnonymousViewer, "anonymous-viewer", false, "let clients without a token watch (never command)")
	f.BoolVar(&cfg.NoLaunch, "no-launch", false, "admit jobs without starting their nodes (their agents connect from elsewhere: simulations)")
	f.IntVar(&cfg.Capacity.Workers, "capacity-workers", 0, "worker slots all jobs share (0: unlimited)")
	f.IntVar(&cfg.Capacity.Servers, "capacity-servers", 0, "server slots all jobs share (0: unlimited)")
	f.StringVar(&cfg.EPS, "eps", "auto", "EPS multi-job scheduling under a capacity: auto, approve (its actions wait for an operator) or off (first in, first out)")
	f.DurationVar(&cfg.EPSInterval, "eps-interval", 5*time.Second, "how often EPS grows running jobs into idle slots")
	f.DurationVar(&cfg.HangMin, "hang-min", 30*time.Second, "a job is hung after no progress for max(this, --hang-factor × its median iteration time); a spec's train.hang_min overrides it")
	f.Float64Var(&cfg.HangFactor, "hang-factor", 20, "see --hang-min; a spec's train.hang_factor overrides it")
	f.IntVar(&cfg.EarlyFeedbackIterations, "early-feedback-iterations", 100, "a job's early-feedback phase (protected from shrinking, not grown): its first N iterations (-1: none)")
	f.DurationVar(&cfg.EarlyFeedback, "early-feedback", 0, "a job's early-feedback phase also lasts this long after it started (0: iterations only)")
	f.DurationVar(&cfg.OrphanTimeout, "orphan-timeout", 10*time.Minute,
		"the agents it launches keep their roles running without a scheduler for this long (a restart, an outage), then stop them and exit")
	f.IntVar(&cfg.HistoryBudget, "history-budget", 0,
		"node samples (frames × nodes) each job's recorded timeline keeps before its older half is merged (0: 1,000,000)")
	f.DurationVar(&cfg.HistoryRetention, "history-retention", 0,
		"a finished job's timeline is deleted this long after it ended (0: 7 days; negative: kept)")
	cfg.SpecLimits = addLimitsFlag(c)
	f.StringVar(&cfg.CACert, "ca-cert", "", "the node plane's CA certificate (default: ca.crt in --data-dir, created on first start)")
	f.StringVar(&cfg.CAKey, "ca-key", "", "the CA's private key (mode 0600; default: ca.key in --data-dir)")
	f.DurationVar(&cfg.NodeCertTTL, "node-cert-ttl", 0, "validity of the certificate each launched node gets (default 72h)")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "serve the console API and /metrics over TLS with this certificate")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "its key (mode 0600)")
	f.BoolVar(&cfg.TLSAuto, "tls-auto", false, "serve over TLS with a self-signed certificate kept in --data-dir; clients pin the fingerprint printed at start (kelpie tui --tls-fingerprint)")
	f.StringVar(&cfg.MetricsToken, "metrics-token", os.Getenv("KELPIE_METRICS_TOKEN"), "require this bearer token to scrape /metrics, and accept no other unless --metrics-console-tokens ($KELPIE_METRICS_TOKEN; prefer the variable)")
	f.BoolVar(&cfg.MetricsRequireToken, "metrics-require-token", false, "require a console token (viewer or operator) to scrape /metrics")
	f.BoolVar(&cfg.MetricsConsoleTokens, "metrics-console-tokens", false, "with --metrics-token, accept any console token on /metrics too")
	f.StringSliceVar(&cfg.AllowHosts, "allow-host", nil, "a name (Host header) the console port answers to besides the --http host, localhost, 127.0.0.1 and ::1, repeatable: requests for other names are refused (DNS rebinding)")
	f.IntVar(&cfg.HTTPConns.Max, "http-max-conns", 1024, "connections to the console port not carrying an authenticated request or stream, all together; one more closes the oldest")
	f.IntVar(&cfg.HTTPConns.PerPrefix, "http-max-conns-per-network", 256, "the same from one network (IPv4 /24, IPv6 /64, all of loopback)")
	f.DurationVar(&cfg.HTTPIdleTimeout, "http-idle-timeout", 60*time.Second, "close console-port keep-alive connections idle this long")
	f.IntVar(&cfg.MaxStreamsPerUser, "max-streams-per-user", 32, "console streams one token's holder may have open (anonymous viewers count as one user)")
	f.Int64Var(&cfg.AuditMaxBytes, "audit-max-bytes", 32<<20, "the audit log keeps its newest entries up to this many bytes (negative: no bound)")
	f.DurationVar(&cfg.AuditMaxAge, "audit-max-age", 90*24*time.Hour, "the audit log drops entries older than this (negative: kept)")
	f.StringSliceVar(&cfg.AllowOrigins, "allow-origin", nil, "browser origin patterns allowed to open the console WebSocket besides the scheduler's own host, repeatable (e.g. https://dash.example.com, *.example.com)")
	f.BoolVar(&cfg.InsecureNodePlane, "insecure-node-plane", false, "serve the node plane in plaintext without authorization (simulations on a closed machine only)")
	f.StringVar(&cfg.Store, "store", "", "where the durable state lives: empty for a bbolt file in --data-dir, or etcd://HOST:PORT[,HOST:PORT…] (etcds:// for TLS) shared by scheduler replicas, one elected leader (docs/ha.md)")
	f.StringVar(&cfg.StoreKeyFile, "store-key-file", "", "with --store etcd://…: the key (32 bytes or their hex, mode 0600, the same on every replica) the CA and job key are sealed with in etcd")
	f.StringVar(&cfg.EtcdCA, "etcd-ca", "", "CA certificate etcd's client port is verified with")
	f.StringVar(&cfg.EtcdCert, "etcd-cert", "", "client certificate presented to etcd")
	f.StringVar(&cfg.EtcdKey, "etcd-key", "", "its key")
	f.StringVar(&cfg.EtcdPrefix, "etcd-prefix", "/kelpie/", "the key prefix of this scheduler's state and election in etcd")
	f.DurationVar(&cfg.LeaseTTL, "lease-ttl", 10*time.Second, "the leader's etcd lease: a leader unheard of this long (killed, paused, cut off) is replaced")
	k = addKubeFlags(c)
	f.StringVar(&memProfile, "memprofile", "", "write a profile of the scheduler's allocations (what allocated how much, since it started) to `file` when it exits")
	f.StringVar(&mutexProfile, "mutexprofile", "", "write a profile of the scheduler's lock contention (who held a lock others waited for) to `file` when it exits")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the scheduler to `file` until it exits (kelpie bench scheduler --scheduler-cpuprofile)")
	f.BoolVar(&stopJobs, "stop-jobs-on-exit", true, "stop the jobs' processes when the scheduler exits (false: leave them for a restarted scheduler)")
	return c
}

// schedulerProfiles are the profiles kelpie scheduler writes: the CPU
// profile (stopped), the lock-contention and allocation profiles, each to
// its file once.
type schedulerProfiles struct {
	once             sync.Once
	cpu, mutex, heap *os.File
}

// startProfiles opens the profiles' files (an empty name: no such profile)
// and starts the CPU profile and the lock-contention sampling.
func startProfiles(cpu, mutex, heap string) (*schedulerProfiles, error) {
	p := &schedulerProfiles{}
	var err error
	open := func(name string) *os.File {
		if name == "" || err != nil {
			return nil
		}
		var f *os.File
		f, err = os.Create(name)
		return f
	}
	p.cpu, p.mutex, p.heap = open(cpu), open(mutex), open(heap)
	if err == nil && p.cpu != nil {
		err = pprof.StartCPUProfile(p.cpu)
	}
	if err != nil {
		p.close()
		return nil, err
	}
	if p.mutex != nil {
		runtime.SetMutexProfileFraction(5) // one contention event in five
	}
	return p, nil
}

// write stops the CPU profile and writes the others, the first time it is
// called.
func (p *schedulerProfiles) write() {
	p.once.Do(func() {
		if p.cpu != nil {
			pprof.StopCPUProfile()
		}
		if p.mutex != nil {
			_ = pprof.Lookup("mutex").WriteTo(p.mutex, 0)
		}
		if p.heap != nil {
			// allocs: what allocated how much since the start, and (its
			// inuse sample types) what was live at the last collection.
			_ = pprof.Lookup("allocs").WriteTo(p.heap, 0)
		}
		p.close()
	})
}

func (p *schedulerProfiles) close() {
	for _, f := range []*os.File{p.cpu, p.mutex, p.heap} {
		if f != nil {
			_ = f.Close()
		}
	}
}
