package manager

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/kelpie/kelpie/agent"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// The broadcast tests run the scheduler's Agent service on a loopback gRPC
// server and real agents (agent.Agent, each with its peer service) that
// start this test binary as their role process: fakeRole, which records
// every action it is handed in a file of its node and acks it at the
// action's target iteration, as a worker does.

// envRoleDir switches the test binary into fakeRole, writing to the
// directory it names.
const envRoleDir = "KELPIE_TEST_FAKE_ROLE_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(envRoleDir); dir != "" && len(os.Args) > 1 && os.Args[1] == "role" {
		fakeRole(dir, os.Args[2:])
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeRole plays a worker process on the agent's local channel (fds 3 and
// 4): each action it is handed is written to DIR/NODE as "ID ITERATION"
// and acked as applied at its target iteration.
func fakeRole(dir string, args []string) {
	node := ""
	if i := slices.Index(args, "--node"); i >= 0 && i+1 < len(args) {
		node = args[i+1]
	}
	out, in := os.NewFile(3, "report"), bufio.NewReader(os.NewFile(4, "command"))
	for {
		c := &agentpb.RoleCommand{}
		if err := protodelim.UnmarshalFrom(in, c); err != nil {
			return
		}
		a := c.GetAction()
		if a == nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, node), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return
		}
		fmt.Fprintf(f, "%s %d\n", a.ActionId, a.TargetIteration)
		f.Close()
		ack := &agentpb.ActionAck{ActionId: a.ActionId, Applied: true, AppliedIteration: a.TargetIteration}
		if _, err := protodelim.MarshalTo(out, &agentpb.RoleMessage{Body: &agentpb.RoleMessage_Ack{Ack: ack}}); err != nil {
			return
		}
	}
}

// agentCluster is a manager's job with its Agent service served on
// loopback and a real agent per named worker.
type agentCluster struct {
	m    *Manager
	j    *jobState
	dir  string // the fake roles' records
	addr string // the Agent service
}

// startAgents serves m's Agent service and starts a real agent for each
// named node of j; they stop when the test ends.
func startAgents(t *testing.T, m *Manager, j *jobState, nodes ...string) *agentCluster {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv(envRoleDir, dir) // the roles inherit it
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentpb.RegisterAgentServer(srv, m.Agents())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, node := range nodes {
		a := agent.New(agent.Options{Scheduler: lis.Addr().String(), Job: j.spec.Name, Node: node, Role: coordinatorpb.Role_ROLE_WORKER,
			Exe: exe, Out: io.Discard, Log: log, Heartbeat: 100 * time.Millisecond, PeerListen: "127.0.0.1:0", PeerTimeout: 5 * time.Second})
		wg.Add(1)
		go func() { defer wg.Done(); _ = a.Run(ctx) }()
	}
	t.Cleanup(func() {
		cancel()
		srv.Stop()
		wg.Wait()
	})
	c := &agentCluster{m: m, j: j, dir: dir, addr: lis.Addr().String()}
	c.waitFor(t, "every agent connected with its peer service", func() bool {
		for _, node := range nodes {
			if n := j.nodes[node]; n == nil || n.conn == nil || n.peerAddr == "" {
				return false
			}
		}
		return true
	})
	return c
}

// waitFor waits (on the real clock, at most 30 s) for cond, which is
// checked under the manager's lock.
func (c *agentCluster) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pauseActor(c.j)
		ok := cond()
		resumeActor(c.j)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// applied is what each node's role was handed, by node: "ID ITERATION"
// lines.
func (c *agentCluster) applied(t *testing.T, nodes ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, n := range nodes {
		b, err := os.ReadFile(filepath.Join(c.dir, n))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		out[n] = strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", "@"))
	}
	return out
}

// trigger triggers an ADJUST_BS and waits for it to apply; it returns the
// action and its broadcast.
func (c *agentCluster) trigger(t *testing.T) (*consolepb.Action, *broadcast) {
	t.Helper()
	id, err := c.m.Trigger(c.j.spec.Name, &consolepb.Action{Kind: "ADJUST_BS",
		BatchSizes: map[string]int32{"worker-0": 16, "worker-1": 16, "worker-2": 32}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	var a *consolepb.Action
	c.waitFor(t, "the ADJUST_BS applied", func() bool {
		a = c.j.byID[id]
		return a.State == ActApplied || a.State == ActFailed
	})
	pauseActor(c.j)
	defer resumeActor(c.j)
	if a.State != ActApplied {
		t.Fatalf("action %s is %s (%s); want applied", id, a.State, a.Error)
	}
	return a, c.j.broadcasts[id]
}

// checkSameIteration checks that each worker's role was handed the action
// once, at its target iteration, and that it applied there.
func checkSameIteration(t *testing.T, c *agentCluster, a *consolepb.Action) {
	t.Helper()
	want := fmt.Sprintf("%s@%d", a.Id, a.TargetIteration)
	for node, got := range c.applied(t, "worker-0", "worker-1", "worker-2") {
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s's role was handed %v; want once %s", node, got, want)
		}
	}
	if a.TargetIteration <= 0 || a.AppliedIteration != a.TargetIteration {
		t.Errorf("action applied at iteration %d, target %d; want the target", a.AppliedIteration, a.TargetIteration)
	}
}

// TestBroadcastThroughPrimary: a global action reaches three workers
// through one primary agent: the scheduler sends exactly one command (to
// the primary, with the two others as peers), and every worker's role
// applies it at the same target iteration and acks it on its own agent's
// stream (the gate applies the action on the three acks).
func TestBroadcastThroughPrimary(t *testing.T) {
	m, j := testJob(t, Config{}, "bcast", 3, 1)
	c := startAgents(t, m, j, "worker-0", "worker-1", "worker-2")
	a, b := c.trigger(t)
	if b == nil {
		t.Fatal("no broadcast recorded")
	}
	// The secondaries' acks can apply the action before the primary's
	// report of its forwarding is taken in (they come on other streams).
	c.waitFor(t, "the primary's report", func() bool { return b.closed })
	pauseActor(j)
	defer resumeActor(j)
	if b.sent[routePrimary] != 1 || b.sent[routeDirect] != 0 || b.sent[routeFallback] != 0 {
		t.Errorf("the scheduler sent %v; want one command, to the primary", b.sent)
	}
	if !slices.Contains([]string{"worker-0", "worker-1", "worker-2"}, b.primary) || len(b.peers) != 2 || slices.Contains(b.peers, b.primary) {
		t.Errorf("primary %s, secondaries %v; want one worker and the two others", b.primary, b.peers)
	}
	for _, p := range b.peers {
		if b.settled[p] != routePrimary {
			t.Errorf("%s got the command by %q; want from the primary", p, b.settled[p])
		}
	}
	checkSameIteration(t, c, a)
}

// TestBroadcastFallback: the primary cannot reach one secondary (its
// registered peer address is dead): it says so, and the scheduler sends
// that one the command itself; all three still apply it at one iteration.
func TestBroadcastFallback(t *testing.T) {
	m, j := testJob(t, Config{}, "bfall", 3, 1)
	c := startAgents(t, m, j, "worker-0", "worker-1", "worker-2")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	pauseActor(j)
	j.nodes["worker-2"].peerAddr = dead
	j.pickPrimary = func([]string) string { return "worker-0" }
	resumeActor(j)

	a, b := c.trigger(t)
	pauseActor(j)
	defer resumeActor(j)
	if b.primary != "worker-0" || b.sent[routePrimary] != 1 || b.sent[routeFallback] != 1 || b.sent[routeDirect] != 0 {
		t.Errorf("primary %s, sent %v; want worker-0, one command to it and one fallback", b.primary, b.sent)
	}
	if b.settled["worker-1"] != routePrimary {
		t.Errorf("worker-1 got it by %q; want from the primary", b.settled["worker-1"])
	}
	if why := b.settled["worker-2"]; !strings.Contains(why, "could not reach worker-2: Unavailable") {
		t.Errorf("worker-2 got it by %q; want the scheduler's fallback after the primary could not reach it", why)
	}
	checkSameIteration(t, c, a)
}

// TestBroadcastPrimarySilent: the primary takes the command and is never
// heard of again (its agent hangs): after forwardTimeout on the manager's
// clock the scheduler sends the command to every secondary itself, and
// the action does not hang; the primary's own ack is what the gate's ack
// deadline is for (here it comes late).
func TestBroadcastPrimarySilent(t *testing.T) {
	clk := clock.NewFake(time.Now())
	m, j := testJob(t, Config{Clock: clk}, "bsilent", 3, 1)
	c := startAgents(t, m, j, "worker-1", "worker-2")
	// worker-0's "agent" is a stream nobody reads, with a peer address.
	silent := &agentConn{out: make(chan *agentpb.SchedulerMessage, 8), done: make(chan struct{})}
	pauseActor(j)
	j.nodes["worker-0"].conn, j.nodes["worker-0"].peerAddr = silent, "127.0.0.1:1"
	j.pickPrimary = func([]string) string { return "worker-0" }
	resumeActor(j)

	before := clk.Waiters()
	id, err := m.Trigger(j.spec.Name, &consolepb.Action{Kind: "ADJUST_BS",
		BatchSizes: map[string]int32{"worker-0": 16, "worker-1": 16, "worker-2": 32}}, "test")
	if err != nil {
		t.Fatal(err)
	}
	var cmd *agentpb.ActionCommand
	select {
	case msg := <-silent.out:
		cmd = msg.GetCommand()
	case <-time.After(10 * time.Second):
		t.Fatal("the primary got no command")
	}
	if !cmd.Primary || len(cmd.Peers) != 2 {
		t.Fatalf("the primary got %v; want primary with two peers", cmd)
	}
	for clk.Waiters() == before { // the scheduler waits for the primary's report on its clock
		time.Sleep(time.Millisecond)
	}
	if got := c.applied(t, "worker-1", "worker-2"); len(got["worker-1"])+len(got["worker-2"]) != 0 {
		t.Fatalf("secondaries applied %v before the fallback", got)
	}
	clk.Advance(forwardTimeout)
	c.waitFor(t, "worker-1 and worker-2 acked", func() bool {
		return len(j.gate.Get(id).Awaiting()) == 1
	})
	takeOn(m, j, j.nodes["worker-0"], &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Ack{Ack: &agentpb.ActionAck{
		ActionId: id, Applied: true, AppliedIteration: cmd.TargetIteration}}})
	pauseActor(j)
	a, b := j.byID[id], j.broadcasts[id]
	sent := fmt.Sprint(b.sent)
	why := b.settled["worker-1"]
	resumeActor(j)
	if a.State != ActApplied {
		t.Fatalf("action %s is %s; want applied", id, a.State)
	}
	if sent != "map[fallback:2 primary:1]" || !strings.Contains(why, "no report from the primary worker-0") {
		t.Errorf("sent %s, worker-1 by %q; want one command to the primary, then two fallbacks for its silence", sent, why)
	}
	want := fmt.Sprintf("%s@%d", id, cmd.TargetIteration)
	for node, got := range c.applied(t, "worker-1", "worker-2") {
		if len(got) != 1 || got[0] != want {
			t.Errorf("%s's role was handed %v; want once %s", node, got, want)
		}
	}
}
