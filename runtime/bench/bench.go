// Package bench is kelpie's data-plane micro-benchmark (`kelpie bench
// pushpull`), after ps-lite's: parameter servers in their own processes,
// worker goroutines in the benchmark process, one key (block) of a given
// size per server, push, pull and pushpull operations with 1 or more
// requests in flight per worker and server, and a raw TCP ping-pong of the
// same shape beside it, so every figure comes with the machine's own limit.
//
// Method, per row (operation × topology × size × requests in flight):
//   - every worker has its own connection (one Exchange stream) to every
//     server; the servers run asp with SGD at learning rate 1 and workers
//     push -1s, so every push adds 1 to each value (the server sums pushes);
//   - Warmup operations per stream, then Warmup more timed ones to size the
//     run: enough operations per stream to last about Duration (at least
//     Warmup, at most MaxOps); then Repeats timed runs of that many, kelpie's
//     and the raw baseline's (and, with SecurityCost, the plain servers')
//     taken in turn within each repeat, so that load drifting during the
//     row weighs on each alike;
//   - throughput is the value bytes moved by all streams over the run's wall
//     time, in MB/s with MB = 10^6 bytes: push and pull count the block's
//     bytes once per operation, pushpull twice (pushed plus pulled); headers
//     and acks do not count. The row reports the median run with the min and
//     max of the runs, and the p50/p99 latency (request start to response)
//     over every operation of the median run;
//   - the raw TCP baseline runs the same topology, size and requests in
//     flight over plain TCP connections to raw server processes (a push is
//     size bytes answered by a 4-byte ack, a pull a small request answered by
//     size bytes, a pushpull both), measured the same way; kelpie/raw is the
//     ratio of the two medians.
//
// Servers are separate processes of the same binary (RunServer), started and
// stopped by PID, killed by the kernel if the benchmark dies (Linux
// parent-death signal) and exiting when their stdin closes. With Pin set and
// CPUs 0 and 1 available, the benchmark process pins itself to CPU 0 and
// every server process pins itself to CPU 1 at startup; both set the mask
// of every thread of the process (a Go process is already multi-threaded
// when it could call sched_setaffinity for itself, and affinity is per
// thread) and GOMAXPROCS to 1, which is what `taskset -c N` gives a process
// from its start, without needing taskset.
package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/wire"
)

// Config is one benchmark run.
type Config struct {
	Topologies []Topology
	Sizes      []int // bytes, multiples of 4
	Ops        []Op
	Inflight   []int // requests in flight per worker and server

	Duration time.Duration // target length of one timed run
	Warmup   int           // warm-up operations per stream (also the calibration length)
	Repeats  int           // timed runs per row; the median is reported
	MaxOps   int           // bound on operations per stream in one run

	Pin bool // pin the benchmark to CPU 0 and the servers to CPU 1
	// Kelpie's rows run with this process's node credentials when it has
	// them ($KELPIE_CERT, which server processes inherit; see kelpie bench
	// pushpull --mtls): every framed connection proves the job's secret,
	// gRPC runs mTLS. Encrypt also puts framed TCP connections in TLS
	// (data_plane_encryption: on). SecurityCost measures every row a
	// second time against servers with no credentials at all, over
	// connections that prove nothing, and reports the ratio: what
	// authentication (and encryption) cost in the same run.
	Encrypt      bool
	SecurityCost bool
	// Transport carries kelpie's rows: psclient.TransportTCP (the framed
	// transport over TCP; the default, what jobs use), TransportUnix (over
	// the server's Unix socket) or TransportGRPC.
	Transport string
	Launcher  Launcher // how to start a server process

	Log io.Writer // progress lines (server PIDs, each row as it finishes); nil: none

	// ServerProfile, when set, has every parameter server process write a
	// CPU profile to ServerProfile.<config>.<index>.
	ServerProfile string
}

// DefaultConfig is the full run: ps-lite's configurations and sizes.
func DefaultConfig() Config {
	return Config{
		Topologies: []Topology{{1, 1}, {2, 2}},
		Sizes:      []int{4 << 10, 64 << 10, 1 << 20, 4 << 20},
		Ops:        []Op{Push, Pull, PushPull},
		Inflight:   []int{1, 8},
		Duration:   300 * time.Millisecond,
		Warmup:     20,
		Repeats:    3,
		MaxOps:     200000,
		Pin:        true,
		Transport:  psclient.TransportTCP,
	}
}

func (c Config) validate() error {
	switch {
	case len(c.Topologies) == 0 || len(c.Sizes) == 0 || len(c.Ops) == 0 || len(c.Inflight) == 0:
		return errors.New("bench: nothing to run (empty configs, sizes, ops or inflight)")
	case c.Duration <= 0:
		return fmt.Errorf("bench: duration %v", c.Duration)
	case c.Warmup < 1 || c.Repeats < 1 || c.MaxOps < 1:
		return fmt.Errorf("bench: warmup %d, repeats %d and max ops %d must be positive", c.Warmup, c.Repeats, c.MaxOps)
	case c.Transport != "" && c.Transport != psclient.TransportTCP && c.Transport != psclient.TransportUnix && c.Transport != psclient.TransportGRPC:
		return fmt.Errorf("bench: transport %q: want tcp, unix or grpc", c.Transport)
	case c.Launcher.Exe == "":
		return errors.New("bench: no executable to start servers with")
	}
	if c.Encrypt || c.SecurityCost {
		if creds, err := identity.Process(); err != nil || creds == nil {
			return fmt.Errorf("bench: encryption and the security cost need node credentials ($%s; kelpie bench pushpull sets them up): %v", identity.EnvCert, err)
		}
	}
	for _, t := range c.Topologies {
		if t.Servers < 1 || t.Workers < 1 {
			return fmt.Errorf("bench: config %v", t)
		}
	}
	for _, n := range c.Sizes {
		if n <= 0 || n%4 != 0 || n > rawMaxPayload {
			return fmt.Errorf("bench: size %d bytes: want a positive multiple of 4 up to 1 GiB", n)
		}
	}
	for _, n := range c.Inflight {
		if n < 1 {
			return fmt.Errorf("bench: %d requests in flight", n)
		}
	}
	for _, o := range c.Ops {
		if _, err := ParseOp(string(o)); err != nil {
			return err
		}
	}
	return nil
}

// Result is one row. Field names are the JSON contract of `kelpie bench
// pushpull --json`.
type Result struct {
	Op       Op  `json:"op"`
	Servers  int `json:"servers"`
	Workers  int `json:"workers"`
	Bytes    int `json:"bytes"`
	Inflight int `json:"inflight"`

	MBPerS    float64 `json:"mb_per_s"`
	MBPerSMin float64 `json:"mb_per_s_min"`
	MBPerSMax float64 `json:"mb_per_s_max"`
	P50US     float64 `json:"p50_us"`
	P99US     float64 `json:"p99_us"`
	Ops       int     `json:"ops"` // operations in one timed run, all streams

	RawMBPerS    float64 `json:"raw_tcp_mb_per_s"`
	RawMBPerSMin float64 `json:"raw_tcp_mb_per_s_min"`
	RawMBPerSMax float64 `json:"raw_tcp_mb_per_s_max"`
	RawRTTP50US  float64 `json:"raw_tcp_rtt_p50_us"`
	RawRTTP99US  float64 `json:"raw_tcp_rtt_p99_us"`

	// The raw baseline over a Unix socket (rows whose kelpie transport is
	// unix), measured the same way beside the TCP one.
	RawUnixMBPerS    float64 `json:"raw_unix_mb_per_s,omitempty"`
	RawUnixMBPerSMin float64 `json:"raw_unix_mb_per_s_min,omitempty"`
	RawUnixMBPerSMax float64 `json:"raw_unix_mb_per_s_max,omitempty"`
	RawUnixRTTP50US  float64 `json:"raw_unix_rtt_p50_us,omitempty"`
	RawUnixRTTP99US  float64 `json:"raw_unix_rtt_p99_us,omitempty"`

	// Ratio is MBPerS over the like-for-like raw baseline, RawBaseline's:
	// the Unix socket's for unix rows, TCP's otherwise. (Before the Unix
	// baseline existed, unix rows were divided by raw TCP.)
	Ratio       float64 `json:"kelpie_over_raw"`
	RawBaseline string  `json:"raw_baseline"`        // tcp | unix
	RatioTCP    float64 `json:"kelpie_over_raw_tcp"` // MBPerS / RawMBPerS, every row

	// With Config.SecurityCost: the same row against servers without
	// data-plane security, and MBPerS over it.
	PlainMBPerS     float64 `json:"plain_mb_per_s,omitempty"`
	PlainP50US      float64 `json:"plain_p50_us,omitempty"`
	SecureOverPlain float64 `json:"secure_over_plain,omitempty"`
}

// Report is the output of a run.
type Report struct {
	Results []Result `json:"results"`
	Pinned  bool     `json:"pinned"` // whether the processes were pinned to CPUs
	// Transport is what carried kelpie's rows (tcp, unix or grpc).
	Transport string `json:"transport"`
	// LoadBefore is the 1-minute load average when the run started (Linux;
	// 0 elsewhere). On a shared machine anything near or above the CPU
	// count means other work competed with the pinned processes.
	LoadBefore float64 `json:"load_before"`
	// Authenticated: kelpie's rows ran with node credentials (framed
	// connections proving the job's secret, gRPC in mTLS); Encryption is
	// "on" when framed TCP connections were in TLS too.
	Authenticated bool   `json:"authenticated"`
	Encryption    string `json:"encryption"`
}

// Run runs every row of cfg. It stops every server process it started
// before returning, also on errors and when ctx ends.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.validate(); err != nil {
		return Report{}, err
	}
	if cfg.Transport == "" {
		cfg.Transport = psclient.TransportTCP
	}
	rep := Report{LoadBefore: loadAverage(), Transport: cfg.Transport, Encryption: "off"}
	if creds, _ := identity.Process(); creds != nil {
		rep.Authenticated = true
	}
	if cfg.Encrypt {
		rep.Encryption = "on"
	}
	cpu := -1
	if cfg.Pin && canPin() {
		restore, err := pinProcess(0)
		if err != nil {
			return rep, err
		}
		defer restore()
		rep.Pinned, cpu = true, 1
	}
	cfg.logf("bench: transport %s; authenticated=%v encryption=%s; pinned=%v; servers on cpu %d; load average %.2f",
		cfg.Transport, rep.Authenticated, rep.Encryption, rep.Pinned, cpu, rep.LoadBefore)
	for _, topo := range cfg.Topologies {
		rows, err := runTopology(ctx, cfg, topo, cpu)
		rep.Results = append(rep.Results, rows...)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format+"\n", args...)
	}
}

// topoRun holds one topology's processes and connections.
type topoRun struct {
	cfg       Config
	topo      Topology
	ps        [][]*psclient.Conn // [worker][server]
	plain     [][]*psclient.Conn // [worker][server] to servers without security (SecurityCost)
	raw       [][]*rawConn
	rawUnix   [][]*rawConn // the raw baseline over its Unix socket: unix rows only
	prog      [][]int64    // pushes made per worker and server (psStream.progress)
	plainProg [][]int64
	abort     context.CancelFunc
}

func runTopology(ctx context.Context, cfg Config, topo Topology, cpu int) (rows []Result, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var children []*child
	defer func() {
		for _, c := range children {
			c.stop()
			cfg.logf("bench: stopped server pid %d", c.pid())
		}
	}()
	stderr := cfg.Log
	if stderr == nil {
		stderr = os.Stderr
	}
	start := func(kind ServerKind, what string, l Launcher, extra []string) ([]string, error) {
		var addrs []string
		for i := range topo.Servers {
			profile := ""
			if kind == KindPS && cfg.ServerProfile != "" && what == "" {
				profile = fmt.Sprintf("%s.%v.%d", cfg.ServerProfile, topo, i)
			}
			c, err := startChild(ctx, l, kind, topo.Workers, cfg.Sizes, cpu, profile, extra, stderr)
			if err != nil {
				return nil, err
			}
			children = append(children, c)
			addrs = append(addrs, c.addr)
			cfg.logf("bench: %v: %s%s server pid %d at %s", topo, kind, what, c.pid(), c.addr)
		}
		return addrs, nil
	}
	var encrypt []string
	var clientTLS *tls.Config
	if cfg.Encrypt {
		encrypt = []string{"--encrypt"}
		if _, clientTLS, err = identity.ProcessFramedTLS(); err != nil {
			return nil, err
		}
	}
	psAddrs, err := start(KindPS, "", cfg.Launcher, encrypt)
	if err != nil {
		return nil, err
	}
	var plainAddrs []string
	if cfg.SecurityCost {
		// No credentials in the environment: a server without any.
		plain := cfg.Launcher
		plain.Env = append(append([]string(nil), plain.Env...), identity.EnvCert+"=")
		if plainAddrs, err = start(KindPS, " (plain)", plain, nil); err != nil {
			return nil, err
		}
	}
	rawAddrs, err := start(KindRaw, "", cfg.Launcher, nil)
	if err != nil {
		return nil, err
	}
	t := &topoRun{cfg: cfg, topo: topo, abort: cancel}
	defer t.close()
	for range topo.Workers {
		var pcs, plain []*psclient.Conn
		var rcs, ucs []*rawConn
		for s := range topo.Servers {
			pc, err := psclient.DialWith(ctx, psAddrs[s], psclient.Options{Transport: cfg.Transport, TLS: clientTLS})
			if err != nil {
				return nil, err
			}
			pcs = append(pcs, pc)
			if cfg.Encrypt && pc.Transport == psclient.TransportTCP && !pc.Encrypted() {
				return nil, fmt.Errorf("bench: the connection to %s is not encrypted", psAddrs[s])
			}
			if plainAddrs != nil {
				// Explicitly no secret: this process has one.
				pc, err := psclient.DialWith(ctx, plainAddrs[s], psclient.Options{Transport: cfg.Transport, Credentials: framing.SharedSecret(nil)})
				if err != nil {
					return nil, err
				}
				plain = append(plain, pc)
			}
			rc, err := dialRaw("tcp", rawAddrs[s])
			if err != nil {
				return nil, err
			}
			rcs = append(rcs, rc)
			if cfg.Transport == psclient.TransportUnix {
				uc, err := dialRaw("unix", RawUnixPath(rawAddrs[s]))
				if err != nil {
					return nil, err
				}
				ucs = append(ucs, uc)
			}
		}
		if ucs != nil {
			t.rawUnix = append(t.rawUnix, ucs)
		}
		t.ps = append(t.ps, pcs)
		t.plain = append(t.plain, plain)
		t.raw = append(t.raw, rcs)
		t.prog = append(t.prog, make([]int64, topo.Servers))
		t.plainProg = append(t.plainProg, make([]int64, topo.Servers))
	}
	for bi, size := range cfg.Sizes {
		for _, op := range cfg.Ops {
			for _, inflight := range cfg.Inflight {
				r, err := t.row(ctx, uint32(bi), size, op, inflight)
				if err != nil {
					return rows, fmt.Errorf("bench: %s %v %s inflight %d: %w", op, topo, FormatSize(size), inflight, err)
				}
				cfg.logf("bench: %s", rowLine(r))
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

func (t *topoRun) close() {
	for _, cs := range slices.Concat(t.ps, t.plain) {
		for _, c := range cs {
			_ = c.Close()
		}
	}
	for _, cs := range slices.Concat(t.raw, t.rawUnix) {
		for _, c := range cs {
			_ = c.conn.Close()
		}
	}
}

// row measures kelpie and the raw baseline for one row. A row that runs far
// past its expected length (a stuck server) is aborted: the topology's
// streams are cancelled and the raw connections' deadlines expire.
func (t *topoRun) row(ctx context.Context, block uint32, size int, op Op, inflight int) (Result, error) {
	r := Result{Op: op, Servers: t.topo.Servers, Workers: t.topo.Workers, Bytes: size, Inflight: inflight}
	limit := 30*time.Second + time.Duration(4*(t.cfg.Repeats+1))*t.cfg.Duration
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t.abort()
		for _, cs := range slices.Concat(t.raw, t.rawUnix) {
			for _, c := range cs {
				_ = c.conn.SetDeadline(time.Unix(1, 0))
			}
		}
	})
	defer stop()

	grad := make([]float32, size/4)
	for i := range grad {
		grad[i] = -1 // learning rate 1: the block gains 1 per push
	}
	payload := wire.AsBytes(grad)
	var ps, plain, raw, rawUnix []stream
	for w := range t.topo.Workers {
		for s := range t.topo.Servers {
			if t.rawUnix != nil {
				rawUnix = append(rawUnix, t.rawUnix[w][s].stream(op, size))
			}
			ps = append(ps, &psStream{conn: t.ps[w][s], worker: int32(w), block: block, op: op, size: size,
				payload: payload, progress: &t.prog[w][s]})
			if t.plain[w] != nil {
				plain = append(plain, &psStream{conn: t.plain[w][s], worker: int32(w), block: block, op: op, size: size,
					payload: payload, progress: &t.plainProg[w][s]})
			}
			raw = append(raw, t.raw[w][s].stream(op, size))
		}
	}
	sets := [][]stream{ps, raw}
	if plain != nil {
		sets = append(sets, plain)
	}
	if rawUnix != nil {
		sets = append(sets, rawUnix)
	}
	ms, err := measure(t.cfg, sets, inflight, op.Moved(size))
	if err != nil {
		return r, errOr(ctx, err)
	}
	m := ms[0]
	r.MBPerS, r.MBPerSMin, r.MBPerSMax = m.rate, m.min, m.max
	r.P50US, r.P99US, r.Ops = micros(m.p50), micros(m.p99), m.ops
	m = ms[1]
	r.RawMBPerS, r.RawMBPerSMin, r.RawMBPerSMax = m.rate, m.min, m.max
	r.RawRTTP50US, r.RawRTTP99US = micros(m.p50), micros(m.p99)
	if r.RawMBPerS > 0 {
		r.RatioTCP = r.MBPerS / r.RawMBPerS
	}
	r.Ratio, r.RawBaseline = r.RatioTCP, "tcp"
	if rawUnix != nil {
		m = ms[len(ms)-1]
		r.RawUnixMBPerS, r.RawUnixMBPerSMin, r.RawUnixMBPerSMax = m.rate, m.min, m.max
		r.RawUnixRTTP50US, r.RawUnixRTTP99US = micros(m.p50), micros(m.p99)
		r.Ratio, r.RawBaseline = 0, "unix"
		if m.rate > 0 {
			r.Ratio = r.MBPerS / m.rate
		}
	}
	if plain != nil {
		m = ms[2]
		r.PlainMBPerS, r.PlainP50US = m.rate, micros(m.p50)
		if m.rate > 0 {
			r.SecureOverPlain = r.MBPerS / m.rate
		}
	}
	return r, nil
}

// errOr prefers the context's reason (timeout, interrupt) over the
// connection error it caused.
func errOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("row timed out (%v)", err)
		}
		return ctx.Err()
	}
	return err
}

// measured is one row's figures for one transport.
type measured struct {
	rate, min, max float64
	p50, p99       time.Duration
	ops            int
}

// measure warms each set of streams up (kelpie's, the raw baseline's, ...)
// and sizes its runs, then times Repeats runs of every set, taking the sets
// in turn within each repeat: a machine whose load drifts during a row
// shifts every set alike instead of the one measured last.
func measure(cfg Config, sets [][]stream, inflight int, moved int64) ([]measured, error) {
	ns := make([]int, len(sets))
	for i, streams := range sets {
		if _, _, err := runOnce(streams, cfg.Warmup, inflight); err != nil {
			return nil, setErr(i, err)
		}
		d, _, err := runOnce(streams, cfg.Warmup, inflight)
		if err != nil {
			return nil, setErr(i, err)
		}
		ns[i] = OpsFor(d/time.Duration(cfg.Warmup), cfg.Duration, cfg.Warmup, cfg.MaxOps)
	}
	rates := make([][]float64, len(sets))
	lats := make([][][]time.Duration, len(sets))
	for range cfg.Repeats {
		for i, streams := range sets {
			d, lat, err := runOnce(streams, ns[i], inflight)
			if err != nil {
				return nil, setErr(i, err)
			}
			rates[i] = append(rates[i], MBPerSecond(int64(ns[i]*len(streams))*moved, d))
			lats[i] = append(lats[i], lat)
		}
	}
	out := make([]measured, len(sets))
	for i := range sets {
		med := MedianRun(rates[i])
		lat := lats[i][med]
		slices.Sort(lat)
		out[i] = measured{
			rate: rates[i][med], min: slices.Min(rates[i]), max: slices.Max(rates[i]),
			p50: Percentile(lat, 0.5), p99: Percentile(lat, 0.99), ops: ns[i] * len(sets[i]),
		}
	}
	return out, nil
}

// setErr names the set of streams an error came from (measure's order).
func setErr(i int, err error) error {
	switch i {
	case 1:
		return fmt.Errorf("raw tcp: %w", err)
	case 2:
		return fmt.Errorf("without security: %w", err)
	}
	return err
}

// runOnce runs n operations on every stream at once and returns the wall
// time from the common start to the last response, and every latency.
func runOnce(streams []stream, n, inflight int) (time.Duration, []time.Duration, error) {
	var wg sync.WaitGroup
	lats := make([][]time.Duration, len(streams))
	errs := make([]error, len(streams))
	begin := make(chan struct{})
	for i, s := range streams {
		lats[i] = make([]time.Duration, 0, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			lats[i], errs[i] = drive(s, n, inflight, lats[i])
		}()
	}
	t0 := time.Now()
	close(begin)
	wg.Wait()
	d := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		return 0, nil, err
	}
	return d, slices.Concat(lats...), nil
}

// stream is one worker's link to one server: send starts an operation and
// returns what recv needs to wait for its response. Responses come back in
// order on both transports used here, so the driver waits oldest first.
type stream interface {
	send() (any, error)
	recv(any) error
}

// drive runs n operations with at most inflight outstanding and appends
// each one's latency to lat.
func drive(s stream, n, inflight int, lat []time.Duration) ([]time.Duration, error) {
	if inflight <= 1 {
		for range n {
			t0 := time.Now()
			tok, err := s.send()
			if err != nil {
				return lat, err
			}
			if err := s.recv(tok); err != nil {
				return lat, err
			}
			lat = append(lat, time.Since(t0))
		}
		return lat, nil
	}
	type sent struct {
		t0  time.Time
		tok any
	}
	q := make(chan sent, inflight)       // never blocks: sem bounds what is in it
	sem := make(chan struct{}, inflight) // one token per operation in flight
	stop := make(chan struct{})
	var sendErr error
	go func() {
		defer close(q)
		for range n {
			select {
			case sem <- struct{}{}:
			case <-stop:
				return
			}
			t0 := time.Now()
			tok, err := s.send()
			if err != nil {
				sendErr = err
				return
			}
			q <- sent{t0, tok}
		}
	}()
	var err error
	for p := range q {
		if err != nil {
			continue // drain until the sender has stopped
		}
		if err = s.recv(p.tok); err != nil {
			close(stop)
			continue
		}
		lat = append(lat, time.Since(p.t0))
		<-sem
	}
	if err == nil {
		err = sendErr // written before close(q)
	}
	return lat, err
}

// psStream is one worker's connection to one server.
type psStream struct {
	conn    *psclient.Conn
	worker  int32
	block   uint32
	op      Op
	size    int
	payload []byte // never modified while requests are in flight
	// progress counts the pushes made: the next push is of iteration
	// *progress, a pull follows iteration *progress-1.
	progress *int64
	// req is reused by every send: a request is encoded when it starts
	// (both transports), so nothing refers to it once StartV returns.
	req    pspb.PSRequest
	blocks [1]uint32
}

func (p *psStream) send() (any, error) {
	p.blocks[0] = p.block
	req := &p.req
	req.Worker, req.Blocks, req.Progress, req.Data = p.worker, p.blocks[:], *p.progress-1, nil
	switch p.op {
	case Push, PushPull:
		// asp takes each push once per worker and iteration: count up
		// from iteration 0, as a worker does. (From 1, version 0 would
		// never complete: the server's engine would keep the set of every
		// version pushed since, a map more per push, for the whole run.)
		req.Progress = *p.progress
		*p.progress++
		req.Data = p.payload
		req.Op = pspb.Op_OP_PUSH
		if p.op == PushPull {
			req.Op = pspb.Op_OP_PUSH_PULL
		}
	default:
		req.Op = pspb.Op_OP_PULL
	}
	return p.conn.StartV(req, nil, nil)
}

func (p *psStream) recv(tok any) error {
	r, _, err := tok.(*psclient.Call).Wait(nil)
	if err != nil {
		return err
	}
	want := p.size
	if p.op == Push {
		want = 0
	}
	if len(r.Data) != want {
		return fmt.Errorf("%s response carries %d bytes; want %d", p.op, len(r.Data), want)
	}
	wire.Recycle(r.Data) // read nothing from it: give the buffer back
	return nil
}

// rawConn is one worker's raw TCP connection to one raw server.
type rawConn struct {
	conn net.Conn
	r    *bufio.Reader
	buf  []byte // reply payloads land here
}

func dialRaw(network, addr string) (*rawConn, error) {
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("bench: dial raw server %s: %v", addr, err)
	}
	// As kelpie's connections are: no Nagle delay on TCP, 4 MB buffers on
	// a Unix socket.
	framing.Tune(c)
	return &rawConn{conn: c, r: bufio.NewReaderSize(c, rawBuffer)}, nil
}

// stream makes the raw operation matching op: the request frame (header
// and pushed bytes) is built once and written whole for each operation.
func (c *rawConn) stream(op Op, size int) *rawStream {
	up, down := size, 0
	switch op {
	case Pull:
		up, down = 0, size
	case PushPull:
		down = size
	}
	req := touch(make([]byte, rawReqHeader+up))
	binary.LittleEndian.PutUint32(req[0:], uint32(up))
	binary.LittleEndian.PutUint32(req[4:], uint32(down))
	if len(c.buf) < down {
		c.buf = make([]byte, down)
	}
	return &rawStream{c: c, req: req, down: down}
}

type rawStream struct {
	c    *rawConn
	req  []byte
	down int
}

func (s *rawStream) send() (any, error) {
	_, err := s.c.conn.Write(s.req)
	return nil, err
}

func (s *rawStream) recv(any) error {
	var hdr [rawReplyHeader]byte
	if _, err := io.ReadFull(s.c.r, hdr[:]); err != nil {
		return err
	}
	if n := int(binary.LittleEndian.Uint32(hdr[:])); n != s.down {
		return fmt.Errorf("raw reply of %d bytes; want %d", n, s.down)
	}
	_, err := io.ReadFull(s.c.r, s.c.buf[:s.down])
	return err
}

// WriteTable prints the results as a table with a kelpie/raw column (and
// plain MB/s and secure/plain columns when the security cost was measured).
func WriteTable(w io.Writer, rep Report) error {
	cost := false
	for _, r := range rep.Results {
		cost = cost || r.PlainMBPerS > 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "op\tconfig\tsize\tinflight\tMB/s\tmin\tmax\tp50 µs\tp99 µs\traw MB/s\traw rtt p50 µs\tkelpie/raw\t"
	if cost {
		head += "plain MB/s\tsecure/plain\t"
	}
	fmt.Fprintln(tw, head)
	baseline := "tcp"
	for _, r := range rep.Results {
		rawMB, rawRTT := r.rawBaseline()
		if r.RawBaseline != "" {
			baseline = r.RawBaseline
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.0f\t%.1f\t%.2f\t",
			r.Op, Topology{r.Servers, r.Workers}, FormatSize(r.Bytes), r.Inflight,
			r.MBPerS, r.MBPerSMin, r.MBPerSMax, r.P50US, r.P99US, rawMB, rawRTT, r.Ratio)
		if cost {
			fmt.Fprintf(tw, "%.0f\t%.3f\t", r.PlainMBPerS, r.SecureOverPlain)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pin := "pinned: benchmark on cpu 0, servers on cpu 1"
	if !rep.Pinned {
		pin = "not pinned"
	}
	sec := "no data-plane security"
	if rep.Authenticated {
		sec = "authenticated (job secret at connect, gRPC mTLS), encryption " + rep.Encryption
	}
	_, err := fmt.Fprintf(w, "MB = 10^6 value bytes over all workers (pushpull counts pushed + pulled); median of runs; transport %s, raw baseline over %s; %s; %s; load average before %.2f\n",
		rep.Transport, baseline, sec, pin, rep.LoadBefore)
	return err
}

// rawBaseline is the like-for-like raw baseline's MB/s and RTT p50 (µs):
// the Unix socket's for a unix row, TCP's otherwise.
func (r Result) rawBaseline() (mbPerS, rttP50US float64) {
	if r.RawBaseline == "unix" {
		return r.RawUnixMBPerS, r.RawUnixRTTP50US
	}
	return r.RawMBPerS, r.RawRTTP50US
}

// loadAverage reads the 1-minute load average, or 0 where there is none.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	if _, err := fmt.Sscanf(string(b), "%f", &l); err != nil {
		return 0
	}
	return l
}

func rowLine(r Result) string {
	cost := ""
	if r.PlainMBPerS > 0 {
		cost = fmt.Sprintf(" | plain %8.1f MB/s p50 %.1f µs | secure/plain %.3f", r.PlainMBPerS, r.PlainP50US, r.SecureOverPlain)
	}
	rawMB, rawRTT := r.rawBaseline()
	return fmt.Sprintf("%-8s %v %5s inflight %d: %8.1f MB/s [%.1f, %.1f]  p50 %.1f µs  p99 %.1f µs | raw %s %8.1f MB/s rtt p50 %.1f µs | x%.2f",
		r.Op, Topology{r.Servers, r.Workers}, FormatSize(r.Bytes), r.Inflight, r.MBPerS, r.MBPerSMin, r.MBPerSMax,
		r.P50US, r.P99US, r.RawBaseline, rawMB, rawRTT, r.Ratio) + cost
}
