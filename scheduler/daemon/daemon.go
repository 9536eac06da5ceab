// Package daemon wires kelpie's scheduler process: the store in its data
// directory, the job manager, the gRPC node plane (Coordinator and Agent
// services, plus the standard health and reflection services), and the HTTP
// port with the console's WebSocket API and Prometheus /metrics.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/launch"
	"github.com/kelpie/kelpie/scheduler/manager"
	"github.com/kelpie/kelpie/scheduler/pki"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
)

// Version is reported to console clients.
const Version = "kelpie/0.1"

// Config configures a scheduler.
type Config struct {
	GRPC    string // node plane listen address (default 127.0.0.1:7070)
	HTTP    string // console API and /metrics (default 127.0.0.1:7080)
	DataDir string // store and node logs (required)
	Tokens  string // token file (TOKEN ROLE NAME per line); empty: no tokens
	// AllowAnonymousViewer lets clients without a token watch.
	AllowAnonymousViewer bool
	Exe                  string       // kelpie binary for agents (default: this executable)
	Log                  *slog.Logger // default: discard
	NodeLog              io.Writer    // attached node output; default: files in DataDir/logs
	Tick                 time.Duration
	MaxRestarts          int // consecutive crashes an agent restarts (default 10)
	// OrphanTimeout is how long launched agents keep their roles running
	// without a scheduler before they stop them and exit (default 10 min).
	OrphanTimeout time.Duration
	// HistoryBudget and HistoryRetention bound each job's recorded
	// timeline (manager.Config).
	HistoryBudget    int
	HistoryRetention time.Duration
	NoLaunch         bool // admit jobs without starting nodes (simulated agents)
	// Capacity is the worker and server slots all jobs share (zero:
	// unlimited); with one, jobs that do not fit are queued and EPS
	// multi-job scheduling (mode EPS: auto, approve or off) shrinks and
	// grows jobs (manager.Config).
	Capacity                policy.Capacity
	EPS                     string
	EPSInterval             time.Duration
	EarlyFeedbackIterations int
	EarlyFeedback           time.Duration

	// HangMin and HangFactor: a job is hung after no progress for
	// max(HangMin, HangFactor × its median iteration time) (manager.Config).
	HangMin    time.Duration
	HangFactor float64

	// CheckData checks a job's data before its nodes are launched here
	// (manager.Config.CheckData; the CLI passes runtime/role.CheckData).
	CheckData func(*spec.Spec) error
	// SpecLimits bound submitted specs (nil: spec.DefaultLimits).
	SpecLimits *spec.Limits

	// The node plane's CA: CACert and CAKey when supplied, else ca.crt and
	// ca.key in DataDir, created on first start. Every node launched gets a
	// certificate valid NodeCertTTL (default pki.NodeLifetime).
	CACert, CAKey string
	NodeCertTTL   time.Duration
	// TLS on the HTTP port (console API, /metrics): TLSCert and TLSKey, or
	// TLSAuto for a self-signed certificate kept in DataDir whose
	// fingerprint clients pin (Daemon.TLSFingerprint).
	TLSCert, TLSKey string
	TLSAuto         bool
	// MetricsToken, when set, is required (as a bearer token) to scrape
	// /metrics, and is the only token accepted there unless
	// MetricsConsoleTokens. MetricsRequireToken requires a console token
	// without a dedicated one. Wrong tokens count in the console's login
	// throttle and audit.
	MetricsToken         string
	MetricsRequireToken  bool
	MetricsConsoleTokens bool
	// AllowHosts are names (Host header) the HTTP port answers to besides
	// its listen host, localhost, 127.0.0.1 and ::1 (console.NewHosts).
	AllowHosts []string
	// HTTPConns bound the HTTP port's unauthenticated connections
	// (console.ConnLimits); MaxStreamsPerUser one principal's console
	// streams (console.Options); HTTPIdleTimeout closes keep-alive
	// connections idle this long (default 60s).
	HTTPConns         console.ConnLimits
	MaxStreamsPerUser int
	HTTPIdleTimeout   time.Duration
	// AuditMaxBytes and AuditMaxAge bound the audit log (defaults 32 MiB
	// and 90 days; negative: unbounded).
	AuditMaxBytes int64
	AuditMaxAge   time.Duration
	// AllowOrigins are browser origin patterns (besides the scheduler's
	// own host) allowed to open the console WebSocket.
	AllowOrigins []string
	// InsecureNodePlane serves the node plane in plaintext with no
	// authorization: only for simulated agents on a closed machine.
	InsecureNodePlane bool
	// NodePlaneLimits bound each peer of the node plane (zero fields:
	// identity.DefaultLimits — 10 s to finish the TLS handshake, 256
	// streams a connection, 4 MiB a message).
	NodePlaneLimits identity.Limits
	// Pods runs the nodes on a cluster instead of as local processes
	// (manager.Config.Pods; kelpie scheduler --launcher kubernetes).
	Pods manager.Pods
	// ClusterEvents, if set, is the channel the cluster launcher delivers
	// what happens to the jobs' Pods on (kube.Config.Deliver): the daemon
	// drains it into the jobs' event logs from Start to Close. Events
	// queued before Start (the launcher runs first) are taken in then.
	ClusterEvents <-chan launch.ClusterEvent
	// Advertise is the node-plane address the nodes dial (default: the
	// address GRPC listens on); in a cluster, the scheduler's Service.
	Advertise string

	// Store is where the durable state lives: empty for the bbolt file in
	// DataDir, or etcd://HOST:PORT[,HOST:PORT…] (etcds:// for TLS) shared
	// by several replicas, of which the one elected leads (docs/ha.md):
	// Start waits until this one leads. EtcdCA, EtcdCert and EtcdKey are
	// the TLS of etcd's client port; StoreKeyFile (required with etcd)
	// the key the CA and job key are sealed with in etcd; EtcdPrefix its
	// key prefix (store.DefaultEtcdPrefix); LeaseTTL the leader's lease
	// (election.DefaultTTL). Context, when set, ends a wait to lead.
	Store                     string
	EtcdCA, EtcdCert, EtcdKey string
	StoreKeyFile              string
	EtcdPrefix                string
	LeaseTTL                  time.Duration
	Context                   context.Context
}

// Daemon is a running scheduler.
type Daemon struct {
	Manager  *manager.Manager
	Console  *console.Server
	store    *store.Store
	grpc     *grpc.Server
	http     *http.Server
	grpcAddr string
	httpAddr string
	np       *nodePlane // nil: plaintext node plane
	// tlsFingerprint is the SHA-256 of the HTTP port's certificate (empty
	// without TLS).
	tlsFingerprint string

	httpConns *console.Listener // the HTTP port's connection guard
	replica   *replica          // nil: a scheduler on bbolt

	// stopDrain ends the goroutine that drains Config.ClusterEvents;
	// drained closes when it has.
	stopDrain, drained chan struct{}
	stopOnce           sync.Once
}

// TLSFingerprint is the SHA-256 fingerprint (hex) of the console port's
// certificate, empty when it serves plain HTTP.
func (d *Daemon) TLSFingerprint() string { return d.tlsFingerprint }

// CAFingerprint is the SHA-256 fingerprint of the node plane's issuing CA
// certificate (empty for a plaintext node plane).
func (d *Daemon) CAFingerprint() string {
	if d.np == nil {
		return ""
	}
	return pki.Fingerprint(d.np.ca.Cert)
}

// CA is the node plane's certificate authority (nil for a plaintext node
// plane): tests and kelpie certs issue from it.
func (d *Daemon) CA() *pki.CA {
	if d.np == nil {
		return nil
	}
	return d.np.ca
}

// NodePlaneRefused is how many node-plane calls were refused with code.
func (d *Daemon) NodePlaneRefused(code codes.Code) uint64 {
	if d.np == nil {
		return 0
	}
	return d.np.guard.Refused(code)
}

// Start opens the store, restores jobs and starts serving.
func Start(cfg Config) (*Daemon, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("scheduler: --data-dir is required")
	}
	if cfg.GRPC == "" {
		cfg.GRPC = "127.0.0.1:7070"
	}
	if cfg.HTTP == "" {
		cfg.HTTP = "127.0.0.1:7080"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("scheduler: data dir: %w", err)
	}
	if cfg.EtcdPrefix == "" {
		cfg.EtcdPrefix = store.DefaultEtcdPrefix
	}
	var st *store.Store
	var rep *replica
	if cfg.Store != "" {
		// A standby waits here, serving nothing, until it leads.
		var err error
		if st, rep, err = openReplicated(cfg); err != nil {
			return nil, err
		}
	}
	d, err := start(cfg, st)
	if err != nil {
		if rep != nil {
			rep.close()
		}
		return nil, err
	}
	d.replica = rep
	if err := d.auditLeadership("lead"); err != nil {
		cfg.Log.Warn("audit of the takeover", "err", err)
	}
	return d, nil
}

// start serves on st (nil: the bbolt file in the data dir).
func start(cfg Config, st *store.Store) (*Daemon, error) {
	var tokens console.Tokens
	if cfg.Tokens != "" {
		var err error
		if tokens, err = console.LoadTokens(cfg.Tokens); err != nil {
			return nil, err
		}
	}
	tlsCfg, tlsFP, err := consoleTLS(cfg)
	if err != nil {
		return nil, err
	}
	if (cfg.MetricsRequireToken || cfg.MetricsToken != "") && cfg.MetricsToken == "" && len(tokens) == 0 {
		return nil, errors.New("scheduler: /metrics requires a token but there is neither --metrics-token nor a --tokens file")
	}
	glis, err := net.Listen("tcp", cfg.GRPC)
	if err != nil {
		return nil, fmt.Errorf("scheduler: grpc listen %s: %w", cfg.GRPC, err)
	}
	hlis, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		glis.Close()
		return nil, fmt.Errorf("scheduler: http listen %s: %w", cfg.HTTP, err)
	}
	if st == nil {
		if st, err = store.OpenWith(filepath.Join(cfg.DataDir, "kelpie.db"), auditRetention(cfg)); err != nil {
			glis.Close()
			hlis.Close()
			return nil, err
		}
	}
	var np *nodePlane
	var m *manager.Manager
	if !cfg.InsecureNodePlane {
		// The guard audits through the manager, which exists below.
		if np, err = newNodePlane(cfg, func(e console.AuditEntry) error { return m.Audit(e) }); err != nil {
			st.Close()
			glis.Close()
			hlis.Close()
			return nil, err
		}
	}
	addr := glis.Addr().String()
	if cfg.Advertise != "" {
		addr = cfg.Advertise
	}
	mcfg := manager.Config{Addr: addr, Pods: cfg.Pods, Exe: cfg.Exe, Store: st, Log: cfg.Log,
		NodeLog: cfg.NodeLog, LogDir: filepath.Join(cfg.DataDir, "logs"), Tick: cfg.Tick, MaxRestarts: cfg.MaxRestarts, NoLaunch: cfg.NoLaunch,
		OrphanTimeout: cfg.OrphanTimeout, HistoryBudget: cfg.HistoryBudget, HistoryRetention: cfg.HistoryRetention,
		Capacity: cfg.Capacity, EPS: cfg.EPS, EPSInterval: cfg.EPSInterval, EarlyFeedbackIterations: cfg.EarlyFeedbackIterations,
		EarlyFeedback: cfg.EarlyFeedback, CheckData: cfg.CheckData, SpecLimits: cfg.SpecLimits,
		HangMin: cfg.HangMin, HangFactor: cfg.HangFactor}
	if np != nil {
		mcfg.NodeCert, mcfg.NodeRefusal, mcfg.SignAction = np.nodeCert, np.nodeRefusal, np.creds.SignAction
	}
	m, err = manager.New(mcfg)
	if err != nil {
		st.Close()
		glis.Close()
		hlis.Close()
		return nil, err
	}
	if np != nil {
		// Node certificates name the job instance they were issued for
		// (NodeCert); a call must come from the one running now.
		np.instance = m.JobInstance
	}
	// Fixed flow-control windows (1 MiB a stream, 8 MiB a connection):
	// with the default dynamic window gRPC answers the agents' steady
	// stream of small reports with a bandwidth-estimation ping on every
	// connection that receives data, and the flushes of those cost the
	// scheduler about a tenth of its CPU at 5,000 agents. The node plane
	// moves no bulk data (tensors go over the data plane): the limits bound
	// a message to a few MiB, the streams of a connection, and the time a
	// connection may take to prove its certificate.
	gopts := append(cfg.NodePlaneLimits.ServerOptions(), grpc.InitialWindowSize(1<<20), grpc.InitialConnWindowSize(8<<20))
	gs := grpc.NewServer(append(gopts, np.serverOptions()...)...)
	coordinatorpb.RegisterCoordinatorServer(gs, m.Coordinator())
	agentpb.RegisterAgentServer(gs, m.Agents())
	healthpb.RegisterHealthServer(gs, health.NewServer())
	reflection.Register(gs)
	lim := spec.DefaultLimits()
	if cfg.SpecLimits != nil {
		lim = *cfg.SpecLimits
	}
	// A frame must carry the largest spec the limits admit (protojson may
	// double it by escaping); the spec check then names the limit.
	frame := max(int64(1<<20), min(2*lim.SpecBytes+64<<10, 1<<30))
	cs := console.New(m, tokens, console.Options{AllowAnonymousViewer: cfg.AllowAnonymousViewer, ServerVersion: Version,
		MaxFrameBytes: frame, OriginPatterns: cfg.AllowOrigins, MaxStreamsPerUser: cfg.MaxStreamsPerUser})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector(), manager.IngestHistogram(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if np != nil {
		reg.MustRegister(np.refused)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", cs.Handler())
	mux.Handle("/metrics", cs.Metrics(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		console.MetricsAuth{Token: cfg.MetricsToken, ConsoleTokens: cfg.MetricsConsoleTokens || cfg.MetricsRequireToken}))
	idle := cfg.HTTPIdleTimeout
	if idle <= 0 {
		idle = 60 * time.Second
	}
	// Nothing unauthenticated is held long: a request's headers (and a TLS
	// handshake) within 10 s, its body within 30 s, an idle keep-alive
	// connection for idle. A WebSocket stream is not bound by these (the
	// upgrade clears the deadlines); the console bounds it.
	hs := &http.Server{Handler: console.NewHosts(hlis.Addr().String(), cfg.AllowHosts).Guard(mux),
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: idle,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug)} // TLS handshake failures of scanners are not news
	limited := console.NewListener(hlis, cfg.HTTPConns)
	reg.MustRegister(consoleCounters(cs, limited)...)
	var serveHTTP = func() { _ = limited.Serve(hs) }
	if tlsCfg != nil {
		tl := tls.NewListener(limited, tlsCfg)
		hs.ConnContext, hs.ConnState = limited.ConnContext, limited.ConnState
		serveHTTP = func() { _ = hs.Serve(tl) }
	}
	d := &Daemon{Manager: m, Console: cs, store: st, grpc: gs, http: hs, np: np, tlsFingerprint: tlsFP,
		grpcAddr: glis.Addr().String(), httpAddr: hlis.Addr().String(), httpConns: limited}
	d.stopDrain, d.drained = make(chan struct{}), make(chan struct{})
	go d.drainClusterEvents(cfg.ClusterEvents)
	go gs.Serve(glis)
	go serveHTTP()
	cfg.Log.Info("scheduler up", "grpc", d.grpcAddr, "http", d.httpAddr, "data", cfg.DataDir, "store", st.Path())
	return d, nil
}

// drainClusterEvents takes the launcher's cluster events into the jobs'
// event logs until the channel closes or the daemon closes (nil: none).
func (d *Daemon) drainClusterEvents(events <-chan launch.ClusterEvent) {
	defer close(d.drained)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return
			}
			d.Manager.ClusterEvent(e.Job, e.Node, e.Message)
		case <-d.stopDrain:
			return
		}
	}
}

// HTTPConns is the HTTP port's connection guard (its counters).
func (d *Daemon) HTTPConns() *console.Listener { return d.httpConns }

// consoleCounters are the console port's refusals as Prometheus counters:
// what an operator watches to see its limits trip.
func consoleCounters(cs *console.Server, l *console.Listener) []prometheus.Collector {
	counter := func(name, help string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	return []prometheus.Collector{
		counter("kelpie_console_connections_evicted_total",
			"Console-port connections carrying nothing authenticated closed to make room for newer ones (--http-max-conns, --http-max-conns-per-network).",
			l.Evicted),
		counter("kelpie_console_refused_total",
			"Console streams and /metrics scrapes refused: unknown tokens, throttled logins, streams beyond --max-streams-per-user.",
			func() uint64 { return cs.Stats().Refused }),
		counter("kelpie_console_throttled_total",
			"Of those, refused by the login throttle before their token was read (429).",
			func() uint64 { return cs.Stats().Throttled }),
	}
}

// auditRetention is the store's audit retention: the configured bounds,
// 32 MiB and 90 days by default, none when negative.
func auditRetention(cfg Config) store.Options {
	o := store.Options{AuditMaxBytes: cfg.AuditMaxBytes, AuditMaxAge: cfg.AuditMaxAge}
	if o.AuditMaxBytes == 0 {
		o.AuditMaxBytes = 32 << 20
	}
	if o.AuditMaxAge == 0 {
		o.AuditMaxAge = 90 * 24 * time.Hour
	}
	return o
}

// GRPCAddr is the node plane's address.
func (d *Daemon) GRPCAddr() string { return d.grpcAddr }

// HTTPAddr is the console API's address.
func (d *Daemon) HTTPAddr() string { return d.httpAddr }

// Close stops serving. With stopJobs, every job it launched is stopped
// first; without, their processes keep running for a restarted scheduler
// to adopt.
func (d *Daemon) Close(stopJobs bool) {
	d.stopOnce.Do(func() { close(d.stopDrain) })
	<-d.drained
	if stopJobs {
		d.Manager.Shutdown()
	} else {
		d.Manager.Close()
	}
	d.Console.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = d.http.Shutdown(ctx)
	cancel()
	d.grpc.Stop()
	d.store.Close()
	if d.replica != nil {
		d.replica.close()
	}
}
