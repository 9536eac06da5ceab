package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/topology"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/store"
)

// TestRegionBytesViewAndMetrics: the bytes by region pair the workers of a
// RAT job on 2 racks × 4 report — each what RAT's plan has it send, two
// iterations' worth in two reports — add up in the job's view and in
// /metrics' kelpie_job_region_bytes_total; a report naming a region the
// topology does not have is refused and adds nothing.
func TestRegionBytesViewAndMetrics(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "kelpie.db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Store: st, NoLaunch: true, Tick: time.Hour, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		st.Close()
	})
	topo := "{"
	for w := range 8 {
		topo += fmt.Sprintf("worker-%d: {rack: r%d}, ", w, w/4)
	}
	s, err := spec.Parse("rb.yaml", []byte("name: rb\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\n"+
		"train: {global_batch: 64}\ncluster: {workers: 8, exchange: rat, topology: "+topo+"}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.SubmitSpec(s, "test"); err != nil {
		t.Fatal(err)
	}
	c := m.Coordinator()
	ctx := context.Background()
	j := m.jobList()["rb"]
	for w := range 8 {
		if _, err := c.Register(ctx, &coordinatorpb.RegisterRequest{Job: "rb", Node: spec.WorkerName(w), Role: coordinatorpb.Role_ROLE_WORKER, Addr: "127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
	}

	// What each node sends to each other region in one RAT allreduce of a
	// softmax model's 7850 values (and the flag).
	const n = 784*10 + 10 + 1
	place := topology.Topology{}
	for w := range 8 {
		place = append(place, topology.Place{Rack: fmt.Sprintf("r%d", w/4)})
	}
	region := func(i int) string { return topology.Region(place[i]) }
	plan := reduceplan.RAT(8, n, place, 0)
	sent := make([]map[reduceplan.Pair]int64, 8)
	for i := range sent {
		sent[i] = map[reduceplan.Pair]int64{}
	}
	for _, step := range plan.Steps {
		for _, tr := range step {
			if region(tr.From) != region(tr.To) {
				sent[tr.From][reduceplan.Pair{From: region(tr.From), To: region(tr.To)}] += 4 * int64(plan.Chunks[tr.Chunk].Len)
			}
		}
	}
	for it := int64(1); it <= 2; it++ {
		for w := range 8 {
			r := &coordinatorpb.ProgressReport{Job: "rb", Node: spec.WorkerName(w), Iteration: it, BatchSize: 8, BptSeconds: []float64{0.01}}
			for p, b := range sent[w] {
				r.RegionBytes = append(r.RegionBytes, &coordinatorpb.RegionBytes{FromRegion: p.From, ToRegion: p.To, Bytes: b})
			}
			// As the worker's agent stream takes it (Connect: reportTimed).
			if err := reportOn(m, j, r.Node, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	// RAT Alg. 1: each rack's aggregators send the rack's sum (n values)
	// out once and get the total back once per iteration.
	want := map[[2]string]int64{{"/r0", "/r1"}: 2 * 4 * n, {"/r1", "/r0"}: 2 * 4 * n}
	if p := plan.Bytes(topology.Topology(place).RackRegion()); p[reduceplan.Pair{From: "/r0", To: "/r1"}] != 4*n {
		t.Fatalf("the plan sends %v across; want %d each way", p, 4*n)
	}

	bad := &coordinatorpb.ProgressReport{Job: "rb", Node: "worker-0", Iteration: 3,
		RegionBytes: []*coordinatorpb.RegionBytes{{FromRegion: "/r0", ToRegion: "/r1", Bytes: 5}, {FromRegion: "/r0", ToRegion: "/elsewhere", Bytes: 1 << 40}}}
	if err := reportOn(m, j, bad.Node, bad); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a report naming a region outside the topology = %v; want InvalidArgument", err)
	}

	views := m.View([]string{"rb"}, 1)
	if len(views) != 1 {
		t.Fatalf("%d views", len(views))
	}
	got := map[[2]string]int64{}
	for _, b := range views[0].RegionBytes {
		got[[2]string{b.FromRegion, b.ToRegion}] = b.Bytes
	}
	if len(got) != len(want) || got[[2]string{"/r0", "/r1"}] != want[[2]string{"/r0", "/r1"}] || got[[2]string{"/r1", "/r0"}] != want[[2]string{"/r1", "/r0"}] {
		t.Errorf("view region_bytes %v; want %v", views[0].RegionBytes, want)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	metric := map[[2]string]float64{}
	for _, f := range fams {
		if f.GetName() != "kelpie_job_region_bytes_total" {
			continue
		}
		if f.GetType().String() != "COUNTER" {
			t.Errorf("%s is a %v; want a counter", f.GetName(), f.GetType())
		}
		for _, mt := range f.Metric {
			l := map[string]string{}
			for _, p := range mt.Label {
				l[p.GetName()] = p.GetValue()
			}
			if l[JobLabel] != "rb" {
				t.Errorf("labels %v; want %s=rb", l, JobLabel)
			}
			metric[[2]string{l["from_region"], l["to_region"]}] = mt.GetCounter().GetValue()
		}
	}
	for k, v := range want {
		if metric[k] != float64(v) {
			t.Errorf("kelpie_job_region_bytes_total{from_region=%q,to_region=%q} = %v; want %d", k[0], k[1], metric[k], v)
		}
	}
	if len(metric) != len(want) {
		t.Errorf("metrics %v; want %v", metric, want)
	}
}
