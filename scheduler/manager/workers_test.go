package manager

import (
	"maps"
	"testing"
)

// TestResplit: the global batch stays whole when workers come and go;
// the others keep their proportions and a new worker gets an even share.
func TestResplit(t *testing.T) {
	for _, tt := range []struct {
		name    string
		total   int
		names   []string
		current map[string]int
		want    map[string]int
	}{
		{"a new worker gets an even share, the others shrink in proportion", 128,
			[]string{"w0", "w1", "w2", "w3"}, map[string]int{"w0": 64, "w1": 32, "w2": 32},
			map[string]int{"w0": 48, "w1": 24, "w2": 24, "w3": 32}},
		{"a removed worker's share goes to the others in proportion", 128,
			[]string{"w0", "w2"}, map[string]int{"w0": 48, "w1": 64, "w2": 16},
			map[string]int{"w0": 96, "w2": 32}},
		{"remainders go to the largest fractions", 10,
			[]string{"a", "b", "c"}, map[string]int{"a": 1, "b": 1, "c": 1},
			map[string]int{"a": 4, "b": 3, "c": 3}},
		{"nobody gets less than 1", 3,
			[]string{"a", "b", "c"}, map[string]int{"a": 100, "b": 1},
			map[string]int{"a": 1, "b": 1, "c": 1}},
		{"no current sizes: an even split", 7,
			[]string{"a", "b"}, nil, map[string]int{"a": 4, "b": 3}},
	} {
		got := resplit(tt.total, tt.names, tt.current)
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s: resplit(%d, %v, %v) = %v; want %v", tt.name, tt.total, tt.names, tt.current, got, tt.want)
		}
		sum := 0
		for _, b := range got {
			sum += b
		}
		if sum != tt.total {
			t.Errorf("%s: sizes sum to %d; want %d", tt.name, sum, tt.total)
		}
	}
}
