package console

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestOriginRefusedWithReason: a browser page on an origin the scheduler
// does not allow learns why — its WebSocket closes with 1008 and a reason
// naming --allow-origin (a bare 403 reaches a page as 1006 and nothing
// else) — and the scheduler logs it once however often the page retries.
// The scheduler's own host and an allowed pattern connect as before.
func TestOriginRefusedWithReason(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	s := New(newFakeBackend(job("a", 1)), testTokens, Options{MaxRateHz: 500, OriginPatterns: []string{"dash.example.com"},
		Logf: func(f string, a ...any) { mu.Lock(); logged = append(logged, fmt.Sprintf(f, a...)); mu.Unlock() }})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	defer s.Close()
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + ConsolePath
	dial := func(origin string) (*websocket.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := http.Header{}
		h.Set("Origin", origin)
		c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h})
		return c, err
	}
	for range 3 {
		c, err := dial("https://evil.example.org")
		if err != nil {
			t.Fatalf("dial from a refused origin: %v; want a connection that closes with a reason", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err = c.Read(ctx)
		cancel()
		var ce websocket.CloseError
		if !asClose(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "--allow-origin https://evil.example.org") {
			t.Errorf("refused origin: read %v; want close 1008 naming --allow-origin", err)
		}
		c.CloseNow()
	}
	mu.Lock()
	n := 0
	for _, l := range logged {
		if strings.Contains(l, `browser origin "https://evil.example.org"`) {
			n++
		}
	}
	mu.Unlock()
	if n != 1 {
		t.Errorf("refused origin logged %d times for 3 tries; want once: %q", n, logged)
	}
	// Not an upgrade: a 403 with the same words.
	req, _ := http.NewRequest("GET", ts.URL+ConsolePath, nil)
	req.Header.Set("Origin", "https://evil.example.org")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "--allow-origin") {
		t.Errorf("plain GET from a refused origin: %d %q; want 403 naming --allow-origin", resp.StatusCode, body)
	}
	for _, ok := range []string{"https://dash.example.com", "http://" + strings.TrimPrefix(ts.URL, "http://")} {
		c, err := dial(ok)
		if err != nil {
			t.Errorf("origin %s: %v; want it allowed", ok, err)
			continue
		}
		c.CloseNow()
	}
}

func asClose(err error, ce *websocket.CloseError) bool { return err != nil && errors.As(err, ce) }
