package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestAttackRow15NodeLogs: node logs (and the launcher's record file) are
// readable by the scheduler's user only — 0600 in a 0700 directory — also
// where an earlier version left the directory 0755 and a log 0644.
func TestAttackRow15NodeLogs(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	logs := filepath.Join(t.TempDir(), "logs", "joba")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(logs, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	old := filepath.Join(logs, "worker-0.log")
	if err := os.WriteFile(old, []byte("an earlier run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o644); err != nil {
		t.Fatal(err)
	}
	l := &Local{Exe: sh, Detach: true, LogDir: logs, RecordFile: filepath.Join(logs, "procs.jsonl")}
	for _, node := range []string{"worker-0", "server-0"} {
		p, err := l.Start(node, "-c", "echo serving addr=127.0.0.1:1")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Exited():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit", node)
		}
	}
	want := map[string]os.FileMode{logs: 0o700, old: 0o600, filepath.Join(logs, "server-0.log"): 0o600, filepath.Join(logs, "procs.jsonl"): 0o600}
	for path, mode := range want {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != mode {
			t.Errorf("%s: mode %v, want %v", path, got, mode)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(logs, "server-0.log")); string(b) != "serving addr=127.0.0.1:1\n" {
		t.Errorf("server-0.log = %q", b)
	}
}
