package role

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/runtime/worker"
)

// AgentChannel is the role's end of the local channel to its agent: two
// pipes carrying size-delimited protobuf messages (RoleMessage out,
// RoleCommand in).
type AgentChannel struct {
	mu     sync.Mutex
	out    io.Writer
	in     *bufio.Reader
	prober *prober // answers probes once the role runs (probe.go)
}

// NewAgentChannel wraps the two pipe ends.
func NewAgentChannel(out io.Writer, in io.Reader) *AgentChannel {
	return &AgentChannel{out: out, in: bufio.NewReader(in)}
}

// Send writes one message to the agent.
func (c *AgentChannel) Send(m *agentpb.RoleMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := protodelim.MarshalTo(c.out, m)
	return err
}

// Recv reads one command from the agent.
func (c *AgentChannel) Recv() (*agentpb.RoleCommand, error) {
	m := &agentpb.RoleCommand{}
	if err := (protodelim.UnmarshalOptions{MaxSize: 1 << 20}).UnmarshalFrom(c.in, m); err != nil {
		return nil, err
	}
	return m, nil
}

// actions hands each action the agent sends to take, in order, until the
// channel closes or take says to stop.
func (c *AgentChannel) actions(ctx context.Context, log *slog.Logger, take func(*agentpb.ActionCommand) bool) {
	for {
		m, err := c.Recv()
		if err != nil {
			if err != io.EOF && ctx.Err() == nil {
				log.Warn("agent channel closed", "err", err)
			}
			return
		}
		if s := m.GetStacks(); s != nil {
			go c.sendStacks(s) // kelpie job stacks (stacks.go)
			continue
		}
		if p := m.GetProbe(); p != nil {
			go c.sendProbe(p) // kelpie job probe (probe.go)
			continue
		}
		if a := m.GetAction(); a != nil && !take(a) {
			return
		}
	}
}

// ack sends an action's outcome to the agent.
func (c *AgentChannel) ack(a *agentpb.ActionAck) error {
	return c.Send(&agentpb.RoleMessage{Body: &agentpb.RoleMessage_Ack{Ack: a}})
}

// receive turns the agent's actions into worker commands until the channel
// closes. An action the worker cannot take is acknowledged as failed here.
func (c *AgentChannel) receive(ctx context.Context, log *slog.Logger, me string, out chan<- worker.Command) {
	c.actions(ctx, log, func(a *agentpb.ActionCommand) bool {
		cmd, err := workerCommand(a, me)
		if err != nil {
			_ = c.ack(&agentpb.ActionAck{ActionId: a.ActionId, Error: err.Error()})
			return true
		}
		select {
		case out <- cmd:
			return true
		case <-ctx.Done():
			return false
		}
	})
}

// workerCommand converts an ActionCommand for the worker loop.
//
// A new batch split (ADJUST_BS, and the re-split that comes with
// ADD_WORKER and REMOVE_WORKER) names workers; the worker loop takes sizes
// by index, so names become indexes (worker-3 -> 3). A worker the split
// does not name trains on nothing from its iteration on. With gradient
// accumulation, a worker's samples per iteration are its micro-batch size
// times its accumulation count.
func workerCommand(a *agentpb.ActionCommand, me string) (worker.Command, error) {
	switch a.Kind {
	case "ADJUST_BS", "ADD_WORKER", "REMOVE_WORKER":
		cmd := worker.Command{ID: a.ActionId, At: a.TargetIteration, Leave: a.Kind == "REMOVE_WORKER" && a.Target == me}
		for n, b := range a.BatchSizes {
			i, ok := spec.WorkerIndex(n)
			if !ok {
				return worker.Command{}, fmt.Errorf("%s %s: %q is not a worker name", a.Kind, a.ActionId, n)
			}
			for len(cmd.Local) <= i {
				cmd.Local = append(cmd.Local, 0)
				cmd.Accum = append(cmd.Accum, 1)
			}
			c := max(int(a.Accumulation[n]), 1)
			cmd.Local[i], cmd.Accum[i] = int(b)*c, c
		}
		if len(cmd.Local) == 0 {
			return worker.Command{}, fmt.Errorf("%s %s: no batch sizes", a.Kind, a.ActionId)
		}
		return cmd, nil
	case "ADJUST_LR":
		f, ok := a.LrScale[me]
		if !ok || f <= 0 {
			return worker.Command{}, fmt.Errorf("ADJUST_LR %s: no positive factor for %s", a.ActionId, me)
		}
		return worker.Command{ID: a.ActionId, At: a.TargetIteration, LRScale: f}, nil
	case "REASSIGN", "ADD_SERVER", "REMOVE_SERVER":
		if a.Assignment == nil {
			return worker.Command{}, fmt.Errorf("%s %s: no block table", a.Kind, a.ActionId)
		}
		t := job.TableFrom(a.Assignment)
		return worker.Command{ID: a.ActionId, At: a.TargetIteration, Table: &t, Addrs: a.Assignment.Servers}, nil
	default:
		return worker.Command{}, fmt.Errorf("action %s: a worker process cannot apply %s", a.ActionId, a.Kind)
	}
}
