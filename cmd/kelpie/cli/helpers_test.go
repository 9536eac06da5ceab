package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kelpie/kelpie/scheduler/daemon"
)

// runInto runs kelpie with args with *stream (os.Stdout or os.Stderr)
// redirected, and returns its exit code and what it wrote there.
func runInto(t *testing.T, stream **os.File, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := *stream
	*stream = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	code := Run(args)
	*stream = old
	w.Close()
	return code, <-out
}

// runCaptured runs kelpie with args and returns its exit code and stderr.
func runCaptured(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return runInto(t, &os.Stderr, args...)
}

// runStdout runs kelpie with args and returns its exit code and stdout.
func runStdout(t *testing.T, args ...string) (int, string) {
	t.Helper()
	return runInto(t, &os.Stdout, args...)
}

// testScheduler starts a scheduler without a launcher in a temporary
// directory, with one operator token "optok"; it returns the scheduler and
// the directory, and stops it when the test ends.
func testScheduler(t *testing.T) (*daemon.Daemon, string) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("optok operator op\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Start(daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: filepath.Join(dir, "d"),
		Tokens: tokens, NoLaunch: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(true) })
	return d, dir
}
