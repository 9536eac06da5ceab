package worker

import (
	"slices"
	"sync"
	"testing"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/runtime/data"
	"github.com/kelpie/kelpie/runtime/model"
)

// queueSource is a ShardSource over shards of 4 samples, recording what
// is reported and returned.
func queueSource(shards int) (*ShardSource, *[]int64, *[]int64) {
	var reported, returned []int64
	next := int64(0)
	s := &ShardSource{
		Fetch: func() (*coordinatorpb.ShardInfo, error) {
			if next == int64(shards) {
				return nil, nil
			}
			next++
			b := int32(next * 10)
			return &coordinatorpb.ShardInfo{Id: next, Order: []int64{int64(b), int64(b + 1), int64(b + 2), int64(b + 3)}}, nil
		},
		Report: func(ids []int64) error { reported = append(reported, ids...); return nil },
		Return: func(ids []int64) error { returned = append(returned, ids...); return nil },
	}
	return s, &reported, &returned
}

// TestShardSourceDropAndRelease: a shard with a dropped iteration goes
// back to the queue instead of DONE; a leaving worker hands back the shard
// it has started and the finished ones not yet pushed.
func TestShardSourceDropAndRelease(t *testing.T) {
	s, reported, returned := queueSource(5)
	// Iterations of 3 samples: t0 takes shard 1 [0..3), t1 takes the rest
	// of 1 and 2 samples of 2, t2 the rest of 2 and 1 of 3.
	for it := int64(0); it < 3; it++ {
		if _, more, err := s.Next(nil, it, 3); err != nil || !more {
			t.Fatalf("Next(%d) = %v, %v", it, more, err)
		}
	}
	s.Dropped(1) // shards 1 and 2 had samples in iteration 1
	if err := s.Pushed(2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*returned, []int64{1, 2}) || len(*reported) != 0 {
		t.Errorf("after a drop in iteration 1: returned %v, reported %v; want [1 2], []", *returned, *reported)
	}
	// Iteration 3 finishes shard 3 (pushed), 4 takes shard 4 partly.
	s.Next(nil, 3, 3)
	s.Next(nil, 4, 2)
	if err := s.Pushed(3); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*reported, []int64{3}) {
		t.Errorf("reported %v; want [3]", *reported)
	}
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*returned, []int64{1, 2, 4}) || s.Returned != 3 {
		t.Errorf("after Release: returned %v (%d); want [1 2 4] (3)", *returned, s.Returned)
	}
	if err := s.Release(); err != nil || len(*returned) != 3 {
		t.Errorf("a second Release returned %v, %v; want nothing more", *returned, err)
	}
}

// TestAddParams: dense tensors add element-wise; sparse rows merge by key.
func TestAddParams(t *testing.T) {
	dst := &model.Params{Dense: [][]float32{{1, 2}}, Sparse: model.Sparse{Keys: []uint64{1, 5, 9}, Vals: []float32{1, 1, 5, 5, 9, 9}}}
	src := &model.Params{Dense: [][]float32{{10, 20}}, Sparse: model.Sparse{Keys: []uint64{0, 5, 12}, Vals: []float32{0, 0, 1, 2, 3, 4}}}
	addParams(dst, src, 2)
	if !slices.Equal(dst.Dense[0], []float32{11, 22}) {
		t.Errorf("dense = %v; want [11 22]", dst.Dense[0])
	}
	if !slices.Equal(dst.Sparse.Keys, []uint64{0, 1, 5, 9, 12}) ||
		!slices.Equal(dst.Sparse.Vals, []float32{0, 0, 1, 1, 6, 7, 9, 9, 3, 4}) {
		t.Errorf("sparse = %v %v; want keys [0 1 5 9 12], vals [0 0 1 1 6 7 9 9 3 4]", dst.Sparse.Keys, dst.Sparse.Vals)
	}
}

// TestSamplesReportedBeforeDone: a worker reports the samples it has
// trained before it reports the shards they finished DONE. The job's count
// of samples trained is the workers' reports (a restarted worker's count
// starts again from its last one): a worker killed after a DONE report but
// before the report of its samples would leave a DONE shard that nobody
// counted, and the count short of the data (at-least-once).
func TestSamplesReportedBeforeDone(t *testing.T) {
	train, _, _ := data.SyntheticCTR(data.CTRConfig{Samples: 240, TestSamples: 16, Features: 500, Fields: 4, Seed: 5})
	c := clusterConfig{model: model.Config{Kind: model.KindSparseLR}, info: train.Info(), servers: 1, workers: 1,
		blockBytes: 4 << 10, strategy: blocks.RoundRobin, sync: syncmodel.Config{Model: syncmodel.BSP, Pull: syncmodel.Lazy},
		optim: optim.Config{Kind: optim.Adam, LR: 0.05}, seed: 3}
	cl := startCluster(t, c)
	plan := job.Plan{N: train.Len(), Epochs: 1, GlobalBatch: 8, Seed: 2, Local: []int{8}, BatchesPerShard: 3}
	const shard = 24 // samples: 3 iterations of 8, a report every 10
	var (
		mu               sync.Mutex
		reported, doneAt int64 // samples in the last report; in the DONE shards
		uncounted        []int64
		next             int64
	)
	var sums [1]Summary
	cl.trainSummaries(t, c, train, plan, func(cfg *Config) {
		cfg.Report = func(r Report) bool {
			mu.Lock()
			defer mu.Unlock()
			reported = r.Samples
			return true
		}
		cfg.Source = &ShardSource{
			Fetch: func() (*coordinatorpb.ShardInfo, error) {
				if next*shard == int64(train.Len()) {
					return nil, nil
				}
				sh := &coordinatorpb.ShardInfo{Id: next}
				for i := range int64(shard) {
					sh.Order = append(sh.Order, next*shard+i)
				}
				next++
				return sh, nil
			},
			Report: func(ids []int64) error {
				mu.Lock()
				defer mu.Unlock()
				doneAt += int64(len(ids)) * shard
				if reported < doneAt {
					uncounted = append(uncounted, ids...)
				}
				return nil
			},
		}
	}, sums[:])
	if doneAt != int64(train.Len()) || sums[0].Samples != doneAt || reported != doneAt {
		t.Errorf("%d samples DONE, %d trained, %d reported; want %d each", doneAt, sums[0].Samples, reported, train.Len())
	}
	if len(uncounted) > 0 {
		t.Errorf("shards %v reported DONE before the samples that trained them", uncounted)
	}
}

// TestShardSourceHeld: what a worker says it holds when it fetches is the
// shard it trains, those finished and not pushed, and those whose DONE
// report waits for the scheduler — not those reported or handed back.
func TestShardSourceHeld(t *testing.T) {
	s, _, _ := queueSource(5)
	away := false
	report := s.Report
	s.Report = func(ids []int64) error {
		if away {
			return ErrUnavailable
		}
		return report(ids)
	}
	s.Next(nil, 0, 6) // shard 1 finished, shard 2 half
	if got := s.Held(); !slices.Equal(got, []int64{2, 1}) {
		t.Fatalf("held %v; want [2 1] (training 2, 1 finished and not pushed)", got)
	}
	away = true
	if err := s.Pushed(0); err != nil {
		t.Fatal(err)
	}
	if got := s.Held(); !slices.Equal(got, []int64{2, 1}) {
		t.Fatalf("held %v; want [2 1] (1's report waits for the scheduler)", got)
	}
	away = false
	s.Next(nil, 1, 2) // shard 2 finished
	if err := s.Pushed(1); err != nil {
		t.Fatal(err)
	}
	if got := s.Held(); len(got) != 0 {
		t.Fatalf("held %v after every shard was reported; want none", got)
	}
}
