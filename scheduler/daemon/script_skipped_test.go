package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	spec := filepath.Join(t.TempDir(), "late.yaml")
	if err := os.WriteFile(spec, []byte(`name: late-script
model: {kind: softmax}
data: {kind: mnist, epochs: 1, seed: 1}
train: {global_batch: 256, lr: 0.1}
cluster: {servers: 1, workers: 2}
script:
  - {at: 1h, action: restart, node: worker-1}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("KELPIE_TEST_TAG=script-skipped-%d", time.Now().UnixNano())
	defer killTagged(tag)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kelpieBin, "run", spec, "--json", "--headless")
	cmd.Env = append(os.Environ(), tag)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kelpie run = %v\n%s", err, stderr.String())
	}
	var r struct {
		Skipped []struct {
			AtS    float64 `json:"at_s"`
			Action string  `json:"action"`
			Node   string  `json:"node"`
		} `json:"script_skipped"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("result is not JSON: %v\n%s", err, stdout.String())
	}
	if len(r.Skipped) != 1 || r.Skipped[0].AtS != 3600 || r.Skipped[0].Action != "restart" || r.Skipped[0].Node != "worker-1" {
		t.Errorf("script_skipped = %+v; want the restart of worker-1 at 3600 s", r.Skipped)
	}
	if !strings.Contains(stderr.String(), "1 script step(s) never ran, the job ended first: restart at 3600s (worker-1)") {
		t.Errorf("no log line for the skipped step:\n%s", stderr.String())
	}
}
