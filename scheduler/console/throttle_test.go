package console

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestBadTokenFlood: 1,000 connections with wrong tokens are mostly turned
// away before their token is looked at, the flood leaves at most one audit
// record per minute, the events a viewer holds are all still there, and a
// viewer with the right token from another address is unaffected.
func TestBadTokenFlood(t *testing.T) {
	b := newFakeBackend()
	for i := range 50 {
		b.addEvent(&consolepb.Event{Kind: "job", Message: fmt.Sprint("real event ", i)})
	}
	h := newHarness(t, b, Options{})
	viewer := h.dial("viewer-secret")
	viewer.welcome()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	sem := make(chan struct{}, 20)
	for i := range 1000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			hdr := http.Header{"Authorization": {"Bearer wrong-" + string(rune('a'+i%26))}}
			c, resp, err := websocket.Dial(ctx, h.url(), &websocket.DialOptions{HTTPHeader: hdr})
			code := 101
			if resp != nil {
				code = resp.StatusCode
			}
			if err == nil {
				_, _, _ = c.Read(ctx) // the close with the refusal
				c.CloseNow()
			}
			mu.Lock()
			statuses[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := h.s.Stats()
	if st.Refused != 1000 {
		t.Errorf("refused %d of 1000 bad logins", st.Refused)
	}
	// Tokens looked at: the first parallel attempts (at most the 20 in
	// flight), then one per back-off step (250ms doubling to 30s) over
	// however long the flood took.
	checked := st.Refused - st.Throttled
	if limit := uint64(20 + 8 + elapsed/(30*time.Second)); checked > limit {
		t.Errorf("%d tokens checked in %s (statuses %v); want at most %d", checked, elapsed, statuses, limit)
	}
	if statuses[http.StatusTooManyRequests] < 900 {
		t.Errorf("statuses %v: want most answered 429", statuses)
	}
	audits := b.auditLog()
	if limit := 1 + int(elapsed/time.Minute); len(audits) > limit {
		t.Errorf("%d audit records for one address in %s; want at most %d", len(audits), elapsed, limit)
	}

	evs, _ := b.EventsSince(0, 1000)
	real := 0
	for _, e := range evs {
		if strings.HasPrefix(e.Message, "real event") {
			real++
		}
	}
	if real != 50 {
		t.Errorf("the flood left %d of 50 real events", real)
	}
	// The viewer who was watching through the flood is still connected
	// and can subscribe.
	viewer.subscribe(0)
	if n := len(viewer.snapshot().Events); n != 50 {
		t.Errorf("viewer's snapshot after the flood holds %d events, want the 50 real ones", n)
	}
}

// TestUnauthenticatedCap: streams that never say hello are capped; one
// beyond the cap closes the oldest instead of being refused, and a client
// with its token in the header takes no slot at all.
func TestUnauthenticatedCap(t *testing.T) {
	h := newHarness(t, newFakeBackend(), Options{MaxUnauthenticated: 5, HelloTimeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var held []*websocket.Conn
	defer func() {
		for _, c := range held {
			c.CloseNow()
		}
	}()
	for range 5 {
		c, _, err := websocket.Dial(ctx, h.url(), nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitUntil(t, "five unauthenticated streams", func() bool { return h.s.throttle.unauthenticated() == 5 })
	sixth, _, err := websocket.Dial(ctx, h.url(), nil)
	if err != nil {
		t.Fatalf("sixth unauthenticated stream: %v; want it upgraded and the oldest closed", err)
	}
	held = append(held, sixth)
	_, _, err = held[0].Read(ctx)
	var ce websocket.CloseError
	if !asCloseError(err, &ce) || ce.Reason != reasonEvicted {
		t.Fatalf("the oldest waiting stream read %v; want closed with %q", err, reasonEvicted)
	}
	if n := h.s.throttle.unauthenticated(); n != 5 {
		t.Errorf("%d streams waiting after the eviction; want 5", n)
	}
	// A client with its token in the header is not held back by the cap.
	c := h.dial("viewer-secret")
	c.welcome()
	if n := h.s.throttle.unauthenticated(); n != 5 {
		t.Errorf("%d streams waiting after a header login; want still 5", n)
	}
	c.ws.CloseNow()
}

func TestTokensFileMode(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("abc operator olga\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a world-readable tokens file was accepted: %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(p); err != nil {
		t.Fatal(err)
	}
}

// TestThrottleByNetwork: failures back off the whole network (all of
// loopback), a global budget caps failures from every network, and an
// address with a recent success passes both until it fails itself.
func TestThrottleByNetwork(t *testing.T) {
	th := newThrottle(Options{}.withDefaults())
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	th.result("127.0.0.1:1000", true, now) // the operator logged in
	for i := range 4 {
		th.result(fmt.Sprintf("127.9.0.%d:1", i+2), false, now)
	}
	if wait, why := th.check("127.200.1.1:5", now); wait == 0 {
		t.Errorf("a fresh loopback address after four loopback failures: not backing off")
	} else if !strings.Contains(why, "loopback") {
		t.Errorf("why = %q; want it to name the network", why)
	}
	if wait, _ := th.check("127.0.0.1:2000", now); wait != 0 {
		t.Errorf("the operator's address waits %v behind strangers' failures", wait)
	}
	if wait, _ := th.check("10.0.0.1:5", now); wait != 0 {
		t.Errorf("another network waits %v", wait)
	}
	// When the back-off ends, one login is looked at; the next waits for
	// its result.
	later := now.Add(time.Second)
	if wait, _ := th.check("127.9.1.1:5", later); wait != 0 {
		t.Errorf("after the back-off: wait %v", wait)
	}
	if wait, _ := th.check("127.9.1.2:5", later); wait == 0 {
		t.Errorf("a second login in parallel was looked at too")
	}
	// The operator's address fails once: it backs off with its network.
	th.result("127.0.0.1:3000", false, now)
	if wait, _ := th.check("127.0.0.1:2000", now); wait == 0 {
		t.Errorf("an address that failed keeps passing its network's back-off")
	}
	// The global budget: failures from 30 networks spend it.
	for i := range 40 {
		th.result(fmt.Sprintf("10.%d.0.1:1", i+1), false, now)
	}
	if wait, why := th.check("192.0.2.1:5", now); wait == 0 || !strings.Contains(why, "this scheduler") {
		t.Errorf("a fresh network after the global budget is spent: wait %v (%q)", wait, why)
	}
	if wait, _ := th.check("192.0.2.1:5", now.Add(time.Minute)); wait != 0 {
		t.Errorf("the global budget does not refill: wait %v a minute later", wait)
	}
}
