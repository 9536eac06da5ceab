package coordinator

import (
	"context"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/coordinatorpb"
)

// TestDivergenceCleaned: what a node says of a divergence (what, value,
// detail) reaches the job's error and result without the terminal
// escapes in it.
func TestDivergenceCleaned(t *testing.T) {
	c, j := startedJob(t)
	const escape = "\x1b]0;pwned\x07\x1b[2K\r\x1b[32mAPPROVED\x1b[0m\u202e"
	if _, err := c.Diverged(context.Background(), &coordinatorpb.DivergedRequest{Job: "elastic", Node: "worker-0",
		Divergence: &coordinatorpb.Divergence{Node: "worker-0", Iteration: 3, What: "loss" + escape, Value: "NaN" + escape,
			Detail: "block 3" + escape}}); err != nil {
		t.Fatal(err)
	}
	d := j.Divergence()
	if d == nil {
		t.Fatal("no divergence recorded")
	}
	for what, got := range map[string]string{"what": d.What, "value": d.Value, "detail": d.Detail, "error": j.Err().Error()} {
		if strings.ContainsAny(got, "\x1b\x07\r\u202e") {
			t.Errorf("%s keeps control characters: %q", what, got)
		}
	}
	if d.What != "loss]0;pwned[2K[32mAPPROVED[0m" || d.Detail != "block 3]0;pwned[2K[32mAPPROVED[0m" {
		t.Errorf("what %q, detail %q: want the printable text kept", d.What, d.Detail)
	}
}
