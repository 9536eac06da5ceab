package role

import (
	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/identity"
)

// refusalMessage is a call this role's gRPC server refused, as its agent
// forwards it to the scheduler.
func refusalMessage(r identity.Refusal) *kelpiepb.NodeRefusal {
	m := &kelpiepb.NodeRefusal{UnixNano: r.Time.UnixNano(), Addr: r.Addr, CallerJob: r.ID.Job, Method: r.Method,
		Code: r.Code.String(), Reason: r.Reason, Suppressed: r.Suppressed}
	if r.ID.Role != "" {
		m.Caller = r.ID.String()
	}
	return m
}
