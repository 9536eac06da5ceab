package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/wire"
)

// newServer makes server 0 of 2 over a dense tensor of 8 floats (two
// blocks of 4, one per server) and a sparse table of 6 rows x 2.
func newServer(t *testing.T, sc syncmodel.Config) *Server {
	t.Helper()
	bs, err := blocks.Layout([]blocks.Tensor{{Name: "w", Rows: 2, Cols: 4}, {Name: "e", Rows: 6, Cols: 2, Sparse: true}}, 16, 2, blocks.RoundRobin)
	if err != nil {
		t.Fatal(err)
	}
	tab, _ := blocks.Assign(bs, 2, blocks.RoundRobin, 1)
	s, err := New(Config{Name: "server-0", Sync: sc, Optim: optim.Config{Kind: "sgd", LR: 1}, Workers: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	s.Install(tab, 0, func(b blocks.Block) []float32 {
		v := make([]float32, b.Floats())
		for i := range v {
			v[i] = 1
		}
		return v
	})
	return s
}

func floats(xs ...float32) []byte { return wire.AsBytes(xs) }

func TestBadRequestsGetStatusCodes(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	// Server 0 holds dense block 0 (floats 0..3) and sparse blocks 2 (rows
	// 0-1) and 4 (rows 4-5); server 1 holds block 1 and rows 2-3.
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  *pspb.PSRequest
		want codes.Code
	}{
		{"block on the other server", &pspb.PSRequest{Blocks: []uint32{1}}, codes.FailedPrecondition},
		{"unknown block", &pspb.PSRequest{Blocks: []uint32{99}}, codes.FailedPrecondition},
		{"push of the wrong size", &pspb.PSRequest{Blocks: []uint32{0}, Data: floats(1, 2, 3)}, codes.InvalidArgument},
		{"sparse block addressed as dense", &pspb.PSRequest{Blocks: []uint32{2}}, codes.InvalidArgument},
		{"row on the other server", &pspb.PSRequest{RowKeys: []uint64{2}, Data: floats(1, 1)}, codes.FailedPrecondition},
		{"worker outside the barrier", &pspb.PSRequest{Worker: 7, Blocks: []uint32{0}, Data: floats(1, 2, 3, 4)}, codes.FailedPrecondition},
		{"stale assignment", &pspb.PSRequest{AssignmentVersion: 9, Blocks: []uint32{0}, Data: floats(1, 2, 3, 4)}, codes.FailedPrecondition},
	} {
		_, err := s.Push(ctx, tc.req)
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: Push = %v (%v); want %v", tc.name, got, err, tc.want)
		}
	}
	// Nothing was applied by the rejected pushes.
	r, err := s.Pull(ctx, &pspb.PSRequest{Worker: 0, Progress: -1, Blocks: []uint32{0}, PullRowKeys: []uint64{0, 5}})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range wire.AsFloats(r.Data) {
		if v != 1 {
			t.Errorf("value %d = %v after rejected pushes; want 1", i, v)
		}
	}
}

func TestPushAppliesDenseAndSparse(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.BSP, Pull: syncmodel.Lazy})
	ctx := context.Background()
	// BSP aggregates: two workers' pushes are summed and applied once both
	// are in (SGD, lr 1: w -= g).
	for w := int32(0); w < 2; w++ {
		if _, err := s.Push(ctx, &pspb.PSRequest{Worker: w, Progress: 0, Blocks: []uint32{0}, RowKeys: []uint64{1},
			Data: floats(0.25, 0.5, 0, 0, 0.5, 0.5)}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Pull(ctx, &pspb.PSRequest{Worker: 0, Progress: 0, Blocks: []uint32{0}, PullRowKeys: []uint64{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{0.5, 0, 1, 1, 1, 1, 0, 0}
	got := wire.AsFloats(r.Data)
	if len(got) != len(want) {
		t.Fatalf("pulled %d values; want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("value %d = %v; want %v (pulled %v)", i, got[i], want[i], got)
		}
	}
	if r.Version != 1 {
		t.Errorf("version = %d; want 1", r.Version)
	}
	// A duplicate push of the same iteration changes nothing.
	if _, err := s.Push(ctx, &pspb.PSRequest{Worker: 0, Progress: 0, Blocks: []uint32{0}, Data: floats(9, 9, 9, 9)}); err != nil {
		t.Fatal(err)
	}
	r2, _ := s.Pull(ctx, &pspb.PSRequest{Worker: 1, Progress: 0, Blocks: []uint32{0}})
	if g := wire.AsFloats(r2.Data); g[0] != 0.5 {
		t.Errorf("after a duplicate push value 0 = %v; want 0.5", g[0])
	}
}

// TestSetSyncLive: switching BSP → SSP(s=3) live answers a pull that BSP was
// holding, and the gradient half-summed under BSP is applied, not lost.
func TestSetSyncLive(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.BSP, Pull: syncmodel.Lazy})
	ctx := context.Background()
	if _, err := s.Push(ctx, &pspb.PSRequest{Worker: 0, Progress: 0, Blocks: []uint32{0}, Data: floats(1, 1, 1, 1)}); err != nil {
		t.Fatal(err)
	}
	got := make(chan *pspb.PSResponse, 1)
	go func() {
		r, err := s.Pull(ctx, &pspb.PSRequest{Worker: 0, Progress: 0, Blocks: []uint32{0}})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	// Under BSP the pull waits for worker 1's push; wait until it is filed.
	for {
		st, _ := s.Stats(ctx, &pspb.StatsRequest{})
		if st.Dprs == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	res, err := s.SetSync(ctx, &pspb.SyncSettings{Model: "ssp", Staleness: 3, Pull: "lazy"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Released != 1 {
		t.Errorf("SetSync released %d pulls; want 1", res.Released)
	}
	r := <-got
	if v := wire.AsFloats(r.Data); v[0] != 0 { // 1 - lr(1)·1: worker 0's gradient applied
		t.Errorf("value after the switch = %v; want 0 (the summed gradient applied)", v[0])
	}
	if _, err := s.SetSync(ctx, &pspb.SyncSettings{Model: "nope"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad model: %v; want InvalidArgument", err)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	ctx := context.Background()
	if _, err := s.Push(ctx, &pspb.PSRequest{Worker: 0, Progress: 0, Blocks: []uint32{0}, RowKeys: []uint64{4},
		Data: floats(1, 2, 3, 4, 5, 6)}); err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/server-0.snap"
	if err := s.SaveSnapshot(path); err != nil {
		t.Fatal(err)
	}
	snap, err := LoadSnapshot(path)
	if err != nil {
		t.Fatal(err)
	}
	r := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	// A fresh server restored from the snapshot answers as the first did.
	r2, _ := New(Config{Name: "server-0", Sync: syncmodel.Config{Model: syncmodel.ASP}, Optim: r.cfg.Optim, Workers: []int{0, 1}})
	if err := r2.Restore(s.el.table, 0, snap); err != nil {
		t.Fatal(err)
	}
	want, _ := s.Pull(ctx, &pspb.PSRequest{Worker: 1, Progress: -1, Blocks: []uint32{0}, PullRowKeys: []uint64{4, 5}})
	got, _ := r2.Pull(ctx, &pspb.PSRequest{Worker: 1, Progress: -1, Blocks: []uint32{0}, PullRowKeys: []uint64{4, 5}})
	w, g := wire.AsFloats(want.Data), wire.AsFloats(got.Data)
	if len(w) != len(g) {
		t.Fatalf("restored pull has %d values; want %d", len(g), len(w))
	}
	for i := range w {
		if w[i] != g[i] {
			t.Errorf("value %d = %v; want %v", i, g[i], w[i])
		}
	}
}
