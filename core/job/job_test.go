package job

import (
	"testing"

	"github.com/kelpie/kelpie/core/blocks"
)

func TestPlanSlicesCoverTheStreamOnce(t *testing.T) {
	p := Plan{N: 1000, Epochs: 2, GlobalBatch: 64, Seed: 1, Local: []int{16, 16, 16, 16}, BatchesPerShard: 5}
	p, err := p.WithSplit(7, []int{40, 8, 8, 8})
	if err != nil {
		t.Fatal(err)
	}
	p, err = p.WithSplit(20, []int{0, 32, 16, 16})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Iterations(), int64(32); got != want { // ⌈2000/64⌉
		t.Fatalf("Iterations = %d; want %d", got, want)
	}
	seen := make([]int, p.Total())
	for it := range p.Iterations() {
		for w := range 4 {
			from, to := p.Slice(w, it)
			for pos := from; pos < to; pos++ {
				seen[pos]++
			}
		}
	}
	for pos, n := range seen {
		if n != 1 {
			t.Fatalf("stream position %d covered %d times; want once", pos, n)
		}
	}
}

func TestWithSplitRejects(t *testing.T) {
	p := Plan{GlobalBatch: 64, Local: []int{32, 32}}
	for _, local := range [][]int{{32}, {40, 40}, {-1, 65}} {
		if _, err := p.WithSplit(1, local); err == nil {
			t.Errorf("WithSplit(%v) accepted", local)
		}
	}
}

func TestAssignmentDoesNotAliasAddresses(t *testing.T) {
	addrs, names := []string{"127.0.0.1:1", ""}, []string{"server-0", "server-1"}
	a := Assignment(blocks.Table{Version: 3, Servers: 2}, addrs, names)
	addrs[1], names[0] = "127.0.0.1:2", "changed"
	if a.Servers[1] != "" || a.ServerNames[0] != "server-0" {
		t.Errorf("Assignment kept the caller's slices: servers %q, names %q", a.Servers, a.ServerNames)
	}
}
