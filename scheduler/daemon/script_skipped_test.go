package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestScriptSkippedReported: a script step whose time comes after the job
// has ended is reported in the result (script_skipped) and in the log,
// never silently dropped.
func TestScriptSkippedReported(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	stdout, stderr := runHeadless(t, "late-script", `name: late-script
model: {kind: softmax}
data: {kind: mnist, epochs: 1, seed: 1}
train: {global_batch: 256, lr: 0.1}
cluster: {servers: 1, workers: 2}
script:
  - {at: 1h, action: restart, node: worker-1}
`, 3*time.Minute)
	var r struct {
		Skipped []struct {
			AtS    float64 `json:"at_s"`
			Action string  `json:"action"`
			Node   string  `json:"node"`
		} `json:"script_skipped"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("result is not JSON: %v\n%s", err, stdout)
	}
	if len(r.Skipped) != 1 || r.Skipped[0].AtS != 3600 || r.Skipped[0].Action != "restart" || r.Skipped[0].Node != "worker-1" {
		t.Errorf("script_skipped = %+v; want the restart of worker-1 at 3600 s", r.Skipped)
	}
	if !strings.Contains(stderr, "1 script step(s) never ran, the job ended first: restart at 3600s (worker-1)") {
		t.Errorf("no log line for the skipped step:\n%s", stderr)
	}
}
