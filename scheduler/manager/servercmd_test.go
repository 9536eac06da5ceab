package manager

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/store"
)

// TestServerCalls: commands reach servers through their agents' streams
// only, and the caller hears each server's ack: all applied (SET_SYNC's
// released pulls add up), one refused (the error names the server), one
// silent (no answer within the timeout, on the manager's clock), and one
// whose agent is away when asked (its command waits for the agent to
// connect, then applies).
func TestServerCalls(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m, j := testJob(t, Config{Clock: clk}, "calls", 2, 2)
	connect := func(node string) *agentConn {
		c := &agentConn{out: make(chan *agentpb.SchedulerMessage, 8), done: make(chan struct{})}
		pauseActor(j)
		j.nodes[node].conn = c
		resumeActor(j)
		return c
	}
	s0, s1 := connect("server-0"), connect("server-1")
	cmds := func(id string) map[string]*agentpb.ActionCommand {
		return map[string]*agentpb.ActionCommand{
			"server-0": {ActionId: id, Kind: serverSetSync, Target: "server-0", Sync: &pspb.SyncSettings{Model: "asp"}},
			"server-1": {ActionId: id, Kind: serverSetSync, Target: "server-1", Sync: &pspb.SyncSettings{Model: "asp"}},
		}
	}
	type result struct {
		acks map[string]*agentpb.ActionAck
		err  error
	}
	ask := func(id string) <-chan result {
		out := make(chan result, 1)
		go func() {
			acks, err := m.askServers(j, cmds(id), serverCallTimeout)
			out <- result{acks, err}
		}()
		return out
	}
	// received is the command an agent got.
	received := func(c *agentConn) *agentpb.ActionCommand {
		t.Helper()
		select {
		case msg := <-c.out:
			return msg.GetCommand()
		case <-time.After(10 * time.Second):
			t.Fatal("no command reached the agent")
			return nil
		}
	}
	ack := func(node string, a *agentpb.ActionAck) {
		takeOn(m, j, j.nodes[node], &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Ack{Ack: a}})
	}

	t.Run("every server applies", func(t *testing.T) {
		done := ask("a-1/sync")
		for node, c := range map[string]*agentConn{"server-0": s0, "server-1": s1} {
			cmd := received(c)
			if cmd.GetKind() != serverSetSync || cmd.GetTarget() != node || cmd.GetSync().GetModel() != "asp" {
				t.Fatalf("%s got %v", node, cmd)
			}
			ack(node, &agentpb.ActionAck{ActionId: cmd.ActionId, Applied: true, Released: 2})
		}
		r := <-done
		if r.err != nil || len(r.acks) != 2 || r.acks["server-0"].Released+r.acks["server-1"].Released != 4 {
			t.Fatalf("acks %v, err %v; want both, 4 pulls released", r.acks, r.err)
		}
	})
	t.Run("a server refuses", func(t *testing.T) {
		done := ask("a-2/sync")
		ack("server-0", &agentpb.ActionAck{ActionId: received(s0).ActionId, Applied: true})
		// An ack from the wrong server answers nothing.
		ack("server-0", &agentpb.ActionAck{ActionId: received(s1).ActionId, Error: "not mine"})
		ack("server-1", &agentpb.ActionAck{ActionId: "a-2/sync", Error: "staleness out of range"})
		r := <-done
		if r.err == nil || r.err.Error() != "server server-1: staleness out of range" {
			t.Fatalf("err %v; want server-1's refusal", r.err)
		}
	})
	t.Run("a server stays silent", func(t *testing.T) {
		before := clk.Waiters()
		done := ask("a-3/sync")
		ack("server-0", &agentpb.ActionAck{ActionId: received(s0).ActionId, Applied: true})
		received(s1)
		for clk.Waiters() == before { // the call waits on the clock
			time.Sleep(time.Millisecond)
		}
		clk.Advance(serverCallTimeout)
		r := <-done
		var se *serverError
		if !errors.As(r.err, &se) || se.node != "server-1" || !errors.Is(r.err, errNoAck) {
			t.Fatalf("err %v; want no answer from server-1", r.err)
		}
		pauseActor(j)
		left := len(j.calls)
		resumeActor(j)
		if left != 0 {
			t.Errorf("%d calls left waiting after the timeout", left)
		}
	})
	t.Run("an agent away when asked", func(t *testing.T) {
		pauseActor(j)
		j.nodes["server-1"].conn = nil
		resumeActor(j)
		done := ask("a-4/sync")
		ack("server-0", &agentpb.ActionAck{ActionId: received(s0).ActionId, Applied: true})
		var pending []*agentpb.ActionCommand
		for len(pending) == 0 {
			pauseActor(j)
			pending = j.pendingCalls("server-1")
			resumeActor(j)
			time.Sleep(time.Millisecond)
		}
		if len(pending) != 1 || pending[0].ActionId != "a-4/sync" || !strings.HasPrefix(pending[0].Target, "server-1") {
			t.Fatalf("commands waiting for server-1's agent: %v", pending)
		}
		// Its agent connects and is sent the command again (Connect's
		// replay); its ack completes the call.
		ack("server-1", &agentpb.ActionAck{ActionId: "a-4/sync", Applied: true})
		if r := <-done; r.err != nil || len(r.acks) != 2 {
			t.Fatalf("acks %v, err %v; want both", r.acks, r.err)
		}
	})
}

// testJob is a job of workers and servers submitted to a manager that
// launches nothing (cfg with its store, log dir and tick filled in),
// closed when the test ends.
func testJob(t *testing.T, cfg Config, name string, workers, servers int) (*Manager, *jobState) {
	t.Helper()
	m := testManager(t, cfg)
	s, err := spec.Parse(name+".yaml", []byte(fmt.Sprintf("name: %s\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\n"+
		"train: {global_batch: 64}\ncluster: {workers: %d, servers: %d}\n", name, workers, servers)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.SubmitSpec(s, "test"); err != nil {
		t.Fatal(err)
	}
	return m, m.jobList()[name]
}

// testManager is a manager on a store of its own that launches nothing and
// ticks only when told (cfg's store, launch, tick and log dir are set),
// closed when the test ends.
func testManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.NoLaunch, cfg.Tick, cfg.LogDir = st, true, time.Hour, t.TempDir()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		st.Close()
	})
	return m
}
