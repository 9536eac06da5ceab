package manager

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// StateDiverged is a job stopped because its training diverged: a worker
// computed a non-finite loss or a server's update produced a non-finite
// parameter. The job's error and its result's Diverged say where and when.
const StateDiverged = "diverged"

// Divergence is the `diverged` object of a result: where the job's
// training was first seen to diverge.
type Divergence struct {
	Node      string `json:"node"`
	Iteration int64  `json:"iteration"`
	What      string `json:"what"`  // loss | parameters | gradient
	Value     string `json:"value"` // NaN, +Inf or -Inf
	Detail    string `json:"detail,omitempty"`
	Reporter  string `json:"reporter,omitempty"` // the worker that told the scheduler
}

func divergenceFrom(d *coordinatorpb.Divergence) *Divergence {
	if d == nil {
		return nil
	}
	return &Divergence{Node: d.Node, Iteration: d.Iteration, What: d.What, Value: d.Value, Detail: d.Detail, Reporter: d.Reporter}
}

func (d *Divergence) proto() *coordinatorpb.Divergence {
	if d == nil {
		return nil
	}
	return &coordinatorpb.Divergence{Node: d.Node, Iteration: d.Iteration, What: d.What, Value: d.Value, Detail: d.Detail, Reporter: d.Reporter}
}

// String is the one-line reason: "non-finite loss (NaN) at worker-1,
// iteration 12".
func (d *Divergence) String() string {
	return fmt.Sprintf("non-finite %s (%s) at %s, iteration %d", d.What, d.Value, d.Node, d.Iteration)
}

// diverged records a job whose training diverged: its result (what was
// trained until then, no evaluation: the final loss and accuracy are not
// numbers) and its state.
func (m *Manager) diverged(j *jobState, d *coordinatorpb.Divergence) {
	m.settleOpen(j)
	res := j.result(StateDiverged)
	res.FinalLoss, res.Accuracy = math.NaN(), math.NaN()
	res.Diverged = divergenceFrom(d)
	res.JCTSeconds = m.now().Sub(j.submitted).Seconds()
	j.onActor(func() {
		j.res = res
	})
	m.finish(j, StateDiverged, fmt.Errorf("training diverged: %s", res.Diverged))
}

// resultJSON is Result on the wire: a non-finite number is written as
// null (JSON has no NaN), so the object stays valid JSON.
type resultJSON struct {
	resultFields
	FinalLoss *float64 `json:"final_loss"`
	Accuracy  *float64 `json:"accuracy"`
}

type resultFields Result // Result without its methods

// MarshalJSON writes the final loss and the accuracy as null when they are
// not finite numbers.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(resultJSON{resultFields: resultFields(r), FinalLoss: finiteOrNil(r.FinalLoss),
		Accuracy: finiteOrNil(r.Accuracy)})
}

// UnmarshalJSON reads a null final loss or accuracy back as NaN: missing,
// never 0.
func (r *Result) UnmarshalJSON(b []byte) error {
	var w resultJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Result(w.resultFields)
	r.FinalLoss, r.Accuracy = nanIfNil(w.FinalLoss), nanIfNil(w.Accuracy)
	return nil
}

func finiteOrNil(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

func nanIfNil(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}
