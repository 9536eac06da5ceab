package framing

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestRefusalLog: refusals are logged once per host and window, then
// counted in one line when the window is over (also for a host that went
// quiet, at the next refusal from anyone), and at most 20 lines at once
// over all hosts, the next saying how many were left out.
func TestRefusalLog(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var lines []string
	l := &RefusalLog{Logf: func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }, Now: func() time.Time { return now }}
	addr := func(host string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(host), Port: 4000} }
	bad := errors.New("no secret")
	for range 100 {
		l.Refused(addr("10.0.0.1"), bad)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "10.0.0.1:4000: refused: no secret") {
		t.Fatalf("100 refusals from one host: %q; want one line", lines)
	}
	now = now.Add(time.Minute)
	l.Refused(addr("10.0.0.2"), bad) // another host: the quiet one's count comes out
	if len(lines) != 3 || !strings.Contains(lines[1], "99 refusals from 10.0.0.1 in the last 1m0s") || !strings.Contains(lines[2], "10.0.0.2") {
		t.Fatalf("after the window: %q", lines[1:])
	}
	// 100 hosts at once: the overall limit (bursts of 20) holds.
	lines = nil
	now = now.Add(time.Minute)
	for i := range 100 {
		l.Refused(addr(fmt.Sprintf("10.1.0.%d", i)), bad)
	}
	if len(lines) > 20 {
		t.Errorf("100 hosts' first refusals at once: %d lines, want at most 20", len(lines))
	}
	now = now.Add(time.Second)
	lines = nil
	l.Refused(addr("10.2.0.1"), bad)
	if len(lines) != 1 || !strings.Contains(lines[0], "refusal lines left out: rate limit") {
		t.Errorf("the next line: %q; want it to say how many were left out", lines)
	}
}
