package torch

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/runtime/data"
)

// TestPrepare: a batch prepared ahead (the worker sends its indices while it
// exchanges) is collated once, off the step: the step finds it ready
// (Timing.Data stays 0) and computes the same gradient. A prep has no
// reply, also when the batch cannot be collated: the protocol stays in
// step and the step that needs that batch reports the script's error.
func TestPrepare(t *testing.T) {
	needTorch(t)
	m, err := New(Config{Script: tiny(t), Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.batched {
		t.Fatal("the tiny Blobs data set says it is indexed a batch at once")
	}
	p, g := m.Shared()
	for i, d := range m.InitDense(1) {
		copy(p.Dense[i], d)
	}
	var b data.Batch
	batch(&b, 0, 20)
	want := m.Grad(p, &b, g, 1)
	wantG := append([]float32(nil), g.Dense[0]...)
	if tm := m.Timing(); tm.Data <= 0 {
		t.Fatalf("a step that collated its batch reports no data time: %+v", tm)
	}
	batch(&b, 40, 20)
	m.Prepare(&b)
	m.Grad(p, &b, g, 1)
	tm := m.Timing()
	if tm.Preps != 1 {
		t.Fatalf("preps %d, want 1", tm.Preps)
	}
	after := tm.Data
	batch(&b, 80, 20)
	m.Prepare(&b)
	m.Grad(p, &b, g, 1)
	if tm := m.Timing(); tm.Data != after || tm.Prep <= 0 {
		t.Fatalf("a prepared batch was collated in its step (data %v → %v, prep %v)", after, tm.Data, tm.Prep)
	}
	batch(&b, 0, 20)
	m.Prepare(&b)
	if got := m.Grad(p, &b, g, 1); got != want || !equal(g.Dense[0], wantG) {
		t.Fatalf("prepared batch: loss %v, want %v", got, want)
	}

	bad := data.Batch{}
	Set{Name: "train", N: 600}.Fill(&bad, []int{0, 100000})
	m.Prepare(&bad) // no reply, nothing cached
	batch(&b, 0, 20)
	if got := m.Grad(p, &b, g, 1); got != want {
		t.Fatalf("after a failed prep: loss %v, want %v (replies out of step?)", got, want)
	}
	func() {
		defer func() {
			r := recover()
			if msg, _ := r.(string); !strings.Contains(msg, "train_set()[i] failed") || !strings.Contains(msg, "IndexError") {
				t.Fatalf("the failed batch's step: %v", r)
			}
		}()
		m.Grad(p, &bad, g, 1)
	}()
}

// TestBatchedFetch: a TensorDataset under the default collate is indexed
// with the whole batch (the child says so and the worker sends no preps);
// its batches are the ones default_collate builds from the same samples.
func TestBatchedFetch(t *testing.T) {
	needTorch(t)
	grad := func(tensors bool) (float64, []float32, bool) {
		if tensors {
			t.Setenv("TINY_TENSORS", "1")
		} else {
			t.Setenv("TINY_TENSORS", "")
		}
		m, err := New(Config{Script: tiny(t), Seed: 1, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		p, g := m.Shared()
		for i, d := range m.InitDense(1) {
			copy(p.Dense[i], d)
		}
		var b data.Batch
		Set{Name: "train", N: 600}.Fill(&b, []int{5, 3, 599, 3, 42})
		m.Prepare(&b)
		loss := m.Grad(p, &b, g, 1)
		if tensors && m.Timing().Preps != 0 {
			t.Error("a prep was sent for a batched data set")
		}
		return loss, append([]float32(nil), g.Dense[0]...), m.batched
	}
	l1, g1, b1 := grad(false)
	l2, g2, b2 := grad(true)
	if b1 || !b2 {
		t.Fatalf("batched: Blobs %t, TensorDataset %t", b1, b2)
	}
	if l1 != l2 || !equal(g1, g2) {
		t.Fatalf("TensorDataset: loss %v, gradient %v; per sample: %v, %v", l2, g2, l1, g1)
	}
}

// TestRequestEncoding: the requests built by hand are the JSON the child
// reads.
func TestRequestEncoding(t *testing.T) {
	m := &Model{}
	var b data.Batch
	Set{Name: "test", N: 10}.Fill(&b, []int{0, 7, 3})
	m.request("eval", &b)
	m.req = append(m.req, '}')
	var got struct {
		Op, Set string
		Idx     []int
	}
	if err := json.Unmarshal(m.req, &got); err != nil || got.Op != "eval" || got.Set != "test" || len(got.Idx) != 3 || got.Idx[1] != 7 {
		t.Fatalf("%s: %+v, %v", m.req, got, err)
	}
	b.Set, b.Index = `a"b\c`, nil
	m.request("prep", &b)
	m.req = append(m.req, '}')
	if err := json.Unmarshal(m.req, &got); err != nil || got.Set != `a"b\c` || len(got.Idx) != 0 {
		t.Fatalf("%s: %+v, %v", m.req, got, err)
	}
}
