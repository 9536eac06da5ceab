package role

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/pspb"
)

// Server command kinds: what the scheduler asks of a parameter server,
// through the server's own agent (it never calls a server itself).
const (
	CmdSetSync  = "SET_SYNC" // new synchronisation settings (SET_SYNC, BACKUP_WORKERS)
	CmdRetable  = "RETABLE"  // a new block table, followed from the command's target iteration
	CmdShutdown = "SHUTDOWN" // stop serving: the job is over, or the server left the table
	// CmdCheckpoint writes the server's snapshot now (the
	// checkpoint-and-restart baseline); the ack's applied_iteration is the
	// V_train it holds.
	CmdCheckpoint = "CHECKPOINT"
)

// RetableRetry is how long a server still applying the previous table
// change (its last blocks in flight) keeps trying to take the next one.
const RetableRetry = 30 * time.Second

// ParameterServer is what a server command acts on: a parameter server's
// administrative calls (runtime/server.Server implements them).
type ParameterServer interface {
	SetSync(context.Context, *pspb.SyncSettings) (*pspb.SetSyncResponse, error)
	Retable(context.Context, *pspb.RetableRequest) (*pspb.RetableResponse, error)
	Shutdown(context.Context, *pspb.ShutdownRequest) (*pspb.ShutdownResponse, error)
	Checkpoint(context.Context, *pspb.StatsRequest) (*pspb.ServerStats, error)
}

// serveServer applies the commands the agent hands a parameter server,
// one at a time in the order they come, and acks each on the channel,
// until the channel closes or ctx ends. me is the server's index in the
// job's tables.
func (c *AgentChannel) serveServer(ctx context.Context, log *slog.Logger, ps ParameterServer, me int) {
	c.actions(ctx, log, func(a *agentpb.ActionCommand) bool {
		if err := c.ack(serverCommand(ctx, ps, me, a, RetableRetry)); err != nil {
			log.Warn("ack to agent failed", "action", a.ActionId, "err", err)
			return false
		}
		return true
	})
}

// serverCommand applies one command to a parameter server and says how it
// went. A RETABLE the server refuses because it is still applying the
// previous table is tried again for up to retry.
func serverCommand(ctx context.Context, ps ParameterServer, me int, a *agentpb.ActionCommand, retry time.Duration) *agentpb.ActionAck {
	ack := &agentpb.ActionAck{ActionId: a.ActionId}
	var err error
	switch a.Kind {
	case CmdSetSync:
		if a.Sync == nil {
			err = fmt.Errorf("%s %s: no settings", a.Kind, a.ActionId)
			break
		}
		var r *pspb.SetSyncResponse
		if r, err = ps.SetSync(ctx, a.Sync); err == nil {
			ack.Released = r.GetReleased()
		}
	case CmdRetable:
		if a.Assignment == nil {
			err = fmt.Errorf("%s %s: no block table", a.Kind, a.ActionId)
			break
		}
		err = retable(ctx, ps, &pspb.RetableRequest{Assignment: a.Assignment, SwitchIteration: a.TargetIteration, Me: int32(me)}, retry)
	case CmdShutdown:
		_, err = ps.Shutdown(ctx, &pspb.ShutdownRequest{Reason: a.Reason})
	case CmdCheckpoint:
		var st *pspb.ServerStats
		if st, err = ps.Checkpoint(ctx, &pspb.StatsRequest{}); err == nil {
			ack.AppliedIteration = st.GetVTrain()
		}
	default:
		err = fmt.Errorf("action %s: a parameter server cannot apply %s", a.ActionId, a.Kind)
	}
	if err != nil {
		ack.Error = err.Error()
	} else {
		ack.Applied = true
	}
	return ack
}

// retable moves the server to a new table, trying again every 50 ms for up
// to retry while it is still applying the previous one.
func retable(ctx context.Context, ps ParameterServer, req *pspb.RetableRequest, retry time.Duration) error {
	deadline := time.Now().Add(retry)
	for {
		_, err := ps.Retable(ctx, req)
		if status.Code(err) != codes.FailedPrecondition || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
