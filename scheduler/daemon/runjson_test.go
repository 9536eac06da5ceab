package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// runHeadless writes src as name.yaml and runs `kelpie run --json
// --headless` on it (its processes tagged, and killed by the tag when it
// returns), failing the test when it exits non-zero; it returns the
// result JSON and the log.
func runHeadless(t *testing.T, name, src string, timeout time.Duration) (result, log string) {
	t.Helper()
	spec := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(spec, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("KELPIE_TEST_TAG=%s-%d", name, time.Now().UnixNano())
	defer killTagged(tag)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kelpieBin, "run", spec, "--json", "--headless")
	cmd.Env = append(os.Environ(), tag)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kelpie run %s = %v\n%s", name, err, stderr.String())
	}
	return stdout.String(), stderr.String()
}
