package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// slowScheduler is a scheduler that reads its agents' streams slowly and
// records the node states they send and how each stream ended.
type slowScheduler struct {
	agentpb.UnimplementedAgentServer
	gap    time.Duration // before each read
	mu     sync.Mutex
	states []agentpb.NodeState
	ends   []error
}

func (s *slowScheduler) Connect(stream agentpb.Agent_ConnectServer) error {
	for {
		time.Sleep(s.gap)
		m, err := stream.Recv()
		if err != nil {
			s.mu.Lock()
			s.ends = append(s.ends, err)
			s.mu.Unlock()
			return nil
		}
		if hb := m.GetHeartbeat(); hb != nil {
			s.mu.Lock()
			s.states = append(s.states, hb.Status.State)
			s.mu.Unlock()
		}
	}
}

// TestLastStateDelivered: a role that finishes at once; the agent's last
// messages (the role's DONE) reach a scheduler that reads slowly, and the
// agent ends its stream by closing its side once everything is sent (the
// scheduler reads to io.EOF) rather than by cancelling it, which drops
// what the scheduler has not read yet.
func TestLastStateDelivered(t *testing.T) {
	exe, err := exec.LookPath("true")
	if err != nil {
		t.Skip(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sched := &slowScheduler{gap: 30 * time.Millisecond}
	srv := grpc.NewServer()
	agentpb.RegisterAgentServer(srv, sched)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	a := New(Options{Scheduler: l.Addr().String(), Job: "j", Node: "worker-0", Role: coordinatorpb.Role_ROLE_WORKER,
		Exe: exe, PeerListen: "off", Out: io.Discard, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("Run = %v; want nil (the role finished)", err)
	}
	srv.GracefulStop() // the scheduler reads its streams to their end
	sched.mu.Lock()
	defer sched.mu.Unlock()
	if n := len(sched.states); n == 0 || sched.states[n-1] != agentpb.NodeState_NODE_STATE_DONE {
		t.Errorf("states the scheduler read: %v; want DONE last", sched.states)
	}
	if len(sched.ends) != 1 || !errors.Is(sched.ends[0], io.EOF) {
		t.Errorf("the stream ended with %v; want one io.EOF (the agent closed its side)", sched.ends)
	}
}
