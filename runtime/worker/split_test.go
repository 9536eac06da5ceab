package worker

import (
	"testing"
	"time"
)

func TestSplitAdd(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name                                 string
		total, compute, data, exchange, wait time.Duration
		pushed, pulled                       int64
		want                                 Split
	}{
		{"bytes split the round trip", 100 * ms, 50 * ms, 10 * ms, 30 * ms, 0, 300, 100,
			Split{Iterations: 1, Compute: 50 * ms, Data: 10 * ms, Push: 22500 * time.Microsecond, Pull: 7500 * time.Microsecond, Other: 10 * ms}},
		{"the hold is wait, not comm", 100 * ms, 20 * ms, 0, 70 * ms, 60 * ms, 1, 1,
			Split{Iterations: 1, Compute: 20 * ms, Push: 5 * ms, Pull: 5 * ms, Wait: 60 * ms, Other: 10 * ms}},
		{"no bytes: halves", 40 * ms, 0, 0, 40 * ms, 0, 0, 0,
			Split{Iterations: 1, Push: 20 * ms, Pull: 20 * ms}},
		{"other never negative", 10 * ms, 20 * ms, 0, 0, 0, 0, 0,
			Split{Iterations: 1, Compute: 20 * ms}},
	}
	for _, tt := range tests {
		var s Split
		s.add(tt.total, tt.compute, tt.data, tt.exchange, tt.wait, tt.pushed, tt.pulled)
		if s != tt.want {
			t.Errorf("%s: add = %+v; want %+v", tt.name, s, tt.want)
		}
	}
}
