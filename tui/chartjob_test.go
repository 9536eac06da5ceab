package tui

import (
	"math"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestServerAddedMidRunNotDrawnBefore: a server added mid-run has zeros in
// its speed series for the time before it existed; the chart draws nothing
// there (it drew a line at 0 MB/s across the left of the chart).
func TestServerAddedMidRunNotDrawnBefore(t *testing.T) {
	if got := notYet([]float64{0, 0, 3, 0, 4}); !math.IsNaN(got[0]) || !math.IsNaN(got[1]) || got[2] != 3 || got[3] != 0 {
		t.Errorf("notYet = %v; want NaN NaN 3 0 4", got)
	}
	v := testApp(nil, false).views[viewJob].(*jobView)
	old := make([]float64, 60)
	added := make([]float64, 60)
	for i := range old {
		old[i] = 4e8
		if i >= 40 {
			added[i] = 2e8
		}
	}
	out := v.lineChart("speed per server", []*consolepb.Series{
		{Name: "speed/server-0", Unit: "B/s", Values: old},
		{Name: "speed/server-2", Unit: "B/s", Values: added},
	}, "speed/", 80, 14)
	lines := strings.Split(out, "\n")
	bottom := lines[len(lines)-2] // the 0 row, above the legend
	if _, plot, ok := strings.Cut(bottom, "│"); !ok || strings.ContainsAny(plot, "─╭╮╯╰") {
		t.Errorf("the 0 MB/s row has a line on it:\n%s", out)
	}
}
