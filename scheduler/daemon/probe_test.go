package daemon

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// untilTraining submits src and waits (bounded) until its job runs past
// iteration 20 with every node's role up; it kills the job at the test's
// end.
func untilTraining(t *testing.T, d *Daemon, src string) string {
	t.Helper()
	s, err := spec.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	name, err := d.Manager.SubmitSpec(s, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Manager.Kill(name, "test") })
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if vs := d.Manager.View([]string{name}, 0); len(vs) == 1 {
			v := vs[0]
			up := len(v.Nodes) > 0
			for _, n := range v.Nodes {
				up = up && n.Pid != 0 && n.State == "running"
			}
			if v.State == "running" && v.Iteration > 20 && up {
				return name
			}
			if v.State != "running" && v.State != "starting" && v.State != "pending" {
				t.Fatalf("%s ended (%s: %s) before it trained", name, v.State, v.Error)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s never trained", name)
	return ""
}

// logProbe writes a probe's figures to the test's log.
func logProbe(t *testing.T, p *consolepb.ProbeResult) {
	t.Helper()
	t.Logf("probe of %s: %s %s (%s %.1f×) — %s", p.Node, p.Verdict, p.Subject, p.Cause, p.Ratio, p.Detail)
	for _, n := range p.Nodes {
		t.Logf("  %s (%s): kernel %.1fms (%.2f×) %v %s", n.Node, n.Role, 1000*n.KernelS, n.KernelRatio, n.Trips, n.Error)
	}
}

// TestProbeCompute runs a real job (scheduler, agents and roles as separate
// processes on 127.0.0.1) whose worker-1 carries a compute injection, and
// probes worker-1 from the console: the probe is an operator's command
// (refused to a viewer), every node answers with its kernel time and the
// workers with their round trips to both servers, and the verdict is that
// the node is slow (its compute).
func TestProbeCompute(t *testing.T) {
	if testing.Short() {
		t.Skip("an MNIST job")
	}
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Tokens: writeTokens(t), Exe: kelpieBin,
		NodeLog: logWriter{t}, Log: slog.New(slog.NewTextHandler(logWriter{t}, nil)), Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	name := untilTraining(t, d, `
name: probe-compute
model: {kind: softmax}
data: {kind: mnist, epochs: 20, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 2, workers: 3}
sync: {model: bsp}
stragglers:
  - {node: worker-1, kind: compute, sleep: 50ms, intensity: 1, start: 0s}
`)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := &consolepb.Command{Kind: &consolepb.Command_Probe{Probe: &consolepb.GetProbe{Job: name, Node: "worker-1"}}}
	vc, err := client.Dial(ctx, d.HTTPAddr(), "view-token")
	if err != nil {
		t.Fatal(err)
	}
	if err := vc.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := vc.Send(ctx, cmd); err != nil || res.Ok {
		t.Errorf("a viewer's probe: %v, %v; want it refused", res, err)
	}
	vc.Close()
	c, err := client.Dial(ctx, d.HTTPAddr(), "op-token")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Send(ctx, cmd)
	if err != nil || !res.Ok {
		t.Fatalf("probe: %v, %v", res, err)
	}
	p := res.Probe
	logProbe(t, p)
	if p.Verdict != "node" || p.Subject != "worker-1" || p.Cause != "compute" {
		t.Errorf("probe of worker-1: %s %q %q (%s); want node worker-1 compute", p.Verdict, p.Subject, p.Cause, p.Detail)
	}
	if len(p.Nodes) != 5 {
		t.Errorf("%d nodes answered; want 5", len(p.Nodes))
	}
	for _, n := range p.Nodes {
		if n.KernelS <= 0 || n.Error != "" {
			t.Errorf("%s: kernel %v, error %q; want an answer", n.Node, n.KernelS, n.Error)
		}
		want := 0
		if n.Role == "worker" {
			want = 2
		}
		if len(n.Trips) != want {
			t.Errorf("%s: %d round trips; want %d", n.Node, len(n.Trips), want)
		}
		for _, tr := range n.Trips {
			if tr.RttS <= 0 || tr.Error != "" || tr.ServerS > tr.RttS {
				t.Errorf("%s to %s: rtt %v, the server's %v, error %q", n.Node, tr.Server, tr.RttS, tr.ServerS, tr.Error)
			}
		}
	}
	// Audited: the job's events name who probed and what was found.
	if !hasEvent(d, name, "probe of worker-1: worker-1: the node is slow") {
		t.Errorf("no probe event in %s's events", name)
	}
}

// hasEvent says whether job's recent events hold one containing s.
func hasEvent(d *Daemon, job, s string) bool {
	res, err := d.Manager.History(job, 0, 1)
	if err != nil {
		return false
	}
	for _, e := range res.Events {
		if strings.Contains(e.Message, s) {
			return true
		}
	}
	return false
}

// TestProbeLink: a server behind a shaped link (tc tbf on its namespace's
// interface: the network lab, as root) — a probe of a worker says the
// server's link is slow: every worker's round trips to it went up, its own
// handling did not.
func TestProbeLink(t *testing.T) {
	if testing.Short() {
		t.Skip("an MNIST job in the network lab")
	}
	if why := labUnavailable(); why != "" {
		t.Skipf("the network lab cannot run here: %s", why)
	}
	lab, d := labDaemon(t)
	defer d.Close(true)
	name := untilTraining(t, d, `
name: probe-link
model: {kind: softmax}
data: {kind: mnist, epochs: 20, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 2, workers: 2, block_bytes: 8192}
sync: {model: bsp}
`)
	lab.slow("server-1", "4mbit")
	p, err := d.Manager.Probe(context.Background(), name, "worker-0", 20*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	logProbe(t, p)
	if p.Verdict != "server" || p.Subject != "server-1" || p.Cause != "link" {
		t.Errorf("probe of worker-0: %s %q %q (%s); want server server-1 link", p.Verdict, p.Subject, p.Cause, p.Detail)
	}
}
