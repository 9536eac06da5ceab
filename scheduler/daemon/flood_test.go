package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// TestConsoleFlood: against a scheduler (its own event list and audit log,
// not a stand-in), 1,000 WebSocket connections with wrong tokens in 10 s
// are throttled — nearly all answered 429 before their token is looked at —
// and leave one audit event for the flooding address; a viewer watching
// through the flood keeps every event it had and receives no other.
func TestConsoleFlood(t *testing.T) {
	d, err := Start(Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: t.TempDir(), Tokens: writeTokens(t), NoLaunch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Real events: five jobs admitted.
	for i := range 5 {
		if _, err := d.Manager.Submit(fmt.Sprintf("name: real-%d\nmodel: {kind: softmax}\ndata: {kind: mnist, epochs: 1}\n", i), "test"); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := d.Manager.EventsSince(0, 10000)
	if len(before) < 5 {
		t.Fatalf("%d events before the flood; want the jobs' admissions", len(before))
	}
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	viewer, err := client.Dial(ctx, d.HTTPAddr(), "view-token", client.WithHandler(w.handle),
		client.WithSubscription([]string{"real-0"}, 10, 10))
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	if err := viewer.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	viewerEvents := func() []*consolepb.Event {
		w.mu.Lock()
		defer w.mu.Unlock()
		return append([]*consolepb.Event(nil), w.events...)
	}
	// It holds the events of the job it watches.
	for deadline := time.Now().Add(30 * time.Second); len(viewerEvents()) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the viewer received no event")
		}
	}
	held := viewerEvents()

	// The flood: 1,000 connections at one every 10 ms, 20 at a time.
	url := "ws://" + d.HTTPAddr() + console.ConsolePath
	start := time.Now()
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	tick := time.NewTicker(10 * time.Millisecond)
	for i := range 1000 {
		<-tick.C
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			hdr := http.Header{"Authorization": {fmt.Sprintf("Bearer guess-%d", i)}}
			code := 0
			c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: hdr})
			if resp != nil {
				code = resp.StatusCode
			}
			if err == nil {
				_, _, _ = c.Read(ctx) // the close that refuses it
				c.CloseNow()
			}
			mu.Lock()
			statuses[code]++
			mu.Unlock()
		}()
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(start)

	st := d.Console.Stats()
	t.Logf("1,000 bad logins in %v: statuses %v, refused %d, throttled (token never looked at) %d", elapsed.Round(time.Millisecond),
		statuses, st.Refused, st.Throttled)
	if st.Refused != 1000 {
		t.Errorf("%d of 1,000 bad logins refused", st.Refused)
	}
	if statuses[http.StatusTooManyRequests] < 900 {
		t.Errorf("statuses %v: want nearly all answered 429 (backing off)", statuses)
	}
	// The audit log: one record for the address, however many refusals.
	after, _ := d.Manager.EventsSince(0, 10000)
	var audits []string
	for _, e := range after[len(before):] {
		if e.Kind == "audit" {
			audits = append(audits, e.Message)
		}
	}
	if len(audits) != 1 || !strings.Contains(audits[0], "refused") {
		t.Errorf("the flood left %d audit events, want one: %q", len(audits), audits)
	}
	for i, e := range before {
		if after[i].Message != e.Message {
			t.Fatalf("event %d was %q before the flood, %q after", i, e.Message, after[i].Message)
		}
	}
	// The viewer still holds every event it had, and got at most the one
	// audit event more.
	time.Sleep(500 * time.Millisecond) // deltas in flight
	got := viewerEvents()
	for i, e := range held {
		if i >= len(got) || got[i].Message != e.Message {
			t.Fatalf("the viewer lost its event %d (%q)", i, e.Message)
		}
	}
	if extra := len(got) - len(held); extra > 1 {
		t.Errorf("the viewer received %d events during the flood; want at most the one audit event", extra)
	}
	if s := viewer.Status(); s.State != client.Connected {
		t.Errorf("the viewer is %v after the flood: %v", s.State, s.Err)
	}
}
