package role

import (
	"maps"
	"testing"

	"github.com/kelpie/kelpie/core/reduceplan"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/runtime/worker"
)

func TestCrossRegionComm(t *testing.T) {
	s, err := spec.Parse("x.yaml", []byte(`name: x
cluster:
  servers: 3
  workers: 2
  topology: {worker-0: {rack: a}, worker-1: {rack: b}, server-0: {rack: a}, server-1: {rack: b}}
`))
	if err != nil {
		t.Fatal(err)
	}
	comm := []worker.Comm{{Server: 0, Bytes: 10}, {Server: 1, Bytes: 100}, {Server: 2, Bytes: 1000}, {Server: 0, Bytes: 1}}
	// server-2 is unlabelled: the shared unlabelled region, another than a's or b's.
	if got := crossRegionComm(s, "worker-0", comm); got != 1100 {
		t.Errorf("worker-0 crossed %d bytes; want 1100", got)
	}
	if got := crossRegionComm(s, "worker-1", comm); got != 1011 {
		t.Errorf("worker-1 crossed %d bytes; want 1011", got)
	}
	s.Cluster.Topology = nil
	if got := crossRegionComm(s, "worker-0", comm); got != 0 {
		t.Errorf("without a topology %d bytes crossed; want 0", got)
	}
}

func TestAllreducePlanFromSpec(t *testing.T) {
	s, err := spec.Parse("x.yaml", []byte(`name: x
model: {kind: softmax}
cluster:
  exchange: rat
  workers: 4
  topology: {worker-0: {rack: a}, worker-1: {rack: a}, worker-2: {rack: b}, worker-3: {rack: b}}
`))
	if err != nil {
		t.Fatal(err)
	}
	m, err := newModel(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := Plan(s, m)
	n := 1
	for _, x := range m.Tensors() {
		n += x.Len()
	}
	if p.Kind != "rat" || p.Nodes != 4 || p.Len != n {
		t.Fatalf("Plan = %s over %d nodes of %d values; want rat, 4, %d", p.Kind, p.Nodes, p.Len, n)
	}
	if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
	// Two racks: each sends its partial sum out once and gets the total back.
	if got, want := p.CrossBytes(Topology(s).RackRegion()), int64(2*4*n); got != want {
		t.Errorf("cross-rack bytes %d; want %d", got, want)
	}
}

// TestRegionPairs: a PS worker's pushes go from its region to the server's
// and its pulls come back; an allreduce worker's running totals become the
// deltas its reports carry.
func TestRegionPairs(t *testing.T) {
	s, err := spec.Parse("x.yaml", []byte(`name: x
cluster:
  servers: 2
  workers: 1
  topology: {worker-0: {rack: a}, server-0: {rack: a}, server-1: {rack: b, pod: p}}
`))
	if err != nil {
		t.Fatal(err)
	}
	comm := []worker.Comm{{Server: 0, Bytes: 10, Pulled: 4}, {Server: 1, Bytes: 100, Pulled: 60}, {Server: 1, Bytes: 7, Pulled: 7}}
	got := regionPairsComm(s, "worker-0", comm)
	want := map[reduceplan.Pair]int64{{From: "/a", To: "p/b"}: 40, {From: "p/b", To: "/a"}: 67}
	if !maps.Equal(got, want) {
		t.Errorf("pairs %v; want %v", got, want)
	}
	var tally regionTally
	first := tally.delta(map[reduceplan.Pair]int64{{From: "/a", To: "/b"}: 100, {From: "/a", To: "/c"}: 5})
	second := tally.delta(map[reduceplan.Pair]int64{{From: "/a", To: "/b"}: 250, {From: "/a", To: "/c"}: 5})
	if len(first) != 2 || first[0].ToRegion != "/b" || first[0].Bytes != 100 || first[1].Bytes != 5 {
		t.Errorf("first report %v; want /a→/b 100, /a→/c 5", first)
	}
	if len(second) != 1 || second[0].Bytes != 150 {
		t.Errorf("second report %v; want /a→/b 150 only", second)
	}
}
