// Package daemon wires kelpie's scheduler process: the store in its data
// directory, the job manager, the gRPC node plane (Coordinator and Agent
// services, plus the standard health and reflection services), and the HTTP
// port with the console's WebSocket API and Prometheus /metrics.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/manager"
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
	MaxRestarts          int  // consecutive crashes an agent restarts (default 10)
	NoLaunch             bool // admit jobs without starting nodes (simulated agents)
	// Capacity is the worker and server slots all jobs share (zero:
	// unlimited); with one, jobs that do not fit are queued and EPS
	// multi-job scheduling (mode EPS: auto, approve or off) shrinks and
	// grows jobs (manager.Config).
	Capacity                policy.Capacity
	EPS                     string
	EPSInterval             time.Duration
	EarlyFeedbackIterations int
	EarlyFeedback           time.Duration
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
		return nil, fmt.Errorf("scheduler: data dir: %v", err)
	}
	var tokens console.Tokens
	if cfg.Tokens != "" {
		var err error
		if tokens, err = console.LoadTokens(cfg.Tokens); err != nil {
			return nil, err
		}
	}
	glis, err := net.Listen("tcp", cfg.GRPC)
	if err != nil {
		return nil, fmt.Errorf("scheduler: grpc listen %s: %v", cfg.GRPC, err)
	}
	hlis, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		glis.Close()
		return nil, fmt.Errorf("scheduler: http listen %s: %v", cfg.HTTP, err)
	}
	st, err := store.Open(filepath.Join(cfg.DataDir, "kelpie.db"))
	if err != nil {
		glis.Close()
		hlis.Close()
		return nil, err
	}
	m, err := manager.New(manager.Config{Addr: glis.Addr().String(), Exe: cfg.Exe, Store: st, Log: cfg.Log,
		NodeLog: cfg.NodeLog, LogDir: filepath.Join(cfg.DataDir, "logs"), Tick: cfg.Tick, MaxRestarts: cfg.MaxRestarts, NoLaunch: cfg.NoLaunch,
		Capacity: cfg.Capacity, EPS: cfg.EPS, EPSInterval: cfg.EPSInterval, EarlyFeedbackIterations: cfg.EarlyFeedbackIterations,
		EarlyFeedback: cfg.EarlyFeedback})
	if err != nil {
		st.Close()
		glis.Close()
		hlis.Close()
		return nil, err
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	kelpiepb.RegisterCoordinatorServer(gs, m.Coordinator())
	kelpiepb.RegisterAgentServer(gs, m.Agents())
	healthpb.RegisterHealthServer(gs, health.NewServer())
	reflection.Register(gs)
	cs := console.New(m, tokens, console.Options{AllowAnonymousViewer: cfg.AllowAnonymousViewer, ServerVersion: Version})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector(), manager.IngestHistogram(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/api/", cs.Handler())
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	d := &Daemon{Manager: m, Console: cs, store: st, grpc: gs, http: hs,
		grpcAddr: glis.Addr().String(), httpAddr: hlis.Addr().String()}
	go gs.Serve(glis)
	go hs.Serve(hlis)
	cfg.Log.Info("scheduler up", "grpc", d.grpcAddr, "http", d.httpAddr, "data", cfg.DataDir)
	return d, nil
}

// GRPCAddr is the node plane's address.
func (d *Daemon) GRPCAddr() string { return d.grpcAddr }

// HTTPAddr is the console API's address.
func (d *Daemon) HTTPAddr() string { return d.httpAddr }

// Close stops serving. With stopJobs, every job it launched is stopped
// first; without, their processes keep running for a restarted scheduler
// to adopt.
func (d *Daemon) Close(stopJobs bool) {
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
}
