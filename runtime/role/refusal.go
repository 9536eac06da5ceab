package role

import (
	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/identity"
)

// refusalMessage is a call this role's gRPC server refused, as its agent
// forwards it to the scheduler.
func refusalMessage(r identity.Refusal) *kelpiepb.NodeRefusal { return r.Proto() }
