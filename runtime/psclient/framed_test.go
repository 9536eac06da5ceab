package psclient

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
)

// scripted is a framed peer on 127.0.0.1 whose answers a test decides: it
// hands each request it reads to the test (on reqs) and writes what the
// test sends on answer, in the order sent.
type scripted struct {
	lis    net.Listener
	reqs   chan *pspb.PSRequest
	answer chan *pspb.PSResponse
	conn   chan net.Conn // the accepted connection, for the test to cut
}

func newScripted(t *testing.T) *scripted {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{lis: lis, reqs: make(chan *pspb.PSRequest, 64),
		answer: make(chan *pspb.PSResponse, 64), conn: make(chan net.Conn, 1)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		close(s.answer)
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := lis.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		tc := framing.NewConn(nc)
		if err := framing.ServerHandshake(tc, framing.SharedSecret(nil), nil, framing.Hello{HostID: "elsewhere"}); err != nil {
			t.Errorf("handshake: %v", err)
			return
		}
		s.conn <- nc
		wg.Add(1)
		go func() { // the writer: answers as the test gives them
			defer wg.Done()
			for r := range s.answer {
				if tc.WriteFrame(framing.KindResponse, r.Id, framing.AppendResponse(nil, r), r.Data) != nil {
					return
				}
			}
		}()
		for {
			h, meta, err := tc.ReadHeader()
			if err != nil {
				return
			}
			req := &pspb.PSRequest{Id: h.ID}
			if err := framing.DecodeRequest(meta, req); err != nil {
				t.Errorf("decode: %v", err)
				return
			}
			if err := tc.Discard(); err != nil {
				return
			}
			s.reqs <- req
		}
	}()
	return s
}

func (s *scripted) dial(t *testing.T) *Conn {
	t.Helper()
	c, err := DialWith(context.Background(), s.lis.Addr().String(), Options{Transport: TransportTCP, Credentials: framing.SharedSecret(nil)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// next is the next request the peer read.
func (s *scripted) next(t *testing.T) *pspb.PSRequest {
	t.Helper()
	return within(t, s.reqs, "no request reached the peer")
}

// within is the next value on ch, or the test fails saying what did not
// happen (a bound on a hang, not a timing assertion).
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(what)
		var zero T
		return zero
	}
}

// TestDirectReadOutOfOrder: callers waiting without an abort read the
// connection themselves, one at a time; answers that come back in reverse
// order each reach their own caller, whoever read them.
func TestDirectReadOutOfOrder(t *testing.T) {
	s := newScripted(t)
	c := s.dial(t)
	const n = 8
	chans := make([]<-chan *pspb.PSResponse, n)
	for i := range n {
		ch, err := c.Start(&pspb.PSRequest{Op: pspb.Op_OP_PULL, Progress: int64(i)})
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	byID := map[uint64]int64{}
	for range n {
		r := s.next(t)
		byID[r.Id] = r.Progress
	}
	var wg sync.WaitGroup
	got := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Wait(chans[i])
			if err == nil {
				got[i] = r.Version
			}
			errs[i] = err
		}()
	}
	for id := uint64(n); id >= 1; id-- {
		s.answer <- &pspb.PSResponse{Id: id, Version: 100 + byID[id]}
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != 100+int64(i) {
			t.Errorf("request %d: version %d, %v; want %d, nil", i, got[i], errs[i], 100+i)
		}
	}
}

// TestAbortWhileOthersRead: a waiter with an abort channel never reads
// the connection itself, so its abort returns at once even while its
// request is held by the server; the late answer is skipped and the next
// caller gets its own.
func TestAbortWhileOthersRead(t *testing.T) {
	s := newScripted(t)
	c := s.dial(t)
	held, err := c.StartInto(&pspb.PSRequest{Op: pspb.Op_OP_PULL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	heldReq := s.next(t)
	abort := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, _, err := held.Wait(abort)
		done <- err
	}()
	close(abort)
	if err := within(t, done, "the aborted wait did not return"); err == nil || !strings.Contains(err.Error(), "abandoned") {
		t.Fatalf("aborted wait: %v; want abandoned", err)
	}
	ch, err := c.Start(&pspb.PSRequest{Op: pspb.Op_OP_PUSH})
	if err != nil {
		t.Fatal(err)
	}
	mine := s.next(t)
	s.answer <- &pspb.PSResponse{Id: heldReq.Id, Version: 1, Data: make([]byte, 64)} // late: nobody wants it
	s.answer <- &pspb.PSResponse{Id: mine.Id, Version: 2}
	r, err := c.Wait(ch)
	if err != nil || r.Version != 2 {
		t.Fatalf("push after the abort: %v, %v; want version 2", r, err)
	}
}

// TestReaderHandOver: a caller that reads for itself and gets its answer
// while others are still in flight hands reading over: a waiter with an
// abort channel (which never reads itself) still gets its answer.
func TestReaderHandOver(t *testing.T) {
	s := newScripted(t)
	c := s.dial(t)
	first, err := c.Start(&pspb.PSRequest{Op: pspb.Op_OP_PUSH})
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.StartInto(&pspb.PSRequest{Op: pspb.Op_OP_PULL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.next(t), s.next(t)
	got := make(chan int64, 1)
	go func() {
		r, _, err := second.Wait(make(chan struct{})) // may abort: never reads
		if err != nil {
			got <- -1
			return
		}
		got <- r.Version
	}()
	s.answer <- &pspb.PSResponse{Id: a.Id, Version: 1}
	if r, err := c.Wait(first); err != nil || r.Version != 1 {
		t.Fatalf("first: %v, %v", r, err)
	}
	s.answer <- &pspb.PSResponse{Id: b.Id, Version: 2}
	if v := within(t, got, "nobody read the second answer"); v != 2 {
		t.Fatalf("second: version %d; want 2", v)
	}
}

// TestDirectReaderSeesFailure: the connection cut while a caller reads
// for itself fails that caller and every other waiter, and Close returns.
func TestDirectReaderSeesFailure(t *testing.T) {
	s := newScripted(t)
	c := s.dial(t)
	var chans []<-chan *pspb.PSResponse
	for range 3 {
		ch, err := c.Start(&pspb.PSRequest{Op: pspb.Op_OP_PULL})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
		s.next(t)
	}
	errs := make(chan error, len(chans))
	for _, ch := range chans {
		go func() {
			_, err := c.Wait(ch)
			errs <- err
		}()
	}
	nc := <-s.conn
	time.Sleep(20 * time.Millisecond) // let a waiter block in its read
	nc.Close()
	for range chans {
		if err := within(t, errs, "a waiter did not see the connection fail"); err == nil || !strings.Contains(err.Error(), c.Addr) {
			t.Errorf("wait on a cut connection: %v; want an error naming %s", err, c.Addr)
		}
	}
	if _, err := c.Start(&pspb.PSRequest{Op: pspb.Op_OP_PULL}); err == nil {
		t.Error("Start on a failed connection succeeded")
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	within(t, closed, "Close hung")
}

// TestCancelWhileNobodyReads: cancelling the dial's context fails the
// connection even when no goroutine is reading it.
func TestCancelWhileNobodyReads(t *testing.T) {
	s := newScripted(t)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := DialWith(ctx, s.lis.Addr().String(), Options{Transport: TransportTCP, Credentials: framing.SharedSecret(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Start(&pspb.PSRequest{Op: pspb.Op_OP_PULL})
		if err != nil {
			if !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "closed") {
				t.Errorf("Start after cancel: %v", err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection still takes requests after its context ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCloseFailsWaiters: requests in flight when the connection is closed
// fail, also for a waiter that may abort and never reads itself, and also
// when nobody was reading at the time.
func TestCloseFailsWaiters(t *testing.T) {
	s := newScripted(t)
	c := s.dial(t)
	call, err := c.StartInto(&pspb.PSRequest{Op: pspb.Op_OP_PULL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.next(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := call.Wait(make(chan struct{}))
		done <- err
	}()
	if err := within(t, done, "a wait after Close hung"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("wait after Close: %v; want the connection closed", err)
	}
}
