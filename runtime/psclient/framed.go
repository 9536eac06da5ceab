package psclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
	"github.com/kelpie/kelpie/runtime/wire"
)

// Transports a worker can reach its servers over.
const (
	TransportTCP  = "tcp"  // framed (runtime/framing) over TCP; see Options.PreferUnix
	TransportUnix = "unix" // framed over the server's Unix socket (same host only)
	TransportGRPC = "grpc" // the Exchange stream of the gRPC service
)

// Options choose how a Conn reaches its server.
type Options struct {
	// Transport is TransportTCP (the default), TransportUnix or
	// TransportGRPC.
	Transport string
	// PreferUnix moves a TransportTCP connection to the server's Unix
	// socket when the server is on this host (what jobs do).
	PreferUnix bool
	// Credentials prove a framed connection (nil: the job has no
	// data-plane secret).
	Credentials framing.Credentials
	// TLS, when set, encrypts framed TCP connections (the node's
	// certificate; cluster.data_plane_encryption: on): a server that does
	// not encrypt is refused. Unix socket connections stay plain.
	TLS *tls.Config
}

func (o Options) creds() framing.Credentials {
	if o.Credentials == nil {
		// This process's job secret ($KELPIE_CERT), or none.
		return framing.SharedSecret(identity.ProcessJobSecret())
	}
	return o.Credentials
}

// waiter is one request in flight on a framed connection. Waiters are
// pooled (with their channel and the Call handed to the caller): one whose
// Call has received its response goes back to the pool when Call.Wait
// returns; one that was abandoned, or whose connection failed (its channel
// closed), is left to the garbage collector.
type waiter struct {
	ch chan *pspb.PSResponse
	id uint64
	// dst are the slices the response payload is read into when their
	// lengths add up to it (the worker's parameters); nil: a pooled buffer.
	dst     [][]byte
	inPlace bool // the payload was read into dst
	call    Call // what StartV returns: this waiter's call
}

var waiters = sync.Pool{New: func() any {
	w := &waiter{ch: make(chan *pspb.PSResponse, 1)}
	w.call = Call{ch: w.ch, w: w}
	return w
}}

// recycle puts a waiter whose response has been taken back in the pool.
func (w *waiter) recycle() {
	w.dst, w.inPlace, w.call.c = nil, false, nil
	waiters.Put(w)
}

// framed is the framed transport: one runtime/framing connection, whose
// responses the caller waiting for one reads itself when nobody else does.
type framed struct {
	tc      *framing.Conn
	sendMu  sync.Mutex
	waiting map[uint64]*waiter // under Conn.mu
	readBy  int                // who holds the read token (readerNone...), under Conn.mu

	wake      chan struct{} // gives the reader goroutine the token
	closing   chan struct{} // closed by shutdown: the reader goroutine stops
	closeOnce sync.Once
	closeErr  error
}

// dialFramedConn opens a Conn over a framed connection (dialFramed).
// Cancelling ctx fails every request in flight.
func dialFramedConn(ctx context.Context, addr string, o Options) (*Conn, error) {
	tc, kind, err := dialFramed(ctx, addr, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	f := &framed{tc: tc, waiting: map[uint64]*waiter{}, wake: make(chan struct{}, 1), closing: make(chan struct{})}
	c := &Conn{Addr: addr, Transport: kind, t: f, cancel: cancel, done: make(chan struct{})}
	go f.reader(c)
	go func() {
		select {
		case <-ctx.Done():
			f.end(c, fmt.Errorf("psclient: connection to %s: %w", addr, context.Cause(ctx)))
		case <-c.done:
		}
	}()
	return c, nil
}

// dialFramed opens a framed connection: over TCP, moved to the server's
// Unix socket when it is on this host (always, for TransportUnix).
func dialFramed(ctx context.Context, addr string, o Options) (*framing.Conn, string, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("psclient: dial %s: %w", addr, err)
	}
	framing.Tune(nc)
	tc := framing.NewConn(nc)
	hello, err := framing.ClientHandshake(tc, o.creds(), o.TLS)
	if err != nil {
		tc.Close()
		return nil, "", fmt.Errorf("psclient: %s: %w", addr, err)
	}
	local := hello.Unix != "" && hello.HostID == framing.HostID()
	if !local || o.Transport != TransportUnix && !o.PreferUnix {
		if o.Transport == TransportUnix {
			tc.Close()
			return nil, "", fmt.Errorf("psclient: %s has no Unix socket on this host (host %q, socket %q)", addr, hello.HostID, hello.Unix)
		}
		return tc, "tcp", nil
	}
	uc, err := d.DialContext(ctx, "unix", hello.Unix)
	if err != nil {
		if o.Transport == TransportUnix {
			tc.Close()
			return nil, "", fmt.Errorf("psclient: %s: unix socket %s: %w", addr, hello.Unix, err)
		}
		return tc, "tcp", nil // not visible here (another mount namespace): stay on TCP
	}
	framing.Tune(uc)
	ut := framing.NewConn(uc)
	if _, err := framing.ClientHandshake(ut, o.creds(), o.TLS); err != nil {
		ut.Close()
		tc.Close()
		return nil, "", fmt.Errorf("psclient: %s: unix socket %s: %w", addr, hello.Unix, err)
	}
	tc.Close()
	return ut, "unix", nil
}

// Who reads a framed connection's responses. Reading is a token: at most
// one goroutine holds it. A caller waiting for its own response without an
// abort channel takes it when it is free and reads until its response has
// come (delivering any others it meets to their waiters): the answer to a
// lone request goes from the socket to the goroutine that asked, without a
// hand-off to another goroutine. When that caller is done and other
// requests are still in flight, or when a waiter that may abort needs a
// reader (it must not be stuck in a read when its abort fires), the token
// goes to the connection's reader goroutine, which reads until nothing is
// in flight and then gives the token back.
const (
	readerNone       = iota // nobody reads: nothing is in flight, or its waiters have not asked yet
	readerCaller            // a waiting caller reads for itself
	readerBackground        // the reader goroutine reads
)

// reader is the connection's reader goroutine: it reads while it holds the
// token, and sleeps while it does not.
func (f *framed) reader(c *Conn) {
	defer close(c.done)
	for {
		select {
		case <-f.wake:
		case <-f.closing:
			return
		}
		for {
			taken, err := f.recvOne(c)
			if err != nil {
				f.failed(c, err, taken)
				return
			}
			c.mu.Lock()
			if len(f.waiting) == 0 {
				f.readBy = readerNone
				c.mu.Unlock()
				break
			}
			c.mu.Unlock()
			if f.tc.Buffered() == 0 {
				// Nothing more at hand: the next read would most likely
				// find the socket empty. Let the waiter just woken run
				// first, so that this goroutine's read, and its wait for
				// the next response, come after the caller has its answer.
				runtime.Gosched()
			}
		}
	}
}

// failed ends the connection after a read error: every waiter gets the
// error, the reader goroutine stops.
func (f *framed) failed(c *Conn, err error, taken *waiter) {
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("psclient: server %s closed the connection", c.Addr)
	} else {
		err = fmt.Errorf("psclient: connection to %s: %w", c.Addr, err)
	}
	f.end(c, err)
	if taken != nil {
		close(taken.ch) // after fail: its waiter reads the error
	}
}

// end ends the connection: closed, the reader goroutine stopped, and every
// request still in flight failed with err (whether or not anyone was
// reading). It returns the connection's Close error.
func (f *framed) end(c *Conn, err error) error {
	closeErr := f.shutdown()
	c.fail(err)
	return closeErr
}

func (f *framed) failLocked() {
	for id, w := range f.waiting {
		close(w.ch)
		delete(f.waiting, id)
	}
}

func (f *framed) close(c *Conn) error {
	err := f.end(c, fmt.Errorf("psclient: connection to %s closed", c.Addr))
	c.cancel()
	<-c.done
	return err
}

func (f *framed) encrypted() bool { return f.tc.Encrypted() }

// await waits for call's response. Without an abort channel the caller
// reads the connection itself when nobody else does (awaitOwn); with one,
// the reader goroutine reads for it, and a call abandoned before its
// response was taken out of the table is dropped from it, so that a late
// answer is discarded instead of written into its dst.
func (f *framed) await(call *Call, abort <-chan struct{}) (*pspb.PSResponse, bool, error) {
	c := call.c
	if abort == nil {
		r, ok := f.awaitOwn(c, call.ch)
		return r, ok, nil
	}
	f.waitReader(c)
	select {
	case r, ok := <-call.ch:
		return r, ok, nil
	case <-abort:
	}
	if call.w == nil {
		return nil, false, errAbandoned
	}
	// If the request is gone from the table, its answer is being read:
	// wait for it (or for the connection to fail), so that nothing writes
	// into dst after we return.
	c.mu.Lock()
	waiting := f.waiting[call.w.id] == call.w
	if waiting {
		delete(f.waiting, call.w.id)
	}
	c.mu.Unlock()
	if waiting {
		return nil, false, errAbandoned
	}
	r, ok := <-call.ch
	return r, ok, nil
}

// land gives the call's pooled waiter back (the call is done: it serves
// another) and says whether the payload was read into dst.
func (f *framed) land(call *Call, _ *pspb.PSResponse) bool {
	if call.w == nil {
		return false
	}
	inPlace := call.w.inPlace
	call.w.recycle()
	return inPlace
}

// shutdown closes the connection and stops the reader goroutine; it
// returns the connection's Close error (the first call's).
func (f *framed) shutdown() error {
	f.closeOnce.Do(func() {
		f.closeErr = f.tc.Close()
		close(f.closing)
	})
	return f.closeErr
}

// needReaderLocked makes sure someone reads: the reader goroutine, if nobody
// does (a waiter that may abort, or a reading caller leaving requests in
// flight behind). Called with c.mu held.
func (f *framed) needReaderLocked() {
	if f.readBy == readerNone {
		f.readBy = readerBackground
		f.wake <- struct{}{} // never blocks: the token is sent once per grant
	}
}

// awaitOwn waits for the response on ch, reading the connection itself
// when nobody else does.
func (f *framed) awaitOwn(c *Conn, ch <-chan *pspb.PSResponse) (*pspb.PSResponse, bool) {
	c.mu.Lock()
	if len(ch) > 0 || c.err != nil || f.readBy != readerNone {
		c.mu.Unlock()
		r, ok := <-ch
		return r, ok
	}
	f.readBy = readerCaller
	c.mu.Unlock()
	for len(ch) == 0 {
		taken, err := f.recvOne(c)
		if err != nil {
			f.failed(c, err, taken)
			break
		}
	}
	c.mu.Lock()
	if c.err == nil {
		f.readBy = readerNone
		if len(f.waiting) > 0 {
			f.needReaderLocked()
		}
	}
	c.mu.Unlock()
	r, ok := <-ch
	return r, ok
}

// waitReader is called by a waiter that may abort before waiting on its
// channel: the reader goroutine reads for it.
func (f *framed) waitReader(c *Conn) {
	c.mu.Lock()
	if c.err == nil {
		f.needReaderLocked()
	}
	c.mu.Unlock()
}

// recvOne reads one response; on an error it returns the waiter it had
// taken out of the table, if any.
func (f *framed) recvOne(c *Conn) (*waiter, error) {
	h, meta, err := f.tc.ReadHeader()
	if err != nil {
		return nil, err
	}
	if h.Kind != framing.KindResponse {
		return nil, fmt.Errorf("%w: %v frame where a response belongs", framing.ErrFrame, h.Kind)
	}
	resp := &pspb.PSResponse{Id: h.ID}
	if err := framing.DecodeResponse(meta, resp); err != nil {
		return nil, err
	}
	c.mu.Lock()
	w, ok := f.waiting[h.ID]
	delete(f.waiting, h.ID)
	c.mu.Unlock()
	if !ok {
		// A response nobody waits for (abandoned): skip its payload.
		return nil, f.tc.Discard()
	}
	n := int(h.Payload)
	if n > 0 {
		if total(w.dst) == n {
			if err := f.tc.ReadPayloadInto(w.dst); err != nil {
				return w, err
			}
			resp.Data = nil
			w.inPlace = true
			w.dst = nil
			w.ch <- resp
			return nil, nil
		}
		buf := wire.Buffer(n)
		if err := f.tc.ReadPayload(buf); err != nil {
			wire.Recycle(buf)
			return w, err
		}
		resp.Data = buf
	}
	w.dst = nil
	w.ch <- resp
	return nil, nil
}

func total(dst [][]byte) int {
	if dst == nil {
		return -1
	}
	n := 0
	for _, d := range dst {
		n += len(d)
	}
	return n
}

// start sends req in one frame, its payload from where the pieces lie.
func (f *framed) start(c *Conn, req *pspb.PSRequest, payload, dst [][]byte) (*Call, error) {
	w := waiters.Get().(*waiter)
	w.dst, w.call.c = dst, c
	if err := c.register(req, func(id uint64) { w.id = id; f.waiting[id] = w }); err != nil {
		w.recycle()
		return nil, err
	}
	f.sendMu.Lock()
	meta := framing.AppendRequest(f.tc.MetaBuf(), req)
	var err error
	if payload != nil {
		err = f.tc.WriteFrameV(framing.KindRequest, req.Id, meta, payload)
	} else {
		err = f.tc.WriteFrame(framing.KindRequest, req.Id, meta, req.Data)
	}
	f.sendMu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(f.waiting, req.Id)
		c.mu.Unlock()
		f.tc.Close() // a frame may be half written: the connection is done
		return nil, fmt.Errorf("psclient: send to %s: %w", c.Addr, err)
	}
	return &w.call, nil
}
