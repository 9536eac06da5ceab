package role

import (
	"testing"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/runtime/psclient"
)

// TestMessageBound: a parameter server receives messages as large as its
// model needs (a migrated block with both optimizer moments, a push of the
// whole model), not the 1 GiB of psclient.MaxMessage: MNIST softmax stays
// near the node plane's few MiB, a model larger than 1 GiB is capped.
func TestMessageBound(t *testing.T) {
	for _, tt := range []struct {
		name     string
		tensors  []blocks.Tensor
		min, max int
	}{
		{"mnist softmax", []blocks.Tensor{{Name: "w", Rows: 784, Cols: 10}, {Name: "b", Rows: 1, Cols: 10}},
			3*4*7850 + identity.DefaultMaxRecvBytes, 3*4*7850 + identity.DefaultMaxRecvBytes},
		{"mlp 784-1024-10", []blocks.Tensor{{Name: "fc0.w", Rows: 784, Cols: 1024}, {Name: "fc1.w", Rows: 1024, Cols: 10}},
			3 * 4 * (784*1024 + 1024*10), 64 << 20},
		{"sparse 2^20 rows", []blocks.Tensor{{Name: "w", Rows: 1 << 20, Cols: 1, Sparse: true}},
			(3*4 + 16) << 20, 64 << 20},
		{"larger than 1 GiB", []blocks.Tensor{{Name: "w", Rows: 1 << 28, Cols: 1}}, psclient.MaxMessage, psclient.MaxMessage},
		{"none", nil, identity.DefaultMaxRecvBytes, identity.DefaultMaxRecvBytes},
	} {
		if got := messageBound(tt.tensors); got < tt.min || got > tt.max {
			t.Errorf("messageBound(%s) = %d; want in [%d, %d]", tt.name, got, tt.min, tt.max)
		}
	}
}
