package coordinator

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/spec"
)

const testSpec = `
name: elastic
model: {kind: sparse-lr}
data: {kind: synthetic-ctr, epochs: 1, samples: 4096, test_samples: 512, features: 1000, fields: 4, seed: 7}
train: {global_batch: 64, lr: 0.02, optimizer: adam}
cluster: {servers: 1, workers: 2}
`

// startedJob registers and readies server-0, worker-0 and worker-1.
func startedJob(t *testing.T) (*Coordinator, *Job) {
	t.Helper()
	s, err := spec.Parse("test.yaml", []byte(testSpec))
	if err != nil {
		t.Fatal(err)
	}
	c := New()
	j, err := c.AddJob(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nodes := map[string]kelpiepb.Role{"server-0": kelpiepb.Role_ROLE_SERVER, "worker-0": kelpiepb.Role_ROLE_WORKER, "worker-1": kelpiepb.Role_ROLE_WORKER}
	var wg sync.WaitGroup
	for name, role := range nodes {
		if _, err := c.Register(ctx, &kelpiepb.RegisterRequest{Job: "elastic", Node: name, Role: role, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Ready(ctx, &kelpiepb.ReadyRequest{Job: "elastic", Node: name}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	return c, j
}

// TestWorkersAddedAndRemoved: a worker slot added while the job runs may
// register (no other late worker may); a removed worker's Done neither
// waits nor evaluates, and the others stop waiting for it; servers that
// register later count only the workers still in the job.
func TestWorkersAddedAndRemoved(t *testing.T) {
	c, j := startedJob(t)
	ctx := context.Background()
	if _, err := c.Register(ctx, &kelpiepb.RegisterRequest{Job: "elastic", Node: "worker-2", Role: kelpiepb.Role_ROLE_WORKER}); err == nil {
		t.Error("worker-2 registered without an ADD_WORKER")
	}
	name, idx := j.AddWorker()
	if name != "worker-2" || idx != 2 {
		t.Fatalf("AddWorker() = %s, %d; want worker-2, 2", name, idx)
	}
	if err := j.AddSplit(10, []int{32, 16, 16}); err != nil {
		t.Fatal(err)
	}
	reg, err := c.Register(ctx, &kelpiepb.RegisterRequest{Job: "elastic", Node: "worker-2", Role: kelpiepb.Role_ROLE_WORKER})
	if err != nil {
		t.Fatalf("added worker-2: %v", err)
	}
	if reg.Index != 2 || len(reg.Splits) != 1 || !slices.Equal(reg.Splits[0].Local, []int32{32, 16, 16}) {
		t.Errorf("worker-2's registration: index %d, splits %v; want 2 and the split from 10", reg.Index, reg.Splits)
	}
	// worker-0 is removed: it does not wait for the others.
	done, err := c.Done(ctx, &kelpiepb.DoneRequest{Job: "elastic", Node: "worker-0", Left: true})
	if err != nil || done.Evaluate {
		t.Fatalf("Done(worker-0, left) = %v, %v; want no evaluation", done, err)
	}
	srv, err := c.Register(ctx, &kelpiepb.RegisterRequest{Job: "elastic", Node: "server-0", Role: kelpiepb.Role_ROLE_SERVER, Addr: "127.0.0.1:2"})
	if err != nil || !slices.Equal(srv.Workers, []int32{1, 2}) {
		t.Errorf("restarted server's barrier = %v, %v; want [1 2]", srv.GetWorkers(), err)
	}
	if _, err := c.Register(ctx, &kelpiepb.RegisterRequest{Job: "elastic", Node: "worker-0", Role: kelpiepb.Role_ROLE_WORKER}); err == nil {
		t.Error("a removed worker registered again")
	}
	// worker-1 waits for worker-2, then one of them evaluates.
	got := make(chan *kelpiepb.DoneResponse, 1)
	go func() {
		r, err := c.Done(ctx, &kelpiepb.DoneRequest{Job: "elastic", Node: "worker-1"})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("worker-1's Done returned before worker-2 was done")
	case <-time.After(100 * time.Millisecond):
	}
	r2, err := c.Done(ctx, &kelpiepb.DoneRequest{Job: "elastic", Node: "worker-2"})
	if err != nil {
		t.Fatal(err)
	}
	r1 := <-got
	if r1.Evaluate == r2.Evaluate {
		t.Errorf("evaluate: worker-1 %v, worker-2 %v; want exactly one", r1.Evaluate, r2.Evaluate)
	}
}

// TestDropWorker: an added worker that never comes up is dropped; the
// others do not wait for it.
func TestDropWorker(t *testing.T) {
	c, j := startedJob(t)
	ctx := context.Background()
	name, _ := j.AddWorker()
	go func() {
		time.Sleep(50 * time.Millisecond)
		j.DropWorker(name)
	}()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range []string{"worker-0", "worker-1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Done(ctx, &kelpiepb.DoneRequest{Job: "elastic", Node: w}); err != nil {
				t.Errorf("Done(%s): %v", w, err)
			}
		}()
	}
	wg.Wait()
}
