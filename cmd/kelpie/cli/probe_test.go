package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestPrintProbe: the verdict first, then a line per node with its kernel
// and, a worker, its round trip to each server, and why a node is missing.
func TestPrintProbe(t *testing.T) {
	p := &consolepb.ProbeResult{Verdict: "server", Subject: "server-1", Cause: "link", Ratio: 45.5,
		Detail: "server-1's link is slow — round trips to it 45.5× the other servers' for every worker",
		Nodes: []*consolepb.ProbeNode{
			{Node: "server-1", Role: "server", KernelS: 0.001, KernelRatio: 1.1},
			{Node: "worker-0", Role: "worker", KernelS: 0.001, KernelRatio: 0.9, Trips: []*consolepb.ProbeServerTrip{
				{Server: "server-0", RttS: 0.0098, Ratio: 1}, {Server: "server-1", RttS: 0.6676, Ratio: 3.1}}},
			{Node: "worker-1", Role: "worker", Error: "the role (pid 9) did not answer within 7.5s (process state: T (stopped))"},
		}}
	var b bytes.Buffer
	printProbe(&b, p)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "server: server-1's link is slow") {
		t.Fatalf("output:\n%s", b.String())
	}
	for i, want := range []string{"kernel    1.0ms (1.1×)", "server-1 667.6ms (3.1×)", "!! the role (pid 9) did not answer"} {
		if !strings.Contains(lines[i+1], want) {
			t.Errorf("line %d %q does not hold %q", i+1, lines[i+1], want)
		}
	}
}
