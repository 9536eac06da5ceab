package server

import (
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/optim"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
)

// TestInjectFullDuplex: a bandwidth straggler gives each direction of the
// server's link a budget of its own, as a full-duplex NIC has — a request
// that empties the inbound bucket leaves the outbound one full — and the
// compute delay is charged once per request, not again to its response.
func TestInjectFullDuplex(t *testing.T) {
	const rate = 1e3 // bytes per second
	inj := []straggler.Injection{
		{Node: "server-0", Kind: straggler.Bandwidth, Rate: rate},
		{Node: "server-0", Kind: straggler.Compute, Sleep: 10 * time.Millisecond, Intensity: 0.5, Probability: 1, Start: time.Hour},
	}
	s, err := New(Config{Name: "server-0", Sync: syncmodel.Config{Model: syncmodel.BSP}, Optim: optim.Config{Kind: "sgd", LR: 1},
		Workers: []int{0}, Straggler: straggler.ForNode(inj, "server-0")})
	if err != nil {
		t.Fatal(err)
	}
	if d := s.delay(linkBurst, inbound, 0); d != 0 {
		t.Errorf("a %d-byte request into a full bucket waits %v; want none", linkBurst, d)
	}
	if d := s.delay(linkBurst, outbound, 0); d != 0 {
		t.Errorf("a %d-byte response after a %d-byte request waits %v; want none (full duplex)", linkBurst, linkBurst, d)
	}
	if d, want := s.delay(1000, inbound, 0), time.Second; d != want {
		t.Errorf("the next 1000-byte request waits %v; want %v at %v B/s", d, want, rate)
	}
	if d, want := s.delay(500, outbound, 0), 500*time.Millisecond; d != want {
		t.Errorf("the next 500-byte response waits %v; want %v", d, want)
	}
	// Within the compute injection (from an hour on): 5 ms a request,
	// nothing more for a response; the link has refilled by then.
	if d, want := s.delay(0, inbound, 2*time.Hour), 5*time.Millisecond; d != want {
		t.Errorf("a request under the compute injection waits %v; want %v", d, want)
	}
	if d := s.delay(0, outbound, 2*time.Hour); d != 0 {
		t.Errorf("a response under the compute injection waits %v; want none", d)
	}
}

// TestCPUStretchContended: a cpu straggler leaves the server a share of one
// CPU, so the stretched times of requests handled side by side follow one
// another: four concurrent requests that each kept the server busy 1 ms
// under intensity 0.9 (9 ms stretched) take at least 36 ms in all. Sleeping
// side by side, as the stretch once did, they take about 9 ms.
func TestCPUStretchContended(t *testing.T) {
	inj := []straggler.Injection{{Node: "server-0", Kind: straggler.CPUSleep, Intensity: 0.9}}
	s, err := New(Config{Name: "server-0", Sync: syncmodel.Config{Model: syncmodel.ASP}, Optim: optim.Config{Kind: "sgd", LR: 1},
		Workers: []int{0}, Straggler: straggler.ForNode(inj, "server-0")})
	if err != nil {
		t.Fatal(err)
	}
	const requests, busy = 4, time.Millisecond
	stretched := s.cfg.Straggler.CPUDelay(0, busy, 0)
	if stretched != 9*busy {
		t.Fatalf("CPUDelay(1 ms at intensity 0.9) = %v; want 9 ms", stretched)
	}
	start := time.Now()
	done := make(chan struct{})
	for range requests {
		go func() {
			s.stretch(busy)
			done <- struct{}{}
		}()
	}
	for range requests {
		<-done
	}
	// A lower bound: sleeps never end early, however loaded the machine.
	if took := time.Since(start); took < requests*stretched {
		t.Errorf("%d concurrent requests stretched in %v; want ≥ %v, one after the other", requests, took, requests*stretched)
	}
}

// TestInactiveInjectionKeepsFastPaths: an injection that is not in force
// (not started yet, over, or carried out outside the process: a cpu
// competitor, a tc link cap) changes no code path: a large push is staged
// as on a server without injections. Only an in-process injection in force
// turns staging off.
func TestInactiveInjectionKeepsFastPaths(t *testing.T) {
	for _, c := range []struct {
		name   string
		inj    []straggler.Injection
		staged bool
	}{
		{"none", nil, true},
		{"cpu: a competitor process", []straggler.Injection{{Node: "server-0", Kind: straggler.CPU, Intensity: 0.9}}, true},
		{"compute, not started", []straggler.Injection{{Node: "server-0", Kind: straggler.Compute, Sleep: time.Millisecond, Intensity: 1, Start: time.Hour}}, true},
		{"bandwidth, over", []straggler.Injection{{Node: "server-0", Kind: straggler.Bandwidth, Rate: 1 << 20, End: time.Nanosecond}}, true},
		{"compute, in force", []straggler.Injection{{Node: "server-0", Kind: straggler.Compute, Sleep: time.Millisecond, Intensity: 1}}, false},
		{"cpu-sleep, in force", []straggler.Injection{{Node: "server-0", Kind: straggler.CPUSleep, Intensity: 0.5}}, false},
	} {
		s := bigServer(t, syncmodel.Config{Model: syncmodel.ASP}, optim.Config{Kind: "sgd", LR: 1})
		s.cfg.Straggler = straggler.ForNode(c.inj, "server-0")
		time.Sleep(time.Millisecond) // past the "over" injection's end
		st := s.beginStage(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 0, Blocks: []uint32{0, 1}, Progress: 1, Data: grad(1)})
		if (st != nil) != c.staged {
			t.Errorf("%s: staged %v; want %v", c.name, st != nil, c.staged)
		}
		if st != nil {
			s.mu.Lock()
			s.dropStage(st)
			s.mu.Unlock()
		}
		if got := s.hooked(); got == c.staged {
			t.Errorf("%s: hooked() = %v; want %v", c.name, got, !c.staged)
		}
	}
}
