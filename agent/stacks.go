package agent

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/kelpie/kelpie/proto/agentpb"
)

// Bounds of a stacks answer (kelpie job stacks): the scheduler asks for
// at most maxStacksBytes and waits at most maxStacksWait.
const (
	maxStacksBytes = 1 << 20
	maxStacksWait  = time.Minute
	defStacksWait  = 3 * time.Second
)

// stacks answers the scheduler's StacksRequest (it comes only on the
// agent's own stream to the scheduler): its own goroutines, then its
// role's stacks, which the role dumps itself when asked on its command
// pipe (Go roles: every goroutine; a torch worker adds its Python child's
// frames). A role that does not answer in time (stopped, or stuck with its
// command pipe unread) is named with its process state instead.
func (a *Agent) stacks(req *agentpb.StacksRequest) {
	limit := int(req.GetMaxBytes())
	if limit <= 0 || limit > maxStacksBytes {
		limit = maxStacksBytes
	}
	wait := time.Duration(req.GetTimeoutS() * float64(time.Second))
	if wait <= 0 {
		wait = defStacksWait
	}
	wait = min(wait, maxStacksWait)

	var b strings.Builder
	fmt.Fprintf(&b, "--- agent %s (pid %d)\n", a.o.Node, os.Getpid())
	b.Write(goroutines(limit))
	var errs []string

	ch := make(chan *agentpb.StacksReply, 1)
	a.mu.Lock()
	to, child := a.toChild, a.child
	pid := 0
	if child != nil && child.Process != nil {
		pid = child.Process.Pid
	}
	sent := false
	if to != nil {
		if a.stackWait == nil {
			a.stackWait = map[string]chan *agentpb.StacksReply{}
		}
		a.stackWait[req.GetId()] = ch
		cmd := &agentpb.StacksRequest{Id: req.GetId(), MaxBytes: int32(limit), TimeoutS: (wait * 3 / 4).Seconds()}
		_, err := protodelim.MarshalTo(to, &agentpb.RoleCommand{Body: &agentpb.RoleCommand_Stacks{Stacks: cmd}})
		sent = err == nil
	}
	a.mu.Unlock()
	switch {
	case to == nil:
		errs = append(errs, "the role is not running (restarting or ended)")
	case !sent:
		errs = append(errs, "the role's command pipe is closed")
	default:
		select {
		case r := <-ch:
			fmt.Fprintf(&b, "--- role %s (pid %d)\n%s", a.o.Node, pid, r.GetText())
			if r.GetError() != "" {
				errs = append(errs, r.GetError())
			}
		case <-time.After(wait):
			errs = append(errs, fmt.Sprintf("the role (pid %d) did not answer within %s (process state: %s)", pid, wait, procState(pid)))
		}
	}
	a.mu.Lock()
	delete(a.stackWait, req.GetId())
	a.mu.Unlock()

	text, cut := bound(b.String(), limit)
	a.enqueue(&agentpb.AgentMessage{Body: &agentpb.AgentMessage_Stacks{Stacks: &agentpb.StacksReply{
		Id: req.GetId(), Text: text, Truncated: cut, Error: strings.Join(errs, "; ")}}}, true)
}

// roleStacks hands the role's answer to the request waiting for it.
func (a *Agent) roleStacks(r *agentpb.StacksReply) {
	a.mu.Lock()
	ch := a.stackWait[r.GetId()]
	delete(a.stackWait, r.GetId())
	a.mu.Unlock()
	if ch != nil {
		ch <- r // buffered: one answer per request
	}
}

// goroutines is a dump of every goroutine of this process, at most limit
// bytes.
func goroutines(limit int) []byte {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= limit {
			return buf[:min(n, limit)]
		}
		buf = make([]byte, min(2*len(buf), limit))
	}
}

// bound cuts s to at most limit bytes.
func bound(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	return s[:limit], true
}

// procState is a process's state as /proc says it ("T (stopped)"), or
// "unknown".
func procState(pid int) string {
	if pid <= 0 {
		return "unknown"
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
