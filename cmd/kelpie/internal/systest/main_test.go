package systest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// kelpieBin is the kelpie binary that agents and roles run, built once.
var kelpieBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kelpie-systest")
	if err != nil {
		panic(err)
	}
	kelpieBin = filepath.Join(dir, "kelpie")
	out, err := exec.Command("go", "build", "-o", kelpieBin, "github.com/kelpie/kelpie/cmd/kelpie").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		panic(fmt.Sprintf("building kelpie: %v\n%s", err, out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// logWriter logs what a daemon's nodes write.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// writeTokens writes a console token file: op-token (operator alice), view-token (viewer bob).
func writeTokens(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("# test tokens\nop-token operator alice\nview-token viewer bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// watcher keeps the latest view of one job from the console stream, and the straggler classes and
// BPTs its nodes were seen with.
type watcher struct {
	mu     sync.Mutex
	job    *consolepb.JobView
	seen   map[string]map[string]bool // node -> classes seen
	bpt    map[string]bool            // nodes seen with a BPT
	change chan struct{}
}

func (w *watcher) handle(m any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var jobs []*consolepb.JobView
	switch x := m.(type) {
	case client.SnapshotMsg:
		jobs = x.Snapshot.Jobs
	case client.DeltaMsg:
		jobs = x.Delta.Jobs
	}
	for _, j := range jobs {
		w.job = j
		for _, n := range j.Nodes {
			if w.seen[n.Name] == nil {
				w.seen[n.Name] = map[string]bool{}
			}
			w.seen[n.Name][n.Class] = true
			if n.Role == "worker" && n.BptShortS > 0 {
				w.bpt[n.Name] = true
			}
		}
	}
	select {
	case w.change <- struct{}{}:
	default:
	}
}

// until waits (bounded) for cond on the latest view.
func (w *watcher) until(t *testing.T, what string, d time.Duration, cond func(*consolepb.JobView) bool) *consolepb.JobView {
	t.Helper()
	deadline := time.After(d)
	for {
		w.mu.Lock()
		j := w.job
		ok := j != nil && cond(j)
		w.mu.Unlock()
		if ok {
			return j
		}
		select {
		case <-w.change:
		case <-deadline:
			t.Fatalf("timed out after %v waiting for %s; last view: %v", d, what, j)
		}
	}
}

// tagged lists the processes whose environment holds tag (KELPIE_TEST_TAG=...), this one aside.
func tagged(tag string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, []byte(tag)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
