//go:build unix

package console

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// jobView1000 is a job view as the scheduler would show a 1,000-node job at
// iteration it: 50 servers and 950 workers, each with its figures and a
// 30-point sparkline, a 60-column heatmap row per node, 8 chart series of
// 120 points and a few actions. Every figure moves with it, so consecutive
// views differ everywhere, as they do in a running job.
func jobView1000(it int64) *consolepb.JobView {
	const nodes, servers, cols = 1000, 50, 60
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(time.Duration(it) * 250 * time.Millisecond)
	v := &consolepb.JobView{
		Name: "ctr-1000", State: "running", Submitted: timestamppb.New(t0), Started: timestamppb.New(t0),
		Model: "sparse lr on ctr", Sync: "ssp s=3 lazy", Servers: servers, Workers: nodes - servers,
		GlobalBatch: 950 * 256, Throughput: 1.2e6 + float64(it), Iteration: it * 10, Iterations: 100000,
		ShardsTodo: 4000 - it, ShardsDoing: 950, ShardsDone: it, ShardsTotal: 5000, Loss: 0.41 - 1e-5*float64(it),
		Policies: []*consolepb.PolicyView{{Name: "antdt-nd", Mode: "approve", Params: map[string]float64{"lambda": 1.5}},
			{Name: "psld", Mode: "auto", Params: map[string]float64{"epsilon": 0.1}}},
		Monitor: &consolepb.MonitorView{MeanBptS: 0.21, SpeedVariance: 0.3, WindowTransientS: 5, WindowPersistentS: 60, Lambda: 1.5},
		Heatmap: &consolepb.Heatmap{BucketSeconds: 1, Start: timestamppb.New(now.Add(-cols * time.Second))},
	}
	for i := range nodes {
		f := float64((int64(i)*7919+it*104729)%1000) / 1000 // 0..1, moves with it
		n := &consolepb.NodeView{
			Host: "127.0.0.1", State: "running", Pid: int32(10000 + i), BatchSize: 256, Accumulation: 1,
			BptShortS: 0.2 + 0.05*f, BptLongS: 0.21 + 0.01*f, Throughput: 256 / (0.2 + 0.05*f), Class: "healthy",
			Iteration: it * 10, LastReport: timestamppb.New(now), Ratio: 0.95 + 0.1*f,
		}
		if i < servers {
			n.Name, n.Role = fmt.Sprintf("server-%d", i), "server"
			n.Superior, n.Alpha, n.Beta, n.Speed, n.Blocks = i%3 != 0, 2.1e-9*(1+f), 0.004+0.001*f, 4.7e8*(1-f/4), 40
			v.Monitor.Superior = append(v.Monitor.Superior, n.Name)
		} else {
			n.Name, n.Role = fmt.Sprintf("worker-%d", i-servers), "worker"
		}
		for k := range 30 {
			n.Sparkline = append(n.Sparkline, 0.2+0.001*float64((i+k+int(it))%50))
		}
		v.Nodes = append(v.Nodes, n)
		row := &consolepb.HeatmapRow{Node: n.Name}
		for k := range cols {
			row.Cells = append(row.Cells, float32(0.9+0.002*float64((i*k+int(it))%100)))
		}
		v.Heatmap.Rows = append(v.Heatmap.Rows, row)
	}
	for s := range 8 {
		c := &consolepb.Series{Name: fmt.Sprintf("bpt/worker-%d", s), Unit: "s", IntervalSeconds: 1}
		for k := range 120 {
			c.Values = append(c.Values, 0.2+0.001*float64((s+k+int(it))%40))
		}
		v.Charts = append(v.Charts, c)
	}
	for a := range 4 {
		v.Actions = append(v.Actions, &consolepb.Action{Id: fmt.Sprintf("a-%d", a), Job: "ctr-1000", Kind: "ADJUST_BS",
			Target: fmt.Sprintf("worker-%d", a), Policy: "antdt-nd", Reason: "persistent straggler: BPT 1.9x the mean over 60s",
			State: "proposed", Created: timestamppb.New(t0), BatchSizes: map[string]int32{"worker-2": 128, "worker-3": 288},
			Evidence: map[string]float64{"bpt_ratio": 1.9, "lambda": 1.5}})
	}
	return v
}

// ringBackend returns a different 1,000-node view on every View call, so
// every tick has a change to send.
type ringBackend struct {
	views []*consolepb.JobView
	next  atomic.Uint64
}

func newRingBackend(n int) *ringBackend {
	b := &ringBackend{}
	for i := range n {
		b.views = append(b.views, jobView1000(int64(i+1)))
	}
	return b
}

func (b *ringBackend) View([]string, int) []*consolepb.JobView {
	return []*consolepb.JobView{b.views[b.next.Add(1)%uint64(len(b.views))]}
}
func (b *ringBackend) EventsSince(seq uint64, _ int) ([]*consolepb.Event, uint64) { return nil, seq }
func (b *ringBackend) Execute(context.Context, Principal, *consolepb.Command) *consolepb.CommandResult {
	return &consolepb.CommandResult{Ok: true}
}
func (b *ringBackend) Audit(AuditEntry) error { return nil }

// at4Hz reports per-delta figures as a 4 Hz stream's bytes and CPU share.
func at4Hz(b *testing.B, bytesPerDelta, cpuNsPerDelta float64) {
	b.ReportMetric(bytesPerDelta, "B/delta")
	b.ReportMetric(bytesPerDelta*4, "B/s@4Hz")
	b.ReportMetric(cpuNsPerDelta*4/1e9*100, "%cpu@4Hz")
}

// BenchmarkDelta1000Nodes is the server's work for one delta of a
// 1,000-node job without the socket: compare with the last view sent, build
// and encode the frame.
func BenchmarkDelta1000Nodes(b *testing.B) {
	be := newRingBackend(8)
	last := map[string]held{}
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		changed, removed, next := diffViews(last, be.View(nil, 60))
		last = next
		f := &consolepb.ServerFrame{Seq: uint64(i), Time: timestamppb.Now(),
			Body: &consolepb.ServerFrame_Delta{Delta: &consolepb.Delta{Jobs: changed, RemovedJobs: removed}}}
		data, err := marshalFrame.Marshal(f)
		if err != nil {
			b.Fatal(err)
		}
		size += len(data)
	}
	b.StopTimer()
	at4Hz(b, float64(size)/float64(b.N), float64(b.Elapsed().Nanoseconds())/float64(b.N))
}

// BenchmarkProtoEqual1000Nodes is what comparing two equal 1,000-node views
// with proto.Equal would cost instead (see viewSum).
func BenchmarkProtoEqual1000Nodes(b *testing.B) {
	v, w := jobView1000(1), proto.Clone(jobView1000(1))
	for b.Loop() {
		if !proto.Equal(v, w) {
			b.Fatal("copies differ")
		}
	}
}

// BenchmarkIdleTick is a tick with nothing to send: the backend hands back
// the same immutable view.
func BenchmarkIdleTick(b *testing.B) {
	v := []*consolepb.JobView{jobView1000(1)}
	_, _, last := diffViews(nil, v)
	b.ReportAllocs()
	for b.Loop() {
		changed, _, next := diffViews(last, v)
		if len(changed) != 0 {
			b.Fatal("change on an idle tick")
		}
		last = next
	}
}

// BenchmarkIdleTickEqualCopy is a tick with nothing to send when the
// backend builds a new but equal view each time: the view is fingerprinted.
func BenchmarkIdleTickEqualCopy(b *testing.B) {
	_, _, last := diffViews(nil, []*consolepb.JobView{jobView1000(1)})
	v := []*consolepb.JobView{proto.Clone(jobView1000(1)).(*consolepb.JobView)}
	b.ReportAllocs()
	for b.Loop() {
		if changed, _, _ := diffViews(last, v); len(changed) != 0 {
			b.Fatal("change on an idle tick")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)*4/1e9*100, "%cpu@4Hz")
}

// countingListener counts the bytes the server writes to its sockets.
type countingListener struct {
	net.Listener
	written *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.written}, nil
}

type countingConn struct {
	net.Conn
	written *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStream1000Nodes streams deltas of a 1,000-node job over a real
// WebSocket to one client as fast as the client takes them (the rate cap is
// lifted; every delta is a whole new view). cpu-ns/delta is the whole
// process: server (poll, diff, encode, write) and the client's read
// (and inflate, when compressed); B/delta counts bytes on the wire.
func BenchmarkStream1000Nodes(b *testing.B) {
	for _, compress := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "deflate"}[compress], func(b *testing.B) {
			be := newRingBackend(8)
			s := New(be, Tokens{"t": {Name: "bench", Role: RoleViewer}},
				Options{MaxRateHz: 1e5, Compress: compress, Logf: func(string, ...any) {}})
			ts := httptest.NewUnstartedServer(s.Handler())
			var written atomic.Int64
			ts.Listener = countingListener{ts.Listener, &written}
			ts.Start()
			defer ts.Close()
			defer s.Close()

			ctx := context.Background()
			mode := websocket.CompressionDisabled
			if compress {
				mode = websocket.CompressionContextTakeover
			}
			ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+ConsolePath,
				&websocket.DialOptions{HTTPHeader: map[string][]string{"Authorization": {"Bearer t"}}, CompressionMode: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer ws.CloseNow()
			ws.SetReadLimit(64 << 20)
			if err := ws.Write(ctx, websocket.MessageText, []byte(`{"subscribe":{"maxRateHz":100000}}`)); err != nil {
				b.Fatal(err)
			}
			for range 2 { // welcome, snapshot
				if _, _, err := ws.Read(ctx); err != nil {
					b.Fatal(err)
				}
			}
			w0, cpu0 := written.Load(), cpuTime()
			b.ResetTimer()
			for range b.N {
				if _, _, err := ws.Read(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n := float64(b.N)
			cpu := float64(cpuTime()-cpu0) / n
			b.ReportMetric(cpu, "cpu-ns/delta")
			at4Hz(b, float64(written.Load()-w0)/n, cpu)
		})
	}
}
