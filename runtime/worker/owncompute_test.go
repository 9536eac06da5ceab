package worker

import (
	"testing"
	"time"

	"github.com/kelpie/kelpie/runtime/model"
)

// timedModel is a model that measures its own compute (as a torch model
// does: its child's forward and backward).
type timedModel struct {
	model.Model
	own time.Duration
}

func (m timedModel) StepCompute() time.Duration { return m.own }

// TestOwnCompute: a cpu-sleep straggler stretches a torch model's own
// forward and backward, not the round trip to its child around them; a
// built-in model's compute is the call itself.
func TestOwnCompute(t *testing.T) {
	var builtin model.Model = struct{ model.Model }{} // measures nothing of its own
	timed := timedModel{Model: builtin, own: 3 * time.Millisecond}
	for _, c := range []struct {
		name string
		m    model.Model
		n    int
		want time.Duration
	}{
		{"built-in model: the call", builtin, 32, 10 * time.Millisecond},
		{"own compute: the model's", timed, 32, 3 * time.Millisecond},
		{"empty batch: nothing was computed by the model", timed, 0, 10 * time.Millisecond},
	} {
		if got := ownCompute(c.m, 10*time.Millisecond, c.n); got != c.want {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
}
