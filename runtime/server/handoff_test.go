package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
)

// TestPullWaitingThroughAHandOff: a BSP pull held for a later iteration
// names a block the server hands off before that iteration completes (its
// worker had not switched tables yet). The pull is answered Aborted — the
// worker takes the new table and pulls again from the block's new server —
// where the server used to crash on the missing block (seen in the PSLD
// compute experiment, under a REASSIGN).
func TestPullWaitingThroughAHandOff(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.BSP, Pull: syncmodel.Lazy})
	ctx := context.Background()
	push := func(w int32, it int64, version uint64, dense bool) {
		t.Helper()
		req := &pspb.PSRequest{Worker: w, Progress: it, AssignmentVersion: version, RowKeys: []uint64{0}, Data: floats(0, 0)}
		if dense {
			req.Blocks, req.Data = []uint32{0}, floats(0, 0, 0, 0, 0, 0)
		}
		if _, err := s.Push(ctx, req); err != nil {
			t.Fatalf("worker %d push %d: %v", w, it, err)
		}
	}
	push(0, 0, 0, true)
	push(1, 0, 0, true)
	// Table v2 from iteration 2: block 0 moves to server 1 (whose address
	// leads nowhere: the hand-off itself fails and is logged).
	bs, err := blocks.Layout([]blocks.Tensor{{Name: "w", Rows: 2, Cols: 4}, {Name: "e", Rows: 6, Cols: 2, Sparse: true}}, 16, 2, blocks.RoundRobin)
	if err != nil {
		t.Fatal(err)
	}
	tab, _ := blocks.Assign(bs, 2, blocks.RoundRobin, 1)
	next := tab
	next.ServerOf = append([]int(nil), tab.ServerOf...)
	next.Version, next.ServerOf[0] = 2, 1
	if _, err := s.Retable(ctx, &pspb.RetableRequest{Assignment: job.Assignment(next, []string{"127.0.0.1:1", "127.0.0.1:1"}, nil),
		SwitchIteration: 2, Me: 0}); err != nil {
		t.Fatal(err)
	}
	// A pull of block 0 for iteration 3, under table v1, waits.
	pulled := make(chan codes.Code, 1)
	go func() {
		r, err := s.Pull(ctx, &pspb.PSRequest{Worker: 0, Progress: 3, AssignmentVersion: 1, Blocks: []uint32{0}})
		if err != nil {
			pulled <- status.Code(err)
			return
		}
		pulled <- codes.Code(r.Code) // a streamed request's status rides in its response
	}()
	time.Sleep(50 * time.Millisecond) // orders the pull before the pushes (nothing is timed)
	// Iteration 1 completes: block 0 is handed off. Iterations 2 and 3
	// (the workers' rows only) release the pull.
	push(0, 1, 1, true)
	push(1, 1, 1, true)
	push(0, 2, 2, false)
	push(1, 2, 2, false)
	push(0, 3, 2, false)
	push(1, 3, 2, false)
	select {
	case code := <-pulled:
		if code != codes.Aborted {
			t.Errorf("pull of a block handed off while it waited: %v; want Aborted", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held pull was never answered")
	}
}
