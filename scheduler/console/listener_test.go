package console

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestListenerEvictsOldestIdle: beyond the cap a new connection closes the
// oldest idle keep-alive connection, a connection inside an authenticated
// request is never closed to make room, and the count stays at the cap.
func TestListenerEvictsOldestIdle(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(raw, ConnLimits{Max: 4, PerPrefix: 4})
	release := make(chan struct{})
	inAuth := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/open", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/auth", func(w http.ResponseWriter, r *http.Request) {
		defer Authenticated(r)()
		inAuth <- struct{}{}
		<-release
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go l.Serve(hs)
	defer hs.Close()
	defer close(release)

	get := func(c net.Conn, path string) error {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// One connection inside an authenticated request, held.
	authed := dial()
	fmt.Fprintf(authed, "GET /auth HTTP/1.1\r\nHost: x\r\n\r\n")
	<-inAuth
	// Four idle keep-alive connections fill the cap.
	var idle []net.Conn
	idleNow := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.idle.Len()
	}
	for i := range 4 {
		c := dial()
		if err := get(c, "/open"); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		// The server marks it idle after the response is out.
		waitUntil(t, "the connection idle", func() bool { return idleNow() == i+1 })
	}
	// Two more: each closes the oldest idle one.
	for range 2 {
		if err := get(dial(), "/open"); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range idle {
		wait := 5 * time.Second // a closed one reads EOF at once
		if i >= 2 {
			wait = 200 * time.Millisecond
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		_, err := c.Read(make([]byte, 1))
		closed := err == io.EOF || (err != nil && !isTimeout(err))
		if want := i < 2; closed != want {
			t.Errorf("idle connection %d: closed %v (%v); want %v", i, closed, err, want)
		}
		if i >= 2 {
			break // the others are open: the read only timed out
		}
	}
	if n := l.Evicted(); n != 2 {
		t.Errorf("%d connections evicted; want 2", n)
	}
	if n := l.Unauthenticated(); n > 4 {
		t.Errorf("%d unauthenticated connections; want at most 4", n)
	}
	// The authenticated request was not touched.
	release <- struct{}{}
	resp, err := http.ReadResponse(bufio.NewReader(authed), nil)
	if err != nil {
		t.Fatalf("the authenticated request: %v", err)
	}
	resp.Body.Close()
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
