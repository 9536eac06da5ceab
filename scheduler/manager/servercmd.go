package manager

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/kelpie/kelpie/proto/agentpb"
)

// A parameter server takes the scheduler's commands through its own agent,
// like every other node: the scheduler sends a command on the agent's
// stream, the agent hands it to its role over the local channel, the role
// applies it (runtime/role: SET_SYNC, RETABLE, SHUTDOWN) and acks it back
// the same way. The scheduler never dials a server.

// Server command kinds (runtime/role.CmdSetSync and the others; the
// scheduler imports no runtime package that does I/O, so they are
// repeated here).
const (
	serverSetSync    = "SET_SYNC"
	serverRetable    = "RETABLE"
	serverShutdown   = "SHUTDOWN"
	serverCheckpoint = "CHECKPOINT"
)

// serverCall is one command to one server, waiting for its ack. Its id is
// the command's own (the action's id and a suffix), so that the server's
// agent takes it at most once and answers a resend with the same ack.
type serverCall struct {
	node string
	cmd  *agentpb.ActionCommand
	ack  chan *agentpb.ActionAck // buffered: the first ack
}

// callKey names a server call: the server and its command's id (every
// server of a SET_SYNC gets the same id).
type callKey struct{ node, id string }

// errNoAck is a server command whose ack did not come in time.
var errNoAck = errors.New("no answer from its agent")

// serverError is one server's failure to apply its command.
type serverError struct {
	node string
	err  error
}

func (e *serverError) Error() string { return "server " + e.node + ": " + e.err.Error() }
func (e *serverError) Unwrap() error { return e.err }

// askServers sends each server its command through its agent and waits,
// up to timeout, for every ack. A server whose agent is not connected gets
// its command when the agent connects (while the call waits). It returns
// the acks by server; err is the first failure, naming the server: an ack
// with an error, no ack in time, the job ending or the manager closing.
func (m *Manager) askServers(j *jobState, cmds map[string]*agentpb.ActionCommand, timeout time.Duration) (map[string]*agentpb.ActionAck, error) {
	calls := make(map[string]*serverCall, len(cmds))
	var sends sendList
	j.onActor(func() {
		if j.calls == nil {
			j.calls = map[callKey]*serverCall{}
		}
		for node, cmd := range cmds {
			c := &serverCall{node: node, cmd: cmd, ack: make(chan *agentpb.ActionAck, 1)}
			calls[node] = c
			j.calls[callKey{node, cmd.ActionId}] = c
			if n := j.nodes[node]; n != nil && n.conn != nil {
				conn := n.conn
				sends = append(sends, func() { conn.send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Command{Command: cmd}}) })
			}
		}
	})
	defer j.onActor(func() {
		for _, c := range calls {
			delete(j.calls, callKey{c.node, c.cmd.ActionId})
		}
	})
	sends.run()
	timer := m.clk.After(timeout)
	acks := make(map[string]*agentpb.ActionAck, len(calls))
	var firstErr error
	for node, c := range calls {
		select {
		case ack := <-c.ack:
			acks[node] = ack
			if ack.Error != "" && firstErr == nil {
				firstErr = &serverError{node, errors.New(ack.Error)}
			}
			continue
		case <-timer:
		case <-j.endedCh:
			return acks, &serverError{node, errors.New("the job ended first")}
		case <-m.done:
			return acks, errClosing
		}
		// Out of time: collect whatever else has come (this server's ack
		// too: it may have come with the timer), then fail on the first
		// server, by name, that has not answered.
		for other, oc := range calls {
			select {
			case ack := <-oc.ack:
				acks[other] = ack
			default:
			}
		}
		for _, name := range slices.Sorted(maps.Keys(calls)) {
			if ack, ok := acks[name]; !ok {
				c := calls[name]
				return acks, &serverError{name, fmt.Errorf("%s %s: %w within %v", c.cmd.Kind, c.cmd.ActionId, errNoAck, timeout)}
			} else if ack.Error != "" && firstErr == nil {
				firstErr = &serverError{name, errors.New(ack.Error)}
			}
		}
		return acks, firstErr
	}
	return acks, firstErr
}

// serverAcked hands a server's ack to the call waiting for it, and says
// whether there was one. The caller is the job's actor.
func (j *jobState) serverAcked(node string, ack *agentpb.ActionAck) bool {
	c := j.calls[callKey{node, ack.ActionId}]
	if c == nil {
		return false
	}
	select {
	case c.ack <- ack:
	default: // a repeated ack
	}
	return true
}

// pendingCalls are the server commands waiting for node's ack, to send
// again when its agent connects. The caller is the job's actor.
func (j *jobState) pendingCalls(node string) []*agentpb.ActionCommand {
	var out []*agentpb.ActionCommand
	for _, c := range j.calls {
		if c.node == node {
			out = append(out, c.cmd)
		}
	}
	return out
}

// tellServers sends each server its command through its agent without
// waiting for the acks (a shutdown: the server's final counters, which
// its agent sends as it stops, are what the caller waits for).
func (m *Manager) tellServers(j *jobState, cmds map[string]*agentpb.ActionCommand) {
	var sends sendList
	j.onActor(func() {
		for node, cmd := range cmds {
			if n := j.nodes[node]; n != nil && n.conn != nil {
				conn := n.conn
				sends = append(sends, func() { conn.send(&agentpb.SchedulerMessage{Body: &agentpb.SchedulerMessage_Command{Command: cmd}}) })
			}
		}
	})
	sends.run()
}
