package daemon

import (
	"context"
	"math"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// hangSpec: a BSP job whose hang bound is short (train.hang_min 2s,
// hang_factor 5), so a stopped worker makes it hung in seconds.
const hangSpec = `
name: stuck
model: {kind: softmax}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 64, lr: 0.1, hang_min: 2s, hang_factor: 5}
cluster: {servers: 1, workers: 2}
sync: {model: bsp}
`

// TestHangTriage runs a real job (scheduler, agents and roles as separate
// processes on 127.0.0.1), stops worker-1's process with SIGSTOP and
// checks: the job shows as hung naming worker-1 (and the server holding
// the others' pushes for it); the stacks of every node are collected
// through the agents (the stopped role named with its process state), an
// operator's command, refused to a viewer; once worker-1 goes on
// (SIGCONT) the job leaves the hung state and completes, and its goodput
// phases add up to its age within 2 %, with ETA checks at 25/50/75 %.
func TestHangTriage(t *testing.T) {
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Tokens: writeTokens(t),
		Exe: kelpieBin, NodeLog: logWriter{t}, Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	c, err := client.Dial(ctx, d.HTTPAddr(), "op-token", client.WithSubscription([]string{"stuck"}, 10, 10), client.WithHandler(w.handle))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := d.Manager.Submit(hangSpec, "test"); err != nil {
		t.Fatal(err)
	}
	_ = c.Subscribe(ctx, []string{"stuck"})
	v := w.until(t, "both workers training", time.Minute, func(j *consolepb.JobView) bool {
		w1 := node(j, "worker-1")
		return j.State == "running" && j.Iteration > 50 && w1 != nil && w1.Pid != 0 && w1.State == "running"
	})
	pid := int(node(v, "worker-1").Pid)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	hung := w.until(t, "the job hung", time.Minute, func(j *consolepb.JobView) bool { return j.State == "hung" })
	if h := hung.Hung; h == nil || !slices.Equal(h.Missing, []string{"worker-1"}) || !slices.Equal(h.Holding, []string{"server-0"}) {
		t.Errorf("hung view %v: want worker-1 missing, server-0 holding pulls for it", h)
	} else {
		t.Logf("hung: since %v, bound %.1fs, missing %v, holding %v", h.Since.AsTime(), h.BoundS, h.Missing, h.Holding)
	}

	// A viewer may not collect stacks.
	vc, err := client.Dial(ctx, d.HTTPAddr(), "view-token")
	if err != nil {
		t.Fatal(err)
	}
	if err := vc.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	stacksCmd := &consolepb.Command{Kind: &consolepb.Command_Stacks{Stacks: &consolepb.GetStacks{Job: "stuck", TimeoutS: 3}}}
	if res, err := vc.Send(ctx, stacksCmd); err != nil || res.Ok {
		t.Errorf("a viewer's stacks command: %v, %v; want it refused", res, err)
	}
	vc.Close()
	res, err := c.Send(ctx, stacksCmd)
	if err != nil || !res.Ok {
		t.Fatalf("stacks: %v, %v", res, err)
	}
	got := map[string]*consolepb.NodeStacks{}
	for _, s := range res.Stacks {
		got[s.Node] = s
	}
	for _, n := range []string{"server-0", "worker-0", "worker-1"} {
		s := got[n]
		if s == nil || !strings.Contains(s.Text, "--- agent "+n) || !strings.Contains(s.Text, "goroutine ") {
			t.Errorf("%s: no agent stacks in %v", n, s)
			continue
		}
		if n == "worker-1" {
			if !strings.Contains(s.Error, "did not answer") || !strings.Contains(s.Error, "stopped") {
				t.Errorf("worker-1 (stopped): error %q; want it named as not answering, stopped", s.Error)
			}
		} else if !strings.Contains(s.Text, "--- role "+n) || !strings.Contains(s.Text, "runtime/role") {
			t.Errorf("%s: no role stacks in %q", n, s.Text[:min(len(s.Text), 2000)])
		}
	}
	if saved, err := d.Manager.Stacks(ctx, "stuck", 0, true, "test"); err != nil || len(saved) != len(res.Stacks) {
		t.Errorf("saved stacks: %d nodes, %v; want %d", len(saved), err, len(res.Stacks))
	}

	_ = syscall.Kill(pid, syscall.SIGCONT)
	resumed = true
	w.until(t, "the job unhung", time.Minute, func(j *consolepb.JobView) bool { return j.State != "hung" && j.Hung == nil })
	final := w.until(t, "the job to complete", 2*time.Minute, func(j *consolepb.JobView) bool { return j.State == "completed" })
	checkGoodput(t, final)
}

// checkGoodput checks an ended job's ledger: phases add up to its age
// within 2 %, the age is its wall-clock life, it computed, and its ETA
// checks have actual times.
func checkGoodput(t *testing.T, v *consolepb.JobView) {
	t.Helper()
	g := v.Goodput
	if g == nil {
		t.Fatalf("no goodput in %v", v)
	}
	var sum float64
	for _, s := range g.Phases {
		sum += s
	}
	age := g.GetAgeS()
	life := v.Ended.AsTime().Sub(v.Submitted.AsTime()).Seconds()
	t.Logf("goodput: age %.2fs (life %.2fs), phases %v (sum %.2fs), productive %.2f, checks %v", age, life, g.Phases, sum, g.GetProductiveShare(), g.EtaChecks)
	if math.Abs(sum-age) > 0.02*age || math.Abs(age-life) > 0.02*life {
		t.Errorf("phases add up to %.2fs, age %.2fs, the job lived %.2fs: want them within 2 %%", sum, age, life)
	}
	if g.Phases["computing"] <= 0 || g.Phases["queued"] <= 0 || g.GetProductiveShare() <= 0 {
		t.Errorf("phases %v, productive share %v: want computing, queued and a productive share", g.Phases, g.GetProductiveShare())
	}
	if len(g.EtaChecks) != 3 {
		t.Errorf("ETA checks %v: want 25, 50 and 75 %%", g.EtaChecks)
	}
	for _, c := range g.EtaChecks {
		if c.ActualS == nil || c.GetActualS() <= 0 {
			t.Errorf("ETA check %v: no actual time", c)
		}
	}
}
