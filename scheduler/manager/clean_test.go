package manager

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// TestAgentStringsCleaned: what an agent's stream says — its host, how its
// role last ended, a primary's report of the secondaries it could not
// reach — reaches the event list and the node's record without the
// terminal escapes in it, and bounded.
func TestAgentStringsCleaned(t *testing.T) {
	m, j := testJob(t, Config{}, "dirty", 2, 1)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	agentpb.RegisterAgentServer(srv, m.Agents())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(lis) }()
	defer func() { srv.Stop(); wg.Wait() }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := agentpb.NewAgentClient(cc).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const escape = "\x1b]0;pwned\x07\x1b[2K\r\x1b[32mAPPROVED\x1b[0m\u202e"
	host := "host-" + escape + strings.Repeat("x", 400)
	for _, msg := range []*agentpb.AgentMessage{
		{Body: &agentpb.AgentMessage_Hello{Hello: &agentpb.AgentHello{Job: "dirty", Node: "worker-0", Role: coordinatorpb.Role_ROLE_WORKER,
			Host: host, AgentPid: 1}}},
		{Body: &agentpb.AgentMessage_Heartbeat{Heartbeat: &agentpb.Heartbeat{Status: &agentpb.NodeStatus{
			State: agentpb.NodeState_NODE_STATE_RESTARTING, Restarts: 1, LastExit: "exit 1 " + escape}}}},
	} {
		if err := s.Send(msg); err != nil {
			t.Fatal(err)
		}
	}
	var connected, exited string
	for deadline := time.Now().Add(30 * time.Second); connected == "" || exited == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent's hello and heartbeat made no events (connected %q, exited %q)", connected, exited)
		}
		evs, _ := m.EventsSince(0, 1000)
		for _, e := range evs {
			switch {
			case strings.Contains(e.Message, "agent of worker-0 connected"):
				connected = e.Message
			case strings.Contains(e.Message, "exit 1"):
				exited = e.Message
			}
		}
	}
	pauseActor(j)
	stored := j.nodes["worker-0"].host
	resumeActor(j)
	for what, got := range map[string]string{"connected event": connected, "exit event": exited, "host": stored} {
		if strings.ContainsAny(got, "\x1b\x07\r\u202e") {
			t.Errorf("%s keeps control characters: %q", what, got)
		}
		if !strings.Contains(got, "APPROVED") {
			t.Errorf("%s %q lost the printable text", what, got)
		}
	}
	if len(stored) > 256 {
		t.Errorf("host stored with %d bytes; want at most 256", len(stored))
	}
}
