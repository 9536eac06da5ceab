package role

import (
	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/runtime/psclient"
)

// messageBound is the largest gRPC message a parameter server of a model
// with these tensors has to receive: a migrated block carries its values
// and the optimizer's two moments (3 floats an element), a sparse row its
// key and step (16 bytes), a push or a pull at most the whole model with
// its row keys; plus room for the request's other fields. It is at least
// the node plane's default and at most psclient.MaxMessage.
func messageBound(tensors []blocks.Tensor) int {
	var floats, rows int64
	for _, t := range tensors {
		floats += int64(t.Len())
		if t.Sparse {
			rows += int64(t.Rows)
		}
	}
	b := 3*4*floats + 16*rows + identity.DefaultMaxRecvBytes
	return int(max(int64(identity.DefaultMaxRecvBytes), min(b, psclient.MaxMessage)))
}
