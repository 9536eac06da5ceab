package manager

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/scheduler/clock"
)

// TestTableChangeAckBurst: 512 workers ack one table change (a REASSIGN)
// in a single burst, posted on their streams side by side. Every ack is
// counted by the change's sequence and the change applies. When acks went
// to the change through a 256-slot channel with select/default, a burst
// larger than the channel could drop acks and fail the change with "worker-N
// did not switch" although it did.
func TestTableChangeAckBurst(t *testing.T) {
	const workers = 512
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := testManager(t, Config{Clock: clk})
	s, err := spec.Parse("burst.yaml", []byte(fmt.Sprintf("name: burst\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\n"+
		"train: {global_batch: %d}\ncluster: {workers: %d, servers: 2}\n", 4*workers, workers)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.SubmitSpec(s, "test"); err != nil {
		t.Fatal(err)
	}
	j := m.jobList()["burst"]
	ctx := context.Background()
	conns := map[string]*agentConn{}
	for _, name := range []string{"server-0", "server-1"} {
		if _, err := m.Coordinator().Register(ctx, &coordinatorpb.RegisterRequest{Job: "burst", Node: name,
			Role: coordinatorpb.Role_ROLE_SERVER, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range workers {
		name := spec.WorkerName(i)
		if _, err := m.Coordinator().Register(ctx, &coordinatorpb.RegisterRequest{Job: "burst", Node: name,
			Role: coordinatorpb.Role_ROLE_WORKER, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}
	nodes := j.nodeNames()
	for _, name := range nodes {
		c := &agentConn{out: make(chan *agentpb.SchedulerMessage, 8), done: make(chan struct{})}
		conns[name] = c
		n := j.node(name)
		j.onActor(func() { j.connectForTest(n, c) })
	}
	// The table after the change: every block to the other server.
	old := j.coord.Table()
	assignment := make([]int32, len(old.Blocks))
	for b, r := range old.ServerOf {
		assignment[b] = int32(1 - r)
	}
	id, err := m.Trigger("burst", &consolepb.Action{Kind: "REASSIGN", Assignment: assignment}, "test")
	if err != nil {
		t.Fatal(err)
	}
	command := func(node string) *agentpb.ActionCommand {
		t.Helper()
		select {
		case msg := <-conns[node].out:
			return msg.GetCommand()
		case <-time.After(30 * time.Second):
			t.Fatalf("no command reached %s", node)
			return nil
		}
	}
	// The servers take the table and say so in their counters.
	for _, name := range []string{"server-0", "server-1"} {
		cmd := command(name)
		takeOn(m, j, j.node(name), &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Ack{Ack: &agentpb.ActionAck{
			ActionId: cmd.ActionId, Applied: true}}})
		j.post(j.node(name), &agentpb.AgentMessage{Body: &agentpb.AgentMessage_ServerStats{ServerStats: &pspb.ServerStats{
			AssignmentVersion: old.Version + 1}}})
	}
	// Every worker is told; then all of them ack at once.
	var at int64
	for i := range workers {
		cmd := command(spec.WorkerName(i))
		if cmd.GetActionId() != id {
			t.Fatalf("%s got %v; want action %s", spec.WorkerName(i), cmd, id)
		}
		at = cmd.TargetIteration
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		name := spec.WorkerName(i)
		n := j.node(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			j.post(n, &agentpb.AgentMessage{Body: &agentpb.AgentMessage_Ack{Ack: &agentpb.ActionAck{
				ActionId: id, Applied: true, AppliedIteration: at}}})
		}()
	}
	close(start)
	wg.Wait()
	j.call(func() {}) // every ack has been taken in
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := m.actionView(j, id)
		if v.State == ActApplied {
			if v.AppliedIteration != at {
				t.Errorf("applied at iteration %d; want %d", v.AppliedIteration, at)
			}
			return
		}
		if v.State == ActFailed {
			t.Fatalf("the change failed: %s", v.Error)
		}
		if time.Now().After(deadline) {
			// A lost ack leaves the change waiting for its worker until
			// the switch deadline, which then fails it.
			clk.Advance(switchTimeout)
			time.Sleep(100 * time.Millisecond)
			v = m.actionView(j, id)
			t.Fatalf("the change is %s after %d acks of %d workers (%s); want applied", v.State, workers, workers, v.Error)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// actionView is the action's console record, read on the job's actor.
func (m *Manager) actionView(j *jobState, id string) (out *consolepb.Action) {
	j.call(func() { out = cloneAction(j.byID[id]) })
	return out
}

// nodeNames lists the job's nodes.
func (j *jobState) nodeNames() (out []string) {
	j.call(func() {
		for name := range j.nodes {
			out = append(out, name)
		}
	})
	return out
}

// node is the job's node of that name.
func (j *jobState) node(name string) (n *nodeState) {
	j.call(func() { n = j.nodes[name] })
	return n
}

// connectForTest gives n an agent connection c (on the actor).
func (j *jobState) connectForTest(n *nodeState, c *agentConn) { n.conn = c }

func cloneAction(a *consolepb.Action) *consolepb.Action {
	if a == nil {
		return &consolepb.Action{}
	}
	return &consolepb.Action{Id: a.Id, State: a.State, Error: a.Error, AppliedIteration: a.AppliedIteration}
}
