package experiments

import (
	"testing"

	"github.com/kelpie/kelpie/examples"
	"github.com/kelpie/kelpie/runtime/spec"
	"github.com/kelpie/kelpie/scheduler/manager"
)

// TestRATCrossRackJudge shows the RAT row can fail: it holds on the shape
// the plans predict and fails when RAT crosses too much, when ring is far
// above RAT, when accuracy drifts, and when nothing was counted.
func TestRATCrossRackJudge(t *testing.T) {
	for _, f := range RATCrossRack.Specs {
		b, err := examples.Specs.ReadFile("experiments/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := spec.Parse(f, b); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	res := func(ps, ring, rat int64, accRAT float64) map[string]*manager.Result {
		return map[string]*manager.Result{
			"rat-ps.yaml":   {BytesCrossRegion: ps, Accuracy: 0.95},
			"rat-ring.yaml": {BytesCrossRegion: ring, Accuracy: 0.95},
			"rat-rat.yaml":  {BytesCrossRegion: rat, Accuracy: accRAT},
		}
	}
	for _, c := range []struct {
		name string
		r    map[string]*manager.Result
		want bool
	}{
		{"the plans' shape", res(800, 350, 200, 0.951), true},
		{"rat crosses half of ps", res(800, 500, 400, 0.95), false},
		{"rat a byte over a quarter of ps", res(800, 350, 201, 0.95), false},
		{"ring below rat", res(800, 150, 200, 0.95), false},
		{"ring far above rat", res(800, 700, 200, 0.95), false},
		{"rat's accuracy drifts a point", res(800, 350, 200, 0.94), false},
		{"nothing counted", res(0, 0, 0, 0.95), false},
	} {
		ours, ok := RATCrossRack.Judge(c.r)
		if ok != c.want {
			t.Errorf("%s: Judge = %q, %v; want %v", c.name, ours, ok, c.want)
		}
	}
}
