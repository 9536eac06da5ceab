package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestHeadlessProgress: without a console, `kelpie run` writes a progress
// line at every tick (state, iteration, loss, throughput) and stops when
// the run is done; --headless is what decides it at a terminal.
func TestHeadlessProgress(t *testing.T) {
	done := make(chan struct{})
	tick := make(chan time.Time)
	var out bytes.Buffer
	finished := make(chan struct{})
	it := int64(0)
	go func() {
		defer close(finished)
		progressLines(done, tick, &out, func() *consolepb.JobView {
			it += 600
			return &consolepb.JobView{Name: "mnist-mlp", State: "running", Iteration: it, Iterations: 9375, Loss: 0.41234, Throughput: 2130}
		})
	}()
	tick <- time.Time{}
	tick <- time.Time{}
	close(done)
	<-finished
	want := "kelpie run: mnist-mlp running · iteration 600/9375 · loss 0.4123 · 2130 samples/s\n" +
		"kelpie run: mnist-mlp running · iteration 1200/9375 · loss 0.4123 · 2130 samples/s\n"
	if out.String() != want {
		t.Errorf("progress lines:\n%s\nwant:\n%s", out.String(), want)
	}
	c := runCmd()
	if f := c.Flags().Lookup("headless"); f == nil || !strings.Contains(f.Usage, "progress line on stderr") {
		t.Errorf("--headless usage does not say what it does: %v", f)
	}
}
