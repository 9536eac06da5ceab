package role

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/server"
)

// TestServerCommands: the scheduler's commands reach a parameter server
// over its agent channel (the pipes an agent hands its role) and each is
// acked on it: a new sync model, a new table (again: already there), a
// command with its argument missing or of a kind a server does not apply
// (failed, naming why), and shutdown (the server is told, with the reason).
func TestServerCommands(t *testing.T) {
	ps, err := server.New(server.Config{Name: "server-0", Sync: syncmodel.Config{Model: syncmodel.BSP}, Workers: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	ps.Install(blocks.Table{Servers: 1}, 0, nil)
	cmdR, cmdW := io.Pipe()
	ackR, ackW := io.Pipe()
	ch := NewAgentChannel(ackW, cmdR)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() {
		defer close(served)
		ch.serveServer(ctx, slog.New(slog.DiscardHandler), ps, 0)
		ackW.Close()
	}()
	acks := NewAgentChannel(io.Discard, ackR)
	table := &coordinatorpb.Assignment{Version: 1, Servers: []string{"127.0.0.1:1"}}
	for _, tt := range []struct {
		cmd     *agentpb.ActionCommand
		wantErr string
	}{
		{&agentpb.ActionCommand{ActionId: "a-1/sync", Kind: CmdSetSync, Sync: &pspb.SyncSettings{Model: "ssp", Staleness: 2, Pull: "lazy"}}, ""},
		{&agentpb.ActionCommand{ActionId: "a-2/sync", Kind: CmdSetSync, Sync: &pspb.SyncSettings{Model: "ssp", Staleness: -1}}, "staleness"},
		{&agentpb.ActionCommand{ActionId: "a-3/sync", Kind: CmdSetSync}, "no settings"},
		{&agentpb.ActionCommand{ActionId: "a-4/retable", Kind: CmdRetable, Assignment: table, TargetIteration: 5}, ""},
		{&agentpb.ActionCommand{ActionId: "a-5/retable", Kind: CmdRetable, Assignment: table, TargetIteration: 5}, ""},
		{&agentpb.ActionCommand{ActionId: "a-6/retable", Kind: CmdRetable}, "no block table"},
		{&agentpb.ActionCommand{ActionId: "a-7", Kind: "REMOVE_SERVER", Target: "server-0"}, "cannot apply REMOVE_SERVER"},
		{&agentpb.ActionCommand{ActionId: "a-8/shutdown", Kind: CmdShutdown, Reason: "job finished"}, ""},
	} {
		if _, err := protodelim.MarshalTo(cmdW, &agentpb.RoleCommand{Body: &agentpb.RoleCommand_Action{Action: tt.cmd}}); err != nil {
			t.Fatal(err)
		}
		m := &agentpb.RoleMessage{}
		if err := (protodelim.UnmarshalOptions{}).UnmarshalFrom(acks.in, m); err != nil {
			t.Fatalf("%s: no ack: %v", tt.cmd.ActionId, err)
		}
		ack := m.GetAck()
		switch {
		case ack.GetActionId() != tt.cmd.ActionId:
			t.Errorf("ack for %q, want %q", ack.GetActionId(), tt.cmd.ActionId)
		case tt.wantErr == "" && (!ack.Applied || ack.Error != ""):
			t.Errorf("%s: ack %v, want applied", tt.cmd.ActionId, ack)
		case tt.wantErr != "" && (ack.Applied || !strings.Contains(ack.Error, tt.wantErr)):
			t.Errorf("%s: ack %v, want an error with %q", tt.cmd.ActionId, ack, tt.wantErr)
		}
	}
	if st, err := ps.Stats(ctx, &pspb.StatsRequest{}); err != nil || st.AssignmentVersion != 1 {
		t.Errorf("server stats %v, %v: want table v1", st, err)
	}
	select {
	case why := <-ps.ShutdownRequested():
		if why != "job finished" {
			t.Errorf("shutdown reason %q", why)
		}
	default:
		t.Error("SHUTDOWN acked but the server was not told")
	}
	cmdW.Close()
	<-served
}
