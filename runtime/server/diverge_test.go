package server

import (
	"context"
	"math"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/diverge"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
)

// TestDivergedApply: an update that makes a parameter non-finite is
// answered with the server's divergence (node, iteration, where), and so is
// every push after it, in both apply paths (ASP applies each push, BSP the
// sum of a version).
func TestDivergedApply(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, sc := range []syncmodel.Config{{Model: syncmodel.ASP}, {Model: syncmodel.BSP, Pull: syncmodel.Lazy}} {
		s := newServer(t, sc)
		ctx := context.Background()
		// A finite push first: no divergence.
		for w := int32(0); w < 2; w++ {
			if _, err := s.Push(ctx, &pspb.PSRequest{Worker: w, Progress: 0, Blocks: []uint32{0}, Data: floats(1, 1, 1, 1)}); err != nil {
				t.Fatalf("%v: finite push: %v", sc.Model, err)
			}
		}
		var err error
		for w := int32(0); w < 2; w++ {
			_, err = s.Push(ctx, &pspb.PSRequest{Worker: w, Progress: 1, Blocks: []uint32{0}, RowKeys: []uint64{1},
				Data: floats(0, -inf, 0, 0, 0, 0)})
			if sc.Model == syncmodel.ASP {
				break // applied at once
			}
		}
		if status.Code(err) != codes.DataLoss {
			t.Fatalf("%v: push of +Inf = %v; want DataLoss", sc.Model, err)
		}
		d := diverge.From(err)
		if d == nil || d.Node != "server-0" || d.Iteration != 1 || d.What != diverge.Parameters || !math.IsInf(d.Value, 1) ||
			d.Detail != "block 0, element 1" {
			t.Fatalf("%v: divergence = %+v (from %v)", sc.Model, d, err)
		}
		// Every later push gets the same answer.
		_, err2 := s.Push(ctx, &pspb.PSRequest{Worker: 0, Progress: 2, Blocks: []uint32{0}, Data: floats(0, 0, 0, 0)})
		if err2 == nil || err2.Error() != err.Error() {
			t.Errorf("%v: later push = %v; want %v", sc.Model, err2, err)
		}
	}
}
