package blocks

import (
	"reflect"
	"testing"
)

func TestLayout(t *testing.T) {
	mib := int64(1 << 20)
	tests := []struct {
		name    string
		tensors []Tensor
		bytes   int64
		servers int
		s       Strategy
		want    [][2]int64 // offset, length per block
	}{
		{"small tensors stay whole", []Tensor{{Rows: 784, Cols: 10}, {Rows: 1, Cols: 10}}, 4 * mib, 2, RoundRobin,
			[][2]int64{{0, 7840}, {0, 10}}},
		{"large tensor split evenly into blocks under the size", []Tensor{{Rows: 1000, Cols: 2500}}, 4 * mib, 2, RoundRobin,
			[][2]int64{{0, 833334}, {833334, 833333}, {1666667, 833333}}}, // 3 even blocks, each ≤ 4 MiB
		{"mxnet splits large evenly over servers", []Tensor{{Rows: 1000, Cols: 2500}}, 4 * mib, 4, MXNet,
			[][2]int64{{0, 625000}, {625000, 625000}, {1250000, 625000}, {1875000, 625000}}},
		{"sparse table spread over servers", []Tensor{{Rows: 10, Cols: 2, Sparse: true}}, 4 * mib, 3, RoundRobin,
			[][2]int64{{0, 4}, {4, 3}, {7, 3}}},
	}
	for _, tc := range tests {
		bs, err := Layout(tc.tensors, tc.bytes, tc.servers, tc.s)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got [][2]int64
		for i, b := range bs {
			if b.ID != i {
				t.Errorf("%s: block %d has ID %d", tc.name, i, b.ID)
			}
			got = append(got, [2]int64{b.Offset, b.Length})
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Layout = %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestAssign(t *testing.T) {
	bs := []Block{
		{ID: 0, Length: 100, Cols: 1}, {ID: 1, Length: 400, Cols: 1}, {ID: 2, Length: 300, Cols: 1},
		{ID: 3, Length: 200, Cols: 1}, {ID: 4, Length: 50, Cols: 1},
	}
	rr, _ := Assign(bs, 2, RoundRobin, 1)
	if want := []int{0, 1, 0, 1, 0}; !reflect.DeepEqual(rr.ServerOf, want) {
		t.Errorf("round-robin = %v; want %v", rr.ServerOf, want)
	}
	sb, _ := Assign(bs, 2, SizeBalanced, 1)
	// 400->0, 300->1, 200->1 (300<400), 100->0 (400 vs 500), 50->0 (500 vs 500: first)
	if want := []int{0, 0, 1, 1, 0}; !reflect.DeepEqual(sb.ServerOf, want) {
		t.Errorf("size-balanced = %v; want %v", sb.ServerOf, want)
	}
	if got, want := sb.Load(), []int64{2200, 2000}; !reflect.DeepEqual(got, want) {
		t.Errorf("Load = %v; want %v", got, want)
	}
	if _, err := Assign(bs, 2, "nope", 1); err == nil {
		t.Error("unknown strategy accepted")
	}
}

func TestSparseBlock(t *testing.T) {
	bs, _ := Layout([]Tensor{{Rows: 4, Cols: 1}, {Rows: 10, Cols: 1, Sparse: true}}, 1<<20, 3, RoundRobin)
	tab, _ := Assign(bs, 3, RoundRobin, 1)
	for _, tc := range []struct {
		k    uint64
		want int
	}{{0, 1}, {3, 1}, {4, 2}, {6, 2}, {7, 3}, {9, 3}, {10, -1}} {
		if got := tab.SparseBlock(1, tc.k); got != tc.want {
			t.Errorf("SparseBlock(1, %d) = %d; want %d", tc.k, got, tc.want)
		}
	}
}

func TestRebalance(t *testing.T) {
	bs := []Block{{ID: 0, Length: 400, Cols: 1}, {ID: 1, Length: 300, Cols: 1}, {ID: 2, Length: 200, Cols: 1},
		{ID: 3, Length: 100, Cols: 1}, {ID: 4, Length: 100, Cols: 1}, {ID: 5, Length: 100, Cols: 1}}
	tab := Table{Version: 3, Blocks: bs, ServerOf: []int{0, 0, 1, 1, 0, 1}, Servers: 2} // loads 3200, 1600 bytes
	tests := []struct {
		name    string
		servers int
		active  []int
		want    []int64 // loads after
		moved   int     // at most this many blocks move
	}{
		{"level two servers", 2, []int{0, 1}, []int64{2400, 2400}, 2},
		{"add a third", 3, []int{0, 1, 2}, []int64{1600, 1600, 1600}, 2},
		{"remove server 0", 2, []int{1}, []int64{0, 4800}, 3},
	}
	for _, tc := range tests {
		got, err := Rebalance(tab, tc.servers, tc.active)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Version != 4 {
			t.Errorf("%s: version %d; want 4", tc.name, got.Version)
		}
		if l := got.Load(); !reflect.DeepEqual(l, tc.want) {
			t.Errorf("%s: Rebalance loads = %v; want %v (assignment %v)", tc.name, l, tc.want, got.ServerOf)
		}
		moved := 0
		for i := range bs {
			if got.ServerOf[i] != tab.ServerOf[i] {
				moved++
			}
		}
		if moved > tc.moved {
			t.Errorf("%s: %d blocks moved; want at most %d", tc.name, moved, tc.moved)
		}
	}
	if _, err := Rebalance(tab, 2, nil); err == nil {
		t.Error("Rebalance with no active server accepted")
	}
}
