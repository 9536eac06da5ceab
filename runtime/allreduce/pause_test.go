package allreduce

import (
	"fmt"
	"testing"
	"time"
)

// TestPausesPickKPerPeriod: in every period exactly K nodes are paused for
// its first On, and the set changes between periods.
func TestPausesPickKPerPeriod(t *testing.T) {
	start := time.Unix(1000, 0)
	p := Pauses{Nodes: 8, K: 2, Period: 100 * time.Millisecond, On: 40 * time.Millisecond, Seed: 3, Start: start}
	sets := map[string]bool{}
	for k := range 20 {
		at := start.Add(time.Duration(k)*p.Period + 10*time.Millisecond)
		var paused []int
		for n := range 8 {
			until, ok := p.Paused(n, at)
			if ok {
				paused = append(paused, n)
				if want := start.Add(time.Duration(k)*p.Period + p.On); !until.Equal(want) {
					t.Errorf("period %d: node %d paused until %v; want %v", k, n, until, want)
				}
			}
			if _, ok := p.Paused(n, at.Add(40*time.Millisecond)); ok {
				t.Errorf("period %d: node %d paused after On", k, n)
			}
		}
		if len(paused) != 2 {
			t.Fatalf("period %d: paused %v; want 2 nodes", k, paused)
		}
		sets[fmt.Sprint(paused)] = true
	}
	if len(sets) < 5 {
		t.Errorf("only %d different paused sets in 20 periods", len(sets))
	}
	if _, ok := (Pauses{}).Paused(0, start); ok {
		t.Error("the zero Pauses pauses")
	}
}
