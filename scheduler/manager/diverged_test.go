package manager

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestResultJSONNonFinite: a result with a NaN loss and accuracy is valid
// JSON with nulls, and reads back as NaN (missing), never 0.
func TestResultJSONNonFinite(t *testing.T) {
	r := Result{Name: "x", FinalLoss: math.NaN(), Accuracy: math.Inf(1), Iterations: 3, Actions: []ActionResult{},
		Diverged: &Divergence{Node: "worker-1", Iteration: 2, What: "loss", Value: "NaN"}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("Marshal = %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	if v, ok := m["final_loss"]; !ok || v != nil {
		t.Errorf("final_loss = %v; want null", v)
	}
	if v, ok := m["accuracy"]; !ok || v != nil {
		t.Errorf("accuracy = %v; want null", v)
	}
	if strings.Count(string(b), `"final_loss"`) != 1 {
		t.Errorf("final_loss written more than once: %s", b)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(back.FinalLoss) || !math.IsNaN(back.Accuracy) || back.Iterations != 3 || back.Diverged == nil ||
		back.Diverged.Node != "worker-1" {
		t.Errorf("read back %+v", back)
	}
	// Finite figures are written as numbers.
	ok := Result{Name: "y", FinalLoss: 0.25, Accuracy: 0.9}
	b, _ = json.Marshal(ok)
	if !strings.Contains(string(b), `"final_loss":0.25`) || !strings.Contains(string(b), `"accuracy":0.9`) ||
		strings.Contains(string(b), "diverged") {
		t.Errorf("Marshal(%+v) = %s", ok, b)
	}
}
