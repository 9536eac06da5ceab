package cli

import (
	"net"
	"strings"
	"testing"
)

// TestConnectFailsFast: a command line aimed at no scheduler, or with a
// token the scheduler refuses, says so at once in words — not after
// --timeout (an hour here: a command that waited for it would not finish)
// with "context deadline exceeded (%!s(<nil>))".
func TestConnectFailsFast(t *testing.T) {
	d, _ := testScheduler(t)
	// A port nobody listens on: bind one, then close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"list, nobody there", []string{"job", "list", "--scheduler", closed}, "cannot reach the scheduler at " + closed + ": connection refused"},
		{"kill, nobody there", []string{"job", "kill", "x", "--scheduler", closed}, "cannot reach the scheduler at " + closed + ": connection refused"},
		{"list, wrong token", []string{"job", "list", "--scheduler", d.HTTPAddr(), "--token", "wrong"}, "the scheduler at " + d.HTTPAddr() + " refused the token"},
		{"approve, wrong token", []string{"job", "approve", "j", "a-1", "--scheduler", d.HTTPAddr(), "--token", "wrong"}, "refused the token"},
	} {
		code, stderr := runCaptured(t, append(tt.args, "--timeout", "1h")...)
		if code == 0 || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "%!") {
			t.Errorf("%s: exit %d, stderr %q; want a failure saying %q", tt.name, code, stderr, tt.want)
		}
	}
}
