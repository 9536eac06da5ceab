package role

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/job"
	"github.com/kelpie/kelpie/runtime/worker"
)

// AgentChannel is the role's end of the local channel to its agent: two
// pipes carrying size-delimited protobuf messages (RoleMessage out,
// RoleCommand in).
type AgentChannel struct {
	mu  sync.Mutex
	out io.Writer
	in  *bufio.Reader
}

// NewAgentChannel wraps the two pipe ends.
func NewAgentChannel(out io.Writer, in io.Reader) *AgentChannel {
	return &AgentChannel{out: out, in: bufio.NewReader(in)}
}

// Send writes one message to the agent.
func (c *AgentChannel) Send(m *kelpiepb.RoleMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := protodelim.MarshalTo(c.out, m)
	return err
}

// Recv reads one command from the agent.
func (c *AgentChannel) Recv() (*kelpiepb.RoleCommand, error) {
	m := &kelpiepb.RoleCommand{}
	if err := (protodelim.UnmarshalOptions{MaxSize: 1 << 20}).UnmarshalFrom(c.in, m); err != nil {
		return nil, err
	}
	return m, nil
}

// receive turns the agent's actions into worker commands until the channel
// closes. An action the worker cannot take is acknowledged as failed here.
func (c *AgentChannel) receive(ctx context.Context, log *slog.Logger, workers []string, out chan<- worker.Command) {
	for {
		m, err := c.Recv()
		if err != nil {
			if err != io.EOF && ctx.Err() == nil {
				log.Warn("agent channel closed", "err", err)
			}
			return
		}
		a := m.GetAction()
		if a == nil {
			continue
		}
		cmd, err := workerCommand(a, workers)
		if err != nil {
			_ = c.Send(&kelpiepb.RoleMessage{Body: &kelpiepb.RoleMessage_Ack{Ack: &kelpiepb.ActionAck{ActionId: a.ActionId, Error: err.Error()}}})
			continue
		}
		select {
		case out <- cmd:
		case <-ctx.Done():
			return
		}
	}
}

// workerCommand converts an ActionCommand for the worker loop.
func workerCommand(a *kelpiepb.ActionCommand, workers []string) (worker.Command, error) {
	switch a.Kind {
	case "ADJUST_BS":
		local := make([]int, len(workers))
		for i, n := range workers {
			b, ok := a.BatchSizes[n]
			if !ok {
				return worker.Command{}, fmt.Errorf("ADJUST_BS %s: no batch size for %s", a.ActionId, n)
			}
			local[i] = int(b)
		}
		for n := range a.BatchSizes {
			if !contains(workers, n) {
				return worker.Command{}, fmt.Errorf("ADJUST_BS %s: %s is not a worker of this job", a.ActionId, n)
			}
		}
		return worker.Command{ID: a.ActionId, Local: local, At: a.TargetIteration}, nil
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

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
