package worker

import (
	"testing"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/model"
	"github.com/kelpie/kelpie/runtime/psclient"
)

// TestSparseRowsOverEachTransport: wide sparse logistic regression, whose
// workers push and pull embedding rows by key beside a dense block, ends
// with the same parameters on every server over the framed transport (TCP
// and Unix socket) as over gRPC. With two workers under BSP the servers'
// sums do not depend on arrival order, so the runs agree exactly.
func TestSparseRowsOverEachTransport(t *testing.T) {
	train, _, _ := data.SyntheticCTR(data.CTRConfig{Samples: 1024, TestSamples: 16, Features: 5000, Fields: 4, Seed: 5})
	final := map[string][]map[int][]float32{}
	for _, tr := range []string{psclient.TransportGRPC, psclient.TransportTCP, psclient.TransportUnix} {
		c := clusterConfig{model: model.Config{Kind: model.KindSparseLR}, info: train.Info(), servers: 2, workers: 2,
			blockBytes: 4 << 10, strategy: blocks.RoundRobin, sync: syncmodel.Config{Model: syncmodel.BSP, Pull: syncmodel.Lazy},
			optim: optim.Config{Kind: optim.Adam, LR: 0.05}, seed: 3, transport: tr}
		cl := startCluster(t, c)
		plan := job.Plan{N: train.Len(), Epochs: 1, GlobalBatch: 64, Seed: 2, Local: []int{32, 32}, BatchesPerShard: 4}
		cl.train(t, c, train, plan, nil)
		for r, s := range cl.servers {
			final[tr] = append(final[tr], s.Snapshot())
			st, _ := s.Stats(t.Context(), nil)
			if st.Pushes == 0 || st.BytesIn == 0 || st.BytesOut == 0 {
				t.Fatalf("%s: server %d saw %d pushes, %d bytes in, %d out", tr, r, st.Pushes, st.BytesIn, st.BytesOut)
			}
		}
		cl.stop()
	}
	ref := final[psclient.TransportGRPC]
	moved := false
	for _, tr := range []string{psclient.TransportTCP, psclient.TransportUnix} {
		for r := range ref {
			for id, want := range ref[r] {
				got := final[tr][r][id]
				if len(got) != len(want) {
					t.Fatalf("%s: server %d block %d has %d values; over grpc %d", tr, r, id, len(got), len(want))
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s: server %d block %d value %d = %v; over grpc %v", tr, r, id, i, got[i], want[i])
					}
					moved = moved || want[i] != 0
				}
			}
		}
	}
	if !moved {
		t.Error("training left every parameter at 0")
	}
	if n := len(ref[0]) + len(ref[1]); n < 3 {
		t.Errorf("%d blocks; want the embedding split over several (rows by key on both servers)", n)
	}
}
