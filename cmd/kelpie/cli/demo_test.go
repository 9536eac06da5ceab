package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/examples"
	"github.com/kelpie/kelpie/scheduler/daemon"
)

// TestDemoRunsKeepTheirNames: each demo run gets a name of its own, so a
// finished run is not replaced by the next (its history and replay stay).
func TestDemoRunsKeepTheirNames(t *testing.T) {
	for run, want := range map[int]string{1: "straggler-demo", 2: "straggler-demo-2", 7: "straggler-demo-7"} {
		if got := demoRunName("straggler-demo", run); got != want {
			t.Errorf("demoRunName(%d) = %q; want %q", run, got, want)
		}
	}
	d, err := daemon.Start(daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: filepath.Join(t.TempDir(), "d"),
		NoLaunch: true, AllowAnonymousViewer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	s, err := spec.Parse("straggler-demo.yaml", examples.Demo())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); keepDemoRunning(ctx, d, s) }()
	// The first run, killed: the loop starts a second under a new name
	// and the first stays.
	deadline := time.Now().Add(20 * time.Second)
	for len(d.Manager.View([]string{"straggler-demo"}, 0)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := d.Manager.Kill("straggler-demo", "test"); err != nil {
		t.Fatal(err)
	}
	for len(d.Manager.View([]string{"straggler-demo-2"}, 0)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	first, second := d.Manager.View([]string{"straggler-demo"}, 0), d.Manager.View([]string{"straggler-demo-2"}, 0)
	if len(first) != 1 || len(second) != 1 || first[0].GetState() != "killed" {
		t.Errorf("after the first run ended: %d views of straggler-demo (%v), %d of straggler-demo-2; want the first kept, killed, and the second started",
			len(first), first, len(second))
	}
	if s.Name != "straggler-demo" {
		t.Errorf("the demo's spec was renamed to %q", s.Name)
	}
}

// TestDemoLogsPrivate: the demo's scheduler.log and nodes.log are 0600 in
// a 0700 directory, also where an earlier run left them more open.
func TestDemoLogsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nodes.log"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sched, nodes, err := openDemoLogs(dir)
	if err != nil {
		t.Fatal(err)
	}
	sched.Close()
	nodes.Close()
	for path, want := range map[string]os.FileMode{dir: 0o700, sched.Name(): 0o600, nodes.Name(): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o; want %#o", path, got, want)
		}
	}
	if filepath.Base(sched.Name()) != "scheduler.log" || filepath.Base(nodes.Name()) != "nodes.log" {
		t.Errorf("logs %s, %s; want scheduler.log, nodes.log", sched.Name(), nodes.Name())
	}
}
