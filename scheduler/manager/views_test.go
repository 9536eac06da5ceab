package manager

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestHeatmapAcrossARoll: a view releases the manager's lock every
// viewChunk nodes; if the buckets roll meanwhile (an agent's report moved
// time on), the rows built after it still read the columns the rows
// before read.
func TestHeatmapAcrossARoll(t *testing.T) {
	const cols = 4
	t0 := time.Unix(1000, 0)
	now := t0.Add(cols*time.Second - time.Millisecond) // in the last column
	m := &Manager{cfg: Config{Columns: cols, Bucket: time.Second, Now: func() time.Time { return now }}}
	j := &jobState{m: m, bucket0: t0, nodes: map[string]*nodeState{}}
	for i := range viewChunk + 10 {
		n := &nodeState{name: fmt.Sprintf("worker-%d", i), role: "worker", sum: make([]float64, cols),
			count: make([]int, cols), bytes: make([]float64, cols)}
		for c := range cols {
			n.sum[c], n.count[c] = float64(c+1), 1
		}
		j.nodes[n.name] = n
	}
	nodes := sortedNodes(j.nodes)
	rolled := false
	_, series := j.heatmap(nodes, cols, func() {
		// A report one bucket later rolls every node's columns by one.
		j.roll(cols)
		rolled = true
	})
	if !rolled {
		t.Fatal("the heatmap never yielded")
	}
	first := series[0].Values
	if !slices.Equal(first, []float64{1, 2, 3, 4}) {
		t.Fatalf("first row = %v; want [1 2 3 4]", first)
	}
	for i, s := range series[viewChunk:] {
		if !slices.Equal(s.Values[1:], first[1:]) {
			t.Errorf("row %d after the roll = %v; want %v in columns 1..3", viewChunk+i, s.Values, first)
		}
	}
}

// TestNodeOrder: nodes sort by role (servers first), then by the number in
// their names, not as strings.
func TestNodeOrder(t *testing.T) {
	names := []string{"worker-10", "worker-2", "server-1", "worker-1", "server-0", "worker-x"}
	ns := map[string]*nodeState{}
	for _, n := range names {
		role := "worker"
		if n[0] == 's' {
			role = "server"
		}
		ns[n] = &nodeState{name: n, role: role}
	}
	var got []string
	for _, n := range sortedNodes(ns) {
		got = append(got, n.name)
	}
	want := []string{"server-0", "server-1", "worker-1", "worker-2", "worker-10", "worker-x"}
	if !slices.Equal(got, want) {
		t.Errorf("sortedNodes = %v; want %v", got, want)
	}
}
