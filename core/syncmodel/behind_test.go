package syncmodel

import (
	"slices"
	"testing"
)

func TestBehind(t *testing.T) {
	tests := []struct {
		name   string
		pushes [][2]int64 // worker, progress
		want   []int
	}{
		{"nobody pushed", nil, []int{0, 1, 2}},
		{"two of three", [][2]int64{{0, 0}, {2, 0}}, []int{1}},
		{"a round completes", [][2]int64{{0, 0}, {1, 0}, {2, 0}, {1, 1}}, []int{0, 2}},
	}
	for _, tt := range tests {
		e := New(Config{Model: BSP}, []int{0, 1, 2})
		for _, p := range tt.pushes {
			e.Push(int(p[0]), p[1])
		}
		if got := e.Behind(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: Behind() = %v; want %v", tt.name, got, tt.want)
		}
	}
}
