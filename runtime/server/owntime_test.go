package server

import (
	"context"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
)

// TestOwnTime: a server counts every request it handles, with the time it
// queued for its lock and the time it handled it, in its stats; an
// injected compute delay (a slow server, not a slow link) is its own
// handling time.
func TestOwnTime(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP, Pull: syncmodel.Lazy})
	ctx := context.Background()
	for w := int32(0); w < 2; w++ {
		if _, err := s.Push(ctx, &pspb.PSRequest{Worker: w, Progress: 0, Blocks: []uint32{0}, Data: floats(1, 1, 1, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := s.Stats(ctx, &pspb.StatsRequest{})
	if st.Requests != 2 || !(st.ApplySeconds > 0) || st.QueueSeconds < 0 {
		t.Errorf("stats after 2 pushes: %d requests, apply %gs, queue %gs; want 2, > 0, ≥ 0", st.Requests, st.ApplySeconds, st.QueueSeconds)
	}
	before := st.ApplySeconds
	delay := 30 * time.Millisecond
	s.cfg.Straggler = straggler.ForNode([]straggler.Injection{{Node: "server-0", Kind: straggler.Compute, Sleep: delay, Intensity: 1, Probability: 1}}, "server-0")
	s.delay(0, inbound, time.Second)
	st, _ = s.Stats(ctx, &pspb.StatsRequest{})
	if got := st.ApplySeconds - before; got < delay.Seconds() {
		t.Errorf("an injected compute delay of %v added %gs of handling; want it all", delay, got)
	}
}
