package chart

import (
	"strings"
	"testing"
)

// TestAxisLabelsDistinct: a BPT chart of 30–38 ms on a tall plot (the
// 220×60 console) labels no two rows alike; it used to show "0.03" twice.
func TestAxisLabelsDistinct(t *testing.T) {
	vals := make([]float64, 60)
	for i := range vals {
		vals[i] = 0.030 + 0.008*float64(i%7)/6
	}
	for _, h := range []int{10, 17, 24, 27} {
		out := Lines([]Series{{Name: "w", Values: vals}}, Options{Width: 100, Height: h, Min: 0.029, Max: 0.0385})
		seen := map[string]bool{}
		for _, line := range strings.Split(out, "\n") {
			label, _, ok := strings.Cut(line, "│")
			if label = strings.TrimSpace(label); !ok || label == "" {
				continue
			}
			if seen[label] {
				t.Errorf("height %d: y label %q drawn twice:\n%s", h, label, out)
			}
			seen[label] = true
		}
	}
}
