package role

import (
	"runtime"
	"sync"

	"github.com/kelpie/kelpie/proto/agentpb"
)

// ExtraStacks, when set, adds to a role's stacks dump what its own Go
// goroutines do not show (a torch worker: its Python child's frames, by
// faulthandler). It gets the bytes left and returns its text and, when
// something is missing, why.
var (
	extraMu     sync.Mutex
	extraStacks func(limit int) (string, error)
)

// SetExtraStacks sets (nil: clears) the ExtraStacks hook.
func SetExtraStacks(f func(limit int) (string, error)) {
	extraMu.Lock()
	extraStacks = f
	extraMu.Unlock()
}

// sendStacks answers the agent's StacksRequest: every goroutine of this
// process, then ExtraStacks', at most the request's max_bytes.
func (c *AgentChannel) sendStacks(req *agentpb.StacksRequest) {
	limit := int(req.GetMaxBytes())
	if limit <= 0 || limit > 1<<20 {
		limit = 1 << 20
	}
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= limit {
			buf = buf[:min(n, limit)]
			break
		}
		buf = make([]byte, min(2*len(buf), limit))
	}
	r := &agentpb.StacksReply{Id: req.GetId(), Text: string(buf), Truncated: len(buf) >= limit}
	extraMu.Lock()
	f := extraStacks
	extraMu.Unlock()
	if f != nil && len(buf) < limit {
		more, err := f(limit - len(buf))
		r.Text += more
		if err != nil {
			r.Error = err.Error()
		}
	}
	_ = c.Send(&agentpb.RoleMessage{Body: &agentpb.RoleMessage_Stacks{Stacks: r}})
}
