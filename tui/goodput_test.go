package tui

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// hungJob is mnistJob hung: worker-3 has not pushed, server-0 holds pulls
// for it; with its goodput ledger and ETA.
func hungJob() *consolepb.JobView {
	j := mnistJob()
	j.State = "hung"
	j.Hung = &consolepb.Hung{Since: timestamppb.New(t0.Add(-40e9)), Missing: []string{"worker-3"}, Holding: []string{"server-0"}, BoundS: 30}
	j.Goodput = &consolepb.Goodput{AgeS: proto.Float64(100), ProductiveShare: proto.Float64(0.6), EtaS: proto.Float64(125),
		Phases: map[string]float64{"computing": 40, "communicating": 20, "waiting": 10, "recovering": 0, "paused": 0, "queued": 5, "idle": 25}}
	return j
}

func TestGoodputBar(t *testing.T) {
	g := func(p map[string]float64) *consolepb.Goodput { return &consolepb.Goodput{Phases: p} }
	tests := []struct {
		g    *consolepb.Goodput
		w    int
		want string
	}{
		{nil, 10, ""},
		{g(map[string]float64{}), 4, "    "},
		{g(map[string]float64{"computing": 1}), 4, "████"},
		{g(map[string]float64{"computing": 40, "communicating": 20, "waiting": 10, "queued": 5, "idle": 25}), 20, "████████▓▓▓▓▒▒Q·····"},
		{g(map[string]float64{"computing": 1, "communicating": 1, "idle": 1}), 10, "████▓▓▓···"},
	}
	for _, tt := range tests {
		if got := goodputBar(tt.g, tt.w); got != tt.want {
			t.Errorf("goodputBar(%v, %d) = %q; want %q", tt.g.GetPhases(), tt.w, got, tt.want)
		}
	}
}

func TestDurationText(t *testing.T) {
	for s, want := range map[float64]string{0: "0s", 59.4: "59s", 125: "2m05s", 7260: "2h01m"} {
		if got := durationText(s); got != want {
			t.Errorf("durationText(%g) = %q; want %q", s, got, want)
		}
	}
}
