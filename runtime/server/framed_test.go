package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/core/syncmodel"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/psclient"
	"github.com/kelpie/kelpie/runtime/wire"
	"github.com/kelpie/kelpie/scheduler/pki"
)

// TestFramedDataPlane: pushes and pulls over the framed transport (TCP and
// the Unix socket) with a data-plane secret; a wrong secret is refused at
// connect time and a bad frame closes its connection with a logged reason.
func TestFramedDataPlane(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	logs := make(chan string, 16)
	s.cfg.Logf = func(format string, a ...any) {
		select {
		case logs <- fmt.Sprintf(format, a...):
		default:
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	secret := framing.SharedSecret("job secret")
	ep, err := s.Listen(lis, Framed{Credentials: secret, Unix: UnixPath("", "test")})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	addr := lis.Addr().String()
	ctx := context.Background()

	for i, tr := range []string{psclient.TransportTCP, psclient.TransportUnix} {
		c, err := psclient.DialWith(ctx, addr, psclient.Options{Transport: tr, Credentials: secret})
		if err != nil {
			t.Fatalf("dial over %s: %v", tr, err)
		}
		if c.Transport != tr {
			t.Errorf("connection runs over %s; want %s", c.Transport, tr)
		}
		// Block 0 starts at 1s; SGD at rate 1 subtracts each push.
		if _, err := c.Do(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: int64(i + 1), Data: floats(1, 1, 1, 1)}); err != nil {
			t.Fatalf("push over %s: %v", tr, err)
		}
		dst := make([]float32, 4)
		call, err := c.StartInto(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Blocks: []uint32{0}, Progress: int64(i + 1)}, [][]byte{wire.AsBytes(dst)})
		if err != nil {
			t.Fatal(err)
		}
		_, inPlace, err := call.Wait(nil)
		if err != nil || !inPlace {
			t.Fatalf("pull over %s: in place %v, %v", tr, inPlace, err)
		}
		if want := float32(-i); dst[0] != want || dst[3] != want {
			t.Errorf("pull over %s = %v; want all %v", tr, dst, want)
		}
		// A bad request is answered with its status, and the connection stays.
		if _, err := c.Do(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0}, Data: floats(1)}); err == nil || !strings.Contains(err.Error(), "push carries 4 bytes") {
			t.Errorf("push of the wrong size over %s: %v", tr, err)
		}
		c.Close()
	}

	if _, err := psclient.DialWith(ctx, addr, psclient.Options{Credentials: framing.SharedSecret("guess")}); err == nil {
		t.Error("a client with the wrong secret was accepted")
	}
	waitLog(t, logs, "refused")

	// A frame of an unknown version after a good handshake.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := framing.ClientHandshake(framing.NewConn(nc), secret, nil); err != nil {
		t.Fatal(err)
	}
	bad := make([]byte, framing.HeaderSize)
	framing.PutHeader(bad, framing.Header{Kind: framing.KindRequest, ID: 1})
	bad[4] = 9
	if _, err := nc.Write(bad); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(time.Minute)) // a bound on a hang, not a timing assertion
	if n, err := nc.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after a bad frame the connection gave %d bytes, %v; want it closed", n, err)
	}
	waitLog(t, logs, "version 9")
}

func waitLog(t *testing.T, logs <-chan string, want string) {
	t.Helper()
	for {
		select {
		case l := <-logs:
			if strings.Contains(l, want) {
				return
			}
		case <-time.After(time.Minute):
			t.Fatalf("no log line with %q", want)
		}
	}
}

// TestFramedEncrypted: with data_plane_encryption on, a worker of the job
// (its node certificate) reaches the server over TLS and trains; a client
// without a certificate, a server's certificate presented as a worker and a
// worker of another job are refused; the Unix socket stays plain.
func TestFramedEncrypted(t *testing.T) {
	ca, err := pki.New("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	creds := func(job, node string) *identity.Credentials {
		c, err := ca.Credentials(identity.Node(job, node), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	secret := framing.SharedSecret("job secret")
	ep, err := s.Listen(lis, Framed{Credentials: secret, Unix: UnixPath("", "test"), TLS: creds("a", "server-0").FramedServerTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	addr := lis.Addr().String()
	ctx := context.Background()

	for _, tc := range []struct {
		name      string
		o         psclient.Options
		ok        bool
		encrypted bool
	}{
		{"worker of the job", psclient.Options{Transport: psclient.TransportTCP, TLS: creds("a", "worker-1").FramedClientTLS()}, true, true},
		{"over the unix socket", psclient.Options{Transport: psclient.TransportUnix, TLS: creds("a", "worker-1").FramedClientTLS()}, true, false},
		{"no certificate", psclient.Options{Transport: psclient.TransportTCP}, false, false},
		{"a server's certificate", psclient.Options{Transport: psclient.TransportTCP, TLS: creds("a", "server-1").FramedClientTLS()}, false, false},
		{"a worker of another job", psclient.Options{Transport: psclient.TransportTCP, TLS: creds("b", "worker-1").FramedClientTLS()}, false, false},
	} {
		tc.o.Credentials = secret
		c, err := psclient.DialWith(ctx, addr, tc.o)
		if !tc.ok {
			if err == nil {
				// TLS 1.3: the server's verdict on the client's certificate
				// arrives with the first read.
				_, err = c.Do(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Blocks: []uint32{0}})
				c.Close()
			}
			if err == nil {
				t.Errorf("%s: accepted", tc.name)
			}
			t.Logf("%s: %v", tc.name, err)
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.Encrypted() != tc.encrypted {
			t.Errorf("%s: encrypted = %v; want %v", tc.name, c.Encrypted(), tc.encrypted)
		}
		if _, err := c.Do(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: 1, Data: floats(1, 1, 1, 1)}); err != nil {
			t.Errorf("%s: push: %v", tc.name, err)
		}
		c.Close()
	}
}

// TestFramedPipeline: many requests in flight on one framed connection
// (the server handles what it has at hand before it writes the answers
// together) are all answered, in the order they were sent: a pull sent
// after k pushes sees exactly those k.
func TestFramedPipeline(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	c, err := psclient.DialWith(context.Background(), listenFramed(t, s), psclient.Options{Transport: psclient.TransportTCP, Credentials: framing.SharedSecret(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const pushes = 200
	grad := floats(1, 1, 1, 1)
	var calls []*psclient.Call
	pulled := map[int][]float32{} // pushes before the pull -> its destination
	for i := 1; i <= pushes; i++ {
		call, err := c.StartV(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{0}, Progress: int64(i)}, [][]byte{grad}, nil)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, call)
		if i%50 == 0 {
			dst := make([]float32, 4)
			call, err := c.StartInto(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Blocks: []uint32{0}, Progress: int64(i)}, [][]byte{wire.AsBytes(dst)})
			if err != nil {
				t.Fatal(err)
			}
			calls = append(calls, call)
			pulled[i] = dst
		}
	}
	for i, call := range calls {
		if _, _, err := call.Wait(nil); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	for k, dst := range pulled {
		if want := float32(1 - k); dst[0] != want || dst[3] != want {
			t.Errorf("pull after %d pushes = %v; want all %v", k, dst, want)
		}
	}
}

// TestFramedDelayedPullKeepsItsBlocks: a framed session reuses a handled
// request for the next one; a pull delayed by the barrier must keep the
// blocks it asked for even when the next request on its connection names
// others.
func TestFramedDelayedPullKeepsItsBlocks(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.BSP})
	addr := listenFramed(t, s)
	dial := func() *psclient.Conn {
		c, err := psclient.DialWith(context.Background(), addr, psclient.Options{Transport: psclient.TransportTCP, Credentials: framing.SharedSecret(nil)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	w0, w1 := dial(), dial()
	grad := floats(1, 1, 1, 1)
	if _, err := w0.Do(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 0, Blocks: []uint32{0}, Progress: 0, Data: grad}); err != nil {
		t.Fatal(err)
	}
	dst := make([]float32, 4)
	pull, err := w0.StartInto(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Worker: 0, Blocks: []uint32{0}, Progress: 0}, [][]byte{wire.AsBytes(dst)})
	if err != nil {
		t.Fatal(err)
	}
	// Worker 1 has not pushed: the pull waits. The next request on the
	// same connection names a block this server does not hold.
	if _, err := w0.Do(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Worker: 0, Blocks: []uint32{7}, Progress: -1}); err == nil {
		t.Fatal("a pull of a block the server does not hold succeeded")
	}
	if _, err := w1.Do(&pspb.PSRequest{Op: pspb.Op_OP_PUSH, Worker: 1, Blocks: []uint32{0}, Progress: 0, Data: grad}); err != nil {
		t.Fatal(err)
	}
	resp, inPlace, err := pull.Wait(nil)
	if err != nil || !inPlace || !resp.Delayed {
		t.Fatalf("the delayed pull: %+v, in place %v, %v; want delayed, in place, nil", resp, inPlace, err)
	}
	// Block 0 started at 1s and took two pushes of 1s at rate 1.
	if dst[0] != -1 || dst[3] != -1 {
		t.Errorf("the delayed pull read %v; want all -1", dst)
	}
}

// TestAttackRow7: a stranger makes data-plane handshakes without the job's
// secret, again and again. Each is refused, and the node log gets a few
// lines, not one per refusal: the first refusal from the host with its
// reason, then (after the window) one line counting the others.
func TestAttackRow7(t *testing.T) {
	s := newServer(t, syncmodel.Config{Model: syncmodel.ASP})
	var mu sync.Mutex
	var lines []string
	s.cfg.Logf = func(format string, a ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var clock sync.Mutex
	s.refusals.Now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := s.Listen(lis, Framed{Credentials: framing.SharedSecret("job secret")})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	n := 300
	if os.Getenv("KELPIE_ATTACK_FULL") == "1" {
		n = 3000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range n {
		if c, err := psclient.DialWith(ctx, lis.Addr().String(), psclient.Options{Transport: psclient.TransportTCP,
			Credentials: framing.SharedSecret(fmt.Sprintf("guess-%d", i))}); err == nil {
			c.Close()
			t.Fatal("a connection without the secret was accepted")
		}
	}
	// The window ends; the next refusal brings the count of the others.
	clock.Lock()
	now = now.Add(time.Minute)
	clock.Unlock()
	if _, err := psclient.DialWith(ctx, lis.Addr().String(), psclient.Options{Transport: psclient.TransportTCP,
		Credentials: framing.SharedSecret("one more")}); err == nil {
		t.Fatal("a connection without the secret was accepted")
	}
	// The server logs after answering: wait (bounded) for the last line.
	want := fmt.Sprintf("%d refusals from 127.0.0.1", n-1)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got := append([]string(nil), lines...)
		mu.Unlock()
		if len(got) >= 3 || time.Now().After(deadline) {
			t.Logf("%d refusals logged in %d lines: %q", n+1, len(got), got)
			if len(got) != 3 || !strings.Contains(got[0], "refused") || !strings.Contains(got[1], want) || !strings.Contains(got[2], "refused") {
				t.Errorf("%d refusals logged as %d lines, want 3 (the first, %q, the next window's first)", n+1, len(got), want)
			}
			break
		}
	}
}
