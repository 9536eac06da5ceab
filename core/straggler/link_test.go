package straggler

import (
	"reflect"
	"testing"
	"time"
)

func TestLinkRates(t *testing.T) {
	s := time.Second
	all := []Injection{
		{Node: "server-1", Kind: Link, Rate: 5e6, Start: 2 * s},
		{Node: "server-1", Kind: Link, Rate: 1e6, Start: 4 * s, End: 6 * s},
		{Region: "r1", Kind: Link, Rate: 2e6, Start: 0, Period: 10 * s, On: 3 * s},
		{Node: "worker-0", Kind: Pause, End: s}, // not a link
	}
	srv, r1 := LinkTarget{Node: "server-1"}, LinkTarget{Region: "r1"}
	for _, c := range []struct {
		at   time.Duration
		want map[LinkTarget]float64
	}{
		{0, map[LinkTarget]float64{srv: 0, r1: 2e6}},
		{2 * s, map[LinkTarget]float64{srv: 5e6, r1: 2e6}},
		{3 * s, map[LinkTarget]float64{srv: 5e6, r1: 0}},
		{5 * s, map[LinkTarget]float64{srv: 1e6, r1: 0}},
		{6 * s, map[LinkTarget]float64{srv: 5e6, r1: 0}},
		{11 * s, map[LinkTarget]float64{srv: 5e6, r1: 2e6}},
	} {
		if got := LinkRates(all, c.at); !reflect.DeepEqual(got, c.want) {
			t.Errorf("LinkRates(%v) = %v; want %v", c.at, got, c.want)
		}
	}
	var changes []time.Duration
	for at, ok := time.Duration(-1), true; ok && at < 25*s; {
		if at, ok = NextLinkChange(all, at); ok {
			changes = append(changes, at)
		}
	}
	want := []time.Duration{0, 2 * s, 3 * s, 4 * s, 6 * s, 10 * s, 13 * s, 20 * s, 23 * s, 30 * s}
	if !reflect.DeepEqual(changes, want) {
		t.Errorf("changes %v; want %v", changes, want)
	}
}
