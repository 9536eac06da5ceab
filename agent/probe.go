package agent

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/kelpie/kelpie/proto/agentpb"
)

// Bounds of a probe on the agent's side: it waits for its role at most
// maxProbeWait.
const (
	maxProbeWait = time.Minute
	defProbeWait = 8 * time.Second
)

// probe answers the scheduler's ProbeRequest (it comes only on the agent's
// own stream): the role runs the kernel and its round trips (it has the
// node's slowness and the data plane's credentials); the agent forwards
// the request on the command pipe and the answer on its stream. A role
// that does not answer in time is named with its process state.
func (a *Agent) probe(req *agentpb.ProbeRequest) {
	wait := time.Duration(req.GetTimeoutS() * float64(time.Second))
	if wait <= 0 {
		wait = defProbeWait
	}
	wait = min(wait, maxProbeWait)
	reply := &agentpb.ProbeReply{Id: req.GetId()}

	ch := make(chan *agentpb.ProbeReply, 1)
	a.mu.Lock()
	to, child := a.toChild, a.child
	pid := 0
	if child != nil && child.Process != nil {
		pid = child.Process.Pid
	}
	sent := false
	if to != nil {
		if a.probeWait == nil {
			a.probeWait = map[string]chan *agentpb.ProbeReply{}
		}
		a.probeWait[req.GetId()] = ch
		// The role works within a little less than we wait for it.
		cmd := &agentpb.ProbeRequest{Id: req.GetId(), KernelRounds: req.GetKernelRounds(), Servers: req.GetServers(),
			EchoBytes: req.GetEchoBytes(), Trips: req.GetTrips(), TimeoutS: (wait * 3 / 4).Seconds()}
		_, err := protodelim.MarshalTo(to, &agentpb.RoleCommand{Body: &agentpb.RoleCommand_Probe{Probe: cmd}})
		sent = err == nil
	}
	a.mu.Unlock()
	switch {
	case to == nil:
		reply.Error = "the role is not running (restarting or ended)"
	case !sent:
		reply.Error = "the role's command pipe is closed"
	default:
		select {
		case r := <-ch:
			reply = r
		case <-time.After(wait):
			reply.Error = fmt.Sprintf("the role (pid %d) did not answer within %s (process state: %s)", pid, wait, procState(pid))
		}
	}
	a.mu.Lock()
	delete(a.probeWait, req.GetId())
	a.mu.Unlock()
	a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Probe{Probe: reply}}, true)
}

// roleProbe hands the role's answer to the probe waiting for it.
func (a *Agent) roleProbe(r *agentpb.ProbeReply) {
	a.mu.Lock()
	ch := a.probeWait[r.GetId()]
	delete(a.probeWait, r.GetId())
	a.mu.Unlock()
	if ch != nil {
		ch <- r // buffered: one answer per request
	}
}
