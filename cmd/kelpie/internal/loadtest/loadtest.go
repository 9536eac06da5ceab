// Package loadtest measures the scheduler under many agents: it starts a
// real `kelpie scheduler` process that admits a job without launching it,
// plays thousands of agents over gRPC streams from this process (each
// sending a report and a heartbeat at a fixed rate), and reads the
// scheduler's own figures: its CPU time from /proc and its ingest-time
// histogram from /metrics. Everything is bounded in time and stops by
// itself; the scheduler process is stopped by its PID.
//
// It is a harness that drives the scheduler from outside (its gRPC node
// plane and its console API through scheduler/console/client), so it lives
// with the CLI that runs it (`kelpie bench scheduler`), not in scheduler/:
// the control plane's packages do not carry their own load generators.
package loadtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// Options shape a run.
type Options struct {
	Exe string // the kelpie binary
	// SchedulerExe is the kelpie binary run as the scheduler (default:
	// Exe): an A/B of two builds under the same simulated load.
	SchedulerExe string
	Agents       int           // simulated worker agents (default 5000)
	Servers      int           // servers in the job (their agents are simulated too; default 50)
	Duration     time.Duration // measured time (default 10s)
	Rate         float64       // reports per agent per second (default 1)
	Conns        int           // gRPC connections the agents share (default: 64, or enough for 200 streams each)
	NoWatch      bool          // no console client subscribed to the job
	// WholeViews subscribes the watching client to whole views (every
	// node, heatmap row and series), as consoles did before windows;
	// otherwise it asks for what a console on a 200×60 terminal shows:
	// 50 rows by ratio, 50 heatmap rows, 8 series per chart.
	WholeViews bool
	// SchedulerProfile, when set, is where the scheduler writes a CPU
	// profile of the run (kelpie scheduler --cpuprofile).
	SchedulerProfile string
	// SchedulerMutexProfile, when set, is where the scheduler writes its
	// lock-contention profile (kelpie scheduler --mutexprofile).
	SchedulerMutexProfile string
	// SchedulerMemProfile, when set, is where the scheduler writes its
	// allocation profile (kelpie scheduler --memprofile).
	SchedulerMemProfile string
	// SchedulerLog, when set, is the file the scheduler's log goes to
	// (else it is discarded).
	SchedulerLog string
	// Store is the scheduler's --store: "" for bbolt in the run's temporary
	// data dir, or etcd://HOST:PORT[,…] (plain HTTP) — the scheduler
	// then keeps its state there, under a prefix of the run's own, and
	// the run reads etcd's write rate from its /metrics.
	Store string
}

// consoleWindow is what `kelpie tui` asks for on a large terminal.
var consoleWindow = &consolepb.ViewWindow{Sort: "ratio", Limit: 50, HeatmapRows: 50, ChartSeries: 8}

// Result is what a run measured.
type Result struct {
	Agents           int     `json:"agents"`
	Seconds          float64 `json:"seconds"`
	Messages         int64   `json:"messages"`
	MessagesPerS     float64 `json:"messages_per_s"`
	CPUSeconds       float64 `json:"scheduler_cpu_seconds"`
	CPUCores         float64 `json:"scheduler_cpu_cores"` // CPU seconds per second
	IngestP50Us      float64 `json:"ingest_p50_us"`
	IngestP99Us      float64 `json:"ingest_p99_us"`
	RSSMiB           float64 `json:"scheduler_rss_mib"`
	ConsoleBytesPerS float64 `json:"console_bytes_per_s"` // one console client subscribed to the job
	ConsoleFrames    int64   `json:"console_frames"`
	// ConsoleWireBytesPerS is what the watching client read off its TCP
	// connection (compressed WebSocket frames): the stream's real cost.
	// console_bytes_per_s is the protobuf size of the views it received.
	ConsoleWireBytesPerS float64 `json:"console_wire_bytes_per_s"`
	// SetupSeconds is the time every agent took to connect, register its
	// node and send its first message (before the measured window).
	SetupSeconds float64 `json:"setup_seconds"`
	// Store is where the scheduler kept its state: "bbolt" or the etcd
	// URL; Etcd what etcd counted then (nil on bbolt).
	Store string       `json:"store"`
	Etcd  *EtcdFigures `json:"etcd,omitempty"`
}

// EtcdFigures are etcd's own counters (from the first endpoint's
// /metrics): over the measured window, the keys it put and deleted per
// second and the raft proposals it committed per second (each write
// transaction of the scheduler is one); the proposals it committed while
// the agents registered; the size of its database in use at the end.
type EtcdFigures struct {
	PutsPerS       float64 `json:"puts_per_s"`
	DeletesPerS    float64 `json:"deletes_per_s"`
	ProposalsPerS  float64 `json:"proposals_per_s"`
	SetupProposals float64 `json:"setup_proposals"`
	DBSizeInUseMiB float64 `json:"db_size_in_use_mib"`
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Run runs the load test.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Agents <= 0 {
		o.Agents = 5000
	}
	if o.Servers <= 0 {
		o.Servers = 50
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 1
	}
	if o.Conns <= 0 {
		// The scheduler takes at most identity.DefaultLimits' 256 streams
		// on a connection (issue 24): 64 connections carried 16,384 agents
		// and a 20,000-agent run stalled there, "16384 of 20050 agents
		// connected". Keep each connection at 200 streams at most.
		o.Conns = max(64, (o.Agents+o.Servers+199)/200)
	}
	dir, err := os.MkdirTemp("", "kelpie-loadtest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	schedExe := o.Exe
	if o.SchedulerExe != "" {
		schedExe = o.SchedulerExe
	}
	sched := exec.Command(schedExe, "scheduler", "--grpc", grpcAddr, "--http", httpAddr, "--data-dir", dir,
		"--no-launch", "--insecure-node-plane", "--anonymous-viewer", "--tokens", writeTokens(dir),
		// The simulated job may be larger than a submitted spec may be by default.
		"--spec-limit", fmt.Sprintf("workers=%d,servers=%d", max(o.Agents, 1), max(o.Servers, 1)))
	var etcdMetrics string // the first endpoint's /metrics
	if o.Store != "" {
		eps, ok := strings.CutPrefix(o.Store, "etcd://")
		if !ok || eps == "" {
			return nil, fmt.Errorf("--store %q: want etcd://HOST:PORT[,HOST:PORT…] (plain HTTP; the run reads etcd's /metrics)", o.Store)
		}
		first, _, _ := strings.Cut(eps, ",")
		etcdMetrics = "http://" + first + "/metrics"
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		keyFile := filepath.Join(dir, "store.key")
		if err := os.WriteFile(keyFile, key, 0o600); err != nil {
			return nil, err
		}
		sched.Args = append(sched.Args, "--store", o.Store, "--store-key-file", keyFile,
			"--etcd-prefix", fmt.Sprintf("/kelpie-bench-%d-%d/", os.Getpid(), time.Now().UnixNano()))
	}
	if o.SchedulerProfile != "" {
		sched.Args = append(sched.Args, "--cpuprofile", o.SchedulerProfile)
	}
	if o.SchedulerMemProfile != "" {
		sched.Args = append(sched.Args, "--memprofile", o.SchedulerMemProfile)
	}
	if o.SchedulerMutexProfile != "" {
		sched.Args = append(sched.Args, "--mutexprofile", o.SchedulerMutexProfile)
	}
	if o.SchedulerLog != "" {
		f, err := os.Create(o.SchedulerLog)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		sched.Stderr = f
	}
	sched.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sched.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = sched.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = sched.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = sched.Process.Kill()
			<-done
		}
	}()

	// Submit the job through the console API, as an operator would.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var consoleBytes, consoleFrames, wire atomic.Int64
	var connectedOnce atomic.Bool
	var watcherLost atomic.Pointer[client.StatusMsg] // the watcher's connection, once lost
	window := consoleWindow
	if o.WholeViews {
		window = nil
	}
	var d net.Dialer
	counted := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{conn, &wire}, nil
	}}}
	// The client lives as long as the run (cctx bounds only the setup: a
	// client dialed with it closed 20 s in, and longer runs measured the
	// rest of their window without a watcher).
	c, err := client.Dial(ctx, httpAddr, "load-op", client.WithSubscription([]string{"load"}, 4, 60),
		client.WithWindow(window), client.WithHTTPClient(counted),
		client.WithHandler(func(m any) {
			if st, ok := m.(client.StatusMsg); ok && st.State == client.Connected {
				connectedOnce.Store(true)
			} else if ok && connectedOnce.Load() {
				watcherLost.Store(&st)
			}
			if d, ok := m.(client.DeltaMsg); ok {
				consoleFrames.Add(1)
				for _, j := range d.Delta.Jobs {
					consoleBytes.Add(int64(protoSize(j)))
				}
			}
		}))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.WaitConnected(cctx); err != nil {
		return nil, fmt.Errorf("console: %v", err)
	}
	spec := fmt.Sprintf("name: load\nmodel: {kind: softmax}\ntrain: {global_batch: %d}\ncluster: {servers: %d, workers: %d}\n",
		2*o.Agents, o.Servers, o.Agents)
	res, err := c.Send(cctx, &consolepb.Command{Kind: &consolepb.Command_SubmitJob{SubmitJob: &consolepb.SubmitJob{SpecYaml: spec}}})
	if err != nil || !res.GetOk() {
		return nil, fmt.Errorf("submit: %v %v", res, err)
	}
	if o.NoWatch {
		_ = c.Close()
	} else {
		_ = c.Subscribe(cctx, []string{"load"})
	}

	conns := make([]*grpc.ClientConn, o.Conns)
	for i := range conns {
		if conns[i], err = grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return nil, err
		}
		defer conns[i].Close()
	}
	runCtx, stop := context.WithTimeout(ctx, setupLimit+o.Duration+5*time.Second)
	defer stop()
	var sent, started atomic.Int64
	var wg sync.WaitGroup
	var etcdStart map[string]float64
	if etcdMetrics != "" {
		if etcdStart, err = scrapeCounters(etcdMetrics, etcdCounters...); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	total := o.Agents + o.Servers
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent(runCtx, conns[i%len(conns)], i, o, &started, &sent)
		}()
	}
	// Measure the steady state, not the connect storm: from two report
	// periods after every agent has sent its first message, and no
	// sooner than 3 s after they began.
	for started.Load() < int64(total) && time.Since(start) < setupLimit && runCtx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	if n := started.Load(); n < int64(total) {
		return nil, fmt.Errorf("%d of %d agents connected within %v: a machine too loaded to measure on", n, total, setupLimit)
	}
	setup := time.Since(start).Seconds()
	var setupProposals float64 // etcd writes (raft proposals) of the agents' registration
	if etcdMetrics != "" {
		c, err := scrapeCounters(etcdMetrics, etcdCounters...)
		if err != nil {
			return nil, err
		}
		setupProposals = c["etcd_server_proposals_committed_total"] - etcdStart["etcd_server_proposals_committed_total"]
	}
	measureFrom := time.Now().Add(2 * time.Duration(float64(time.Second)/o.Rate))
	if early := start.Add(3 * time.Second); measureFrom.Before(early) {
		measureFrom = early
	}
	// Measure the scheduler's CPU over the measured window only.
	sleepUntil(runCtx, measureFrom)
	sent0 := sent.Load()
	cpu0, err := cpuSeconds(sched.Process.Pid)
	if err != nil {
		return nil, err
	}
	hist0, _ := ingestHistogram(httpAddr)
	var etcd0 map[string]float64
	if etcdMetrics != "" {
		if etcd0, err = scrapeCounters(etcdMetrics, etcdCounters...); err != nil {
			return nil, err
		}
	}
	bytes0, frames0, wire0 := consoleBytes.Load(), consoleFrames.Load(), wire.Load()
	t0 := time.Now()
	sleepUntil(runCtx, t0.Add(o.Duration))
	elapsed := time.Since(t0).Seconds()
	if elapsed < 0.9*o.Duration.Seconds() {
		return nil, fmt.Errorf("measured %.1fs of %v: setting up %d agents took past the run's deadline (a machine too loaded to measure on)",
			elapsed, o.Duration, o.Agents+o.Servers)
	}
	cpu1, err := cpuSeconds(sched.Process.Pid)
	if err != nil {
		return nil, err
	}
	hist1, err := ingestHistogram(httpAddr)
	if err != nil {
		return nil, err
	}
	if st := watcherLost.Load(); st != nil && !o.NoWatch {
		return nil, fmt.Errorf("the console watcher lost its connection (%s: %v): the figures would not be of a watched job", st.State, st.Err)
	}
	r := &Result{Agents: o.Agents, Seconds: elapsed, Messages: sent.Load() - sent0, CPUSeconds: cpu1 - cpu0,
		ConsoleFrames: consoleFrames.Load() - frames0}
	r.MessagesPerS = float64(r.Messages) / elapsed
	r.CPUCores = r.CPUSeconds / elapsed
	r.ConsoleBytesPerS = float64(consoleBytes.Load()-bytes0) / elapsed
	r.ConsoleWireBytesPerS = float64(wire.Load()-wire0) / elapsed
	diff := hist1.minus(hist0)
	r.IngestP50Us = diff.quantile(0.5) * 1e6
	r.IngestP99Us = diff.quantile(0.99) * 1e6
	r.RSSMiB, _ = rssMiB(sched.Process.Pid)
	r.SetupSeconds = setup
	r.Store = "bbolt"
	if etcdMetrics != "" {
		r.Store = o.Store
		etcd1, err := scrapeCounters(etcdMetrics, etcdCounters...)
		if err != nil {
			return nil, err
		}
		rate := func(name string) float64 { return (etcd1[name] - etcd0[name]) / elapsed }
		r.Etcd = &EtcdFigures{PutsPerS: rate("etcd_mvcc_put_total"), DeletesPerS: rate("etcd_mvcc_delete_total"),
			ProposalsPerS: rate("etcd_server_proposals_committed_total"), SetupProposals: setupProposals,
			DBSizeInUseMiB: etcd1["etcd_mvcc_db_total_size_in_use_in_bytes"] / (1 << 20)}
	}
	stop()
	wg.Wait()
	return r, nil
}

// setupLimit bounds the time the agents take to connect and send their
// first messages.
const setupLimit = 60 * time.Second

func writeTokens(dir string) string {
	p := dir + "/tokens"
	_ = os.WriteFile(p, []byte("load-op operator loadtest\n"), 0o600)
	return p
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-time.After(time.Until(t)):
	case <-ctx.Done():
	}
}

// agent plays one node's agent: hello, then a report (workers) or a
// heartbeat every 1/rate seconds. It counts itself in started once its
// first message is sent, and every message in sent.
func agent(ctx context.Context, cc *grpc.ClientConn, i int, o Options, started, sent *atomic.Int64) {
	node, role := fmt.Sprintf("worker-%d", i), coordinatorpb.Role_ROLE_WORKER
	if i >= o.Agents {
		node, role = fmt.Sprintf("server-%d", i-o.Agents), coordinatorpb.Role_ROLE_SERVER
	}
	// The node's role registers with the coordinator, as a real one does
	// before it reports: the scheduler's ledger knows every node.
	reg := &coordinatorpb.RegisterRequest{Job: "load", Node: node, Role: role, Pid: int32(os.Getpid())}
	if role == coordinatorpb.Role_ROLE_SERVER {
		reg.Addr = "127.0.0.1:1" // never dialled: the scheduler calls no server
	}
	var err error
	for attempt := 0; ; attempt++ {
		_, err = coordinatorpb.NewCoordinatorClient(cc).Register(ctx, reg)
		if err == nil || ctx.Err() != nil || attempt > 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return
	}
	var stream agentpb.Agent_ConnectClient
	for attempt := 0; ; attempt++ {
		stream, err = agentpb.NewAgentClient(cc).Connect(ctx)
		if err == nil {
			err = stream.Send(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Hello{Hello: &agentpb.AgentHello{
				Job: "load", Node: node, Role: role, Host: "sim"}}})
		}
		if err == nil || ctx.Err() != nil || attempt > 20 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return
	}
	go func() { // drain commands
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	period := time.Duration(float64(time.Second) / o.Rate)
	// Spread the agents over the period.
	t := time.NewTimer(time.Duration(float64(period) * float64(i%1000) / 1000))
	defer t.Stop()
	var it int64
	first := true
	for {
		select {
		case <-ctx.Done():
			_ = stream.CloseSend()
			return
		case <-t.C:
		}
		t.Reset(period)
		var m *agentpb.AgentMessage
		if role == coordinatorpb.Role_ROLE_WORKER {
			it += 10
			r := &coordinatorpb.ProgressReport{Job: "load", Node: node, Iteration: it, Samples: it * 2, BatchSize: 2}
			for k := range 10 {
				r.BptSeconds = append(r.BptSeconds, 0.01+0.001*float64((i+k)%7))
			}
			for k := range 4 {
				r.Comm = append(r.Comm, &coordinatorpb.CommSample{Server: int32((i + k) % o.Servers), Bytes: 40000, Seconds: 0.0005})
			}
			m = &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Report{Report: r}}
		} else {
			m = &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{
				Status: &agentpb.NodeStatus{State: agentpb.NodeState_NODE_STATE_RUNNING, Pid: 1}}}}
		}
		if err := stream.Send(m); err != nil {
			return
		}
		sent.Add(1)
		if first {
			started.Add(1)
			first = false
		}
	}
}

// cpuSeconds reads a process's user+system CPU time from /proc.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

func rssMiB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			kb, _ := strconv.ParseFloat(strings.Fields(l)[1], 64)
			return kb / 1024, nil
		}
	}
	return 0, nil
}

// histogram is a cumulative Prometheus histogram: upper bounds and counts.
type histogram struct {
	le    []float64
	count []float64
}

func (h histogram) minus(o histogram) histogram {
	out := histogram{le: h.le, count: append([]float64(nil), h.count...)}
	for i := range out.count {
		if i < len(o.count) {
			out.count[i] -= o.count[i]
		}
	}
	return out
}

// quantile interpolates within the bucket that holds q (as Prometheus'
// histogram_quantile does).
func (h histogram) quantile(q float64) float64 {
	if len(h.count) == 0 || h.count[len(h.count)-1] == 0 {
		return 0
	}
	rank := q * h.count[len(h.count)-1]
	prevLe, prevC := 0.0, 0.0
	for i, c := range h.count {
		if c >= rank {
			if math.IsInf(h.le[i], 1) {
				return prevLe
			}
			if c == prevC {
				return h.le[i]
			}
			return prevLe + (h.le[i]-prevLe)*(rank-prevC)/(c-prevC)
		}
		prevLe, prevC = h.le[i], c
	}
	return prevLe
}

// etcdCounters are the etcd metrics a run on etcd reads.
var etcdCounters = []string{"etcd_mvcc_delete_total", "etcd_mvcc_put_total", "etcd_server_proposals_committed_total",
	"etcd_mvcc_db_total_size_in_use_in_bytes"}

// scrapeCounters reads the named unlabelled metrics from a Prometheus
// text endpoint; every one must be there.
func scrapeCounters(url string, names ...string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					out[n] = f
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("no %s on %s", n, url)
		}
	}
	return out, nil
}

// ingestHistogram scrapes kelpie_agent_ingest_seconds from /metrics.
func ingestHistogram(addr string) (histogram, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return histogram{}, err
	}
	defer resp.Body.Close()
	var h histogram
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "kelpie_agent_ingest_seconds_bucket{le=\"") {
			continue
		}
		rest := strings.TrimPrefix(l, "kelpie_agent_ingest_seconds_bucket{le=\"")
		q := strings.IndexByte(rest, '"')
		le, err := strconv.ParseFloat(rest[:q], 64)
		if rest[:q] == "+Inf" {
			le, err = math.Inf(1), nil
		}
		if err != nil {
			continue
		}
		c, err := strconv.ParseFloat(strings.TrimSpace(rest[strings.IndexByte(rest, '}')+1:]), 64)
		if err != nil {
			continue
		}
		h.le = append(h.le, le)
		h.count = append(h.count, c)
	}
	if len(h.le) == 0 {
		return h, fmt.Errorf("no kelpie_agent_ingest_seconds on %s/metrics", addr)
	}
	return h, sc.Err()
}
