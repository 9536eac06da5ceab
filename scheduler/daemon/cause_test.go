package daemon

import (
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/consolepb"
)

// untilCause submits src and watches the job's views (bounded) until node
// shows a cause of kind; it kills the job then, and reports the view.
func untilCause(t *testing.T, d *Daemon, src, node, kind string) *consolepb.NodeView {
	t.Helper()
	s, err := spec.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	name, err := d.Manager.SubmitSpec(s, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Manager.Kill(name, "test") }()
	deadline := time.Now().Add(3 * time.Minute)
	var last *consolepb.NodeView
	for time.Now().Before(deadline) {
		vs := d.Manager.View([]string{name}, 0)
		if len(vs) == 1 {
			for _, n := range vs[0].Nodes {
				if n.Name == node {
					last = n
				}
			}
			if last.GetCause().GetKind() == kind {
				return last
			}
			if st := vs[0].State; st != "running" && st != "starting" && st != "pending" {
				t.Fatalf("%s ended (%s) before %s showed a %s cause; last: %v", name, st, node, kind, last)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s never showed a %s cause; last: %v", node, kind, last)
	return nil
}

// TestCauseCompute: a worker slowed by a compute injection is a straggler
// whose cause is "compute", its compute time a multiple of the job's
// median; the other workers, not straggling, show no cause.
func TestCauseCompute(t *testing.T) {
	if testing.Short() {
		t.Skip("an MNIST job")
	}
	d := startLogged(t)
	defer d.Close(true)
	n := untilCause(t, d, `
name: cause-compute
model: {kind: softmax}
data: {kind: mnist, epochs: 20, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 2, workers: 4}
sync: {model: bsp}
policies:
  antdt-nd: {mode: off, lambda: 1.5, window_transient: 1s, window_persistent: 4s}
stragglers:
  - {node: worker-2, kind: compute, sleep: 20ms, intensity: 1, start: 0s}
`, "worker-2", "compute")
	t.Logf("worker-2: %s (class %s, split %v)", n.GetCause().GetDetail(), n.GetClass(), n.GetSplit())
	if c := n.GetCause(); !(c.GetRatio() > 1) || c.GetSeconds() <= c.GetMedianSeconds() {
		t.Errorf("worker-2's cause %v: want its compute above the median", c)
	}
	if !straggling(n.GetClass()) {
		t.Errorf("worker-2 has a cause but is %s", n.GetClass())
	}
}

// straggling is a class that shows a cause.
func straggling(class string) bool { return class == "transient" || class == "persistent" }

// TestCauseLink: a server behind a shaped link (tc tbf on its namespace's
// interface: the network lab, as root) is a straggler whose cause is
// "link": its workers' round trips to it went up, its own queueing and
// handling did not.
func TestCauseLink(t *testing.T) {
	if testing.Short() {
		t.Skip("an MNIST job in the network lab")
	}
	if why := labUnavailable(); why != "" {
		t.Skipf("the network lab cannot run here: %s", why)
	}
	lab, d := labDaemon(t)
	defer d.Close(true)
	lab.slow("server-1", "4mbit")
	n := untilCause(t, d, `
name: cause-link
model: {kind: softmax}
data: {kind: mnist, epochs: 20, seed: 1}
train: {global_batch: 64, lr: 0.1}
cluster: {servers: 2, workers: 2, block_bytes: 8192}
sync: {model: bsp}
policies:
  antdt-nd: {mode: off, lambda: 1.5, window_transient: 1s, window_persistent: 4s}
`, "server-1", "link")
	t.Logf("server-1: %s (class %s)", n.GetCause().GetDetail(), n.GetClass())
	if c := n.GetCause(); !(c.GetRatio() > 1) {
		t.Errorf("server-1's cause %v: want its link above the median", c)
	}
}
