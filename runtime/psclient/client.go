// Package psclient is the worker's side of the parameter-server data plane:
// one long-lived connection per server, with many requests in flight and
// responses matched to requests by id (delayed pulls come back out of
// order). The connection is kelpie's framed transport (tensorwire: TCP, or
// the server's Unix socket on the same host) by default, or a gRPC
// Exchange stream (Options.Transport).
package psclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/wire"
)

// MaxMessage bounds one gRPC message on the data plane (a block is 4 MiB by
// default, a pull may carry several).
const MaxMessage = 1 << 30

// DialOptions are the gRPC options of every data-plane connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		// mTLS with this process's node certificate ($KELPIE_CERT), to a
		// server of its own job; plaintext without one.
		identity.PeerDialOption(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessage), grpc.MaxCallSendMsgSize(MaxMessage)),
		grpc.WithWriteBufferSize(256 << 10),
		grpc.WithReadBufferSize(256 << 10),
		grpc.WithInitialWindowSize(16 << 20),
		grpc.WithInitialConnWindowSize(32 << 20),
		experimental.WithBufferPool(wire.BufferPool()),
	}
}

// ServerOptions are the gRPC options of a parameter server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessage),
		grpc.MaxSendMsgSize(MaxMessage),
		grpc.WriteBufferSize(256 << 10),
		grpc.ReadBufferSize(256 << 10),
		grpc.InitialWindowSize(16 << 20),
		grpc.InitialConnWindowSize(32 << 20),
		experimental.BufferPool(wire.BufferPool()),
	}
}

// Conn is a stream to one server. Do may be called from many goroutines.
type Conn struct {
	Addr string
	// Transport is what the connection runs over: "tcp" or "unix" (framed)
	// or "grpc".
	Transport string
	fw        *framed // the framed connection (nil: gRPC)

	cc     *grpc.ClientConn
	stream kelpiepb.ParameterServer_ExchangeClient
	cancel context.CancelFunc

	sendMu sync.Mutex

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan *kelpiepb.PSResponse
	err     error // set once the stream has failed
	done    chan struct{}
}

// Dial opens the connection and its stream over gRPC.
func Dial(addr string) (*Conn, error) { return DialContext(context.Background(), addr) }

// DialContext opens a gRPC connection and a stream that lives until ctx
// ends or Close: cancelling ctx fails every request in flight and unblocks a
// Send stuck on flow control (Close waits for Send to return, so it cannot).
func DialContext(ctx context.Context, addr string) (*Conn, error) {
	return DialWith(ctx, addr, Options{Transport: TransportGRPC})
}

// DialWith opens a connection over the transport o names. Cancelling ctx
// fails every request in flight.
func DialWith(ctx context.Context, addr string, o Options) (*Conn, error) {
	switch o.Transport {
	case "", TransportTCP, TransportUnix:
		tc, kind, err := dialFramed(ctx, addr, o)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(ctx)
		f := &framed{tc: tc, waiting: map[uint64]*waiter{}, wake: make(chan struct{}, 1), closing: make(chan struct{})}
		c := &Conn{Addr: addr, Transport: kind, fw: f, cancel: cancel, done: make(chan struct{})}
		go c.framedReader()
		go func() {
			select {
			case <-ctx.Done():
				c.framedEnd(fmt.Errorf("psclient: connection to %s: %w", addr, context.Cause(ctx)))
			case <-c.done:
			}
		}()
		return c, nil
	case TransportGRPC:
	default:
		return nil, fmt.Errorf("psclient: transport %q: want tcp, unix or grpc", o.Transport)
	}
	cc, err := grpc.NewClient(addr, DialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("psclient: dial %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := kelpiepb.NewParameterServerClient(cc).Exchange(ctx, wire.CallOption())
	if err != nil {
		cancel()
		cc.Close()
		return nil, fmt.Errorf("psclient: open stream to %s: %v", addr, err)
	}
	c := &Conn{Addr: addr, Transport: TransportGRPC, cc: cc, stream: stream, cancel: cancel,
		waiting: map[uint64]chan *kelpiepb.PSResponse{}, done: make(chan struct{})}
	go c.recvLoop()
	return c, nil
}

// Client is the plain gRPC client of the same server, for unary calls.
func (c *Conn) Client() kelpiepb.ParameterServerClient {
	return kelpiepb.NewParameterServerClient(c.cc)
}

func (c *Conn) recvLoop() {
	defer close(c.done)
	for {
		r, err := c.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("psclient: server %s closed the stream", c.Addr)
			} else {
				err = fmt.Errorf("psclient: stream to %s: %v", c.Addr, err)
			}
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch, ok := c.waiting[r.Id]
		delete(c.waiting, r.Id)
		c.mu.Unlock()
		if ok {
			ch <- r
		}
	}
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	for id, ch := range c.waiting {
		close(ch)
		delete(c.waiting, id)
	}
	if c.fw != nil {
		for id, w := range c.fw.waiting {
			close(w.ch)
			delete(c.fw.waiting, id)
		}
	}
}

// Start sends a request and returns a channel for its response; the channel
// is closed without a value if the stream fails first. It sets req.Id.
func (c *Conn) Start(req *kelpiepb.PSRequest) (<-chan *kelpiepb.PSResponse, error) {
	if c.fw != nil {
		w, err := c.framedStart(req, nil, nil)
		if err != nil {
			return nil, err
		}
		return w.ch, nil
	}
	ch := make(chan *kelpiepb.PSResponse, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	req.Id = c.nextID
	c.waiting[req.Id] = ch
	c.mu.Unlock()
	c.sendMu.Lock()
	err := c.stream.Send(req)
	c.sendMu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(c.waiting, req.Id)
		c.mu.Unlock()
		return nil, fmt.Errorf("psclient: send to %s: %v", c.Addr, err)
	}
	return ch, nil
}

// Wait turns a response channel into the response or an error.
func (c *Conn) Wait(ch <-chan *kelpiepb.PSResponse) (*kelpiepb.PSResponse, error) {
	return c.WaitOr(ch, nil) // a nil abort channel never fires
}

// WaitOr is Wait that gives up when abort is closed (another server of the
// same exchange failed: the iteration cannot complete).
func (c *Conn) WaitOr(ch <-chan *kelpiepb.PSResponse, abort <-chan struct{}) (*kelpiepb.PSResponse, error) {
	var r *kelpiepb.PSResponse
	var ok bool
	switch {
	case c.fw != nil && abort == nil:
		r, ok = c.framedAwait(ch)
	default:
		if c.fw != nil {
			c.framedWaitReader()
		}
		select {
		case r, ok = <-ch:
		case <-abort:
			return nil, fmt.Errorf("psclient: abandoned: another server of the exchange failed")
		}
	}
	if !ok {
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	if r.Error != "" {
		return nil, status.Error(codes.Code(r.Code), r.Error)
	}
	return r, nil
}

// Call is a request in flight started by StartInto or StartV. Its Wait is
// called once; the Call is not to be used after Wait returns (a framed
// connection's calls are reused).
type Call struct {
	c   *Conn
	ch  <-chan *kelpiepb.PSResponse
	w   *waiter // framed
	dst [][]byte
}

// StartInto is Start for a pull whose values go straight into dst: the
// slices, in order, receive the response's payload when their lengths add
// up to it (the framed transport reads it from the socket into them; gRPC
// copies it). Wait reports whether that happened.
func (c *Conn) StartInto(req *kelpiepb.PSRequest, dst [][]byte) (*Call, error) {
	return c.StartV(req, nil, dst)
}

// Encrypted says whether the connection's tensors travel in TLS (a framed
// connection to a server that encrypts; gRPC connections have TLS whenever
// the node has a certificate, and report false here).
func (c *Conn) Encrypted() bool { return c.fw != nil && c.fw.tc.Encrypted() }

// Framed says whether the connection is the framed transport (tcp or
// unix), which writes a payload in pieces without joining them.
func (c *Conn) Framed() bool { return c.fw != nil }

// StartV is StartInto for a request whose payload is in pieces (req.Data
// is then ignored): the framed transport writes them from where they lie
// with one writev; gRPC sends them joined into one message (a copy, which a
// caller that reuses its own buffer may rather make itself). The pieces
// must stay unchanged until StartV returns.
func (c *Conn) StartV(req *kelpiepb.PSRequest, payload, dst [][]byte) (*Call, error) {
	if c.fw != nil {
		w, err := c.framedStart(req, payload, dst)
		if err != nil {
			return nil, err
		}
		return &w.call, nil
	}
	if payload != nil {
		n := 0
		for _, p := range payload {
			n += len(p)
		}
		req.Data = make([]byte, 0, n)
		for _, p := range payload {
			req.Data = append(req.Data, p...)
		}
	}
	ch, err := c.Start(req)
	if err != nil {
		return nil, err
	}
	return &Call{c: c, ch: ch, dst: dst}, nil
}

// Wait waits for the response, or until abort is closed (nil: never). When
// inPlace is true the payload is in dst and resp.Data is nil.
func (call *Call) Wait(abort <-chan struct{}) (resp *kelpiepb.PSResponse, inPlace bool, err error) {
	c := call.c
	if call.w != nil && abort == nil {
		r, ok := c.framedAwait(call.ch)
		return call.finish(r, ok)
	}
	if call.w != nil {
		c.framedWaitReader()
		select {
		case <-abort:
			// Take the request out of the table so that a late answer is
			// discarded instead of written into dst. If it is gone, its
			// answer is being read: wait for it (or for the connection to
			// fail), so that nothing writes into dst after we return.
			c.mu.Lock()
			waiting := c.fw.waiting[call.w.id] == call.w
			if waiting {
				delete(c.fw.waiting, call.w.id)
			}
			c.mu.Unlock()
			if waiting {
				return nil, false, fmt.Errorf("psclient: abandoned: another server of the exchange failed")
			}
			abort = nil
		case r, ok := <-call.ch:
			return call.finish(r, ok)
		}
	}
	select {
	case r, ok := <-call.ch:
		return call.finish(r, ok)
	case <-abort:
		return nil, false, fmt.Errorf("psclient: abandoned: another server of the exchange failed")
	}
}

func (call *Call) finish(r *kelpiepb.PSResponse, ok bool) (*kelpiepb.PSResponse, bool, error) {
	c := call.c
	if !ok {
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return nil, false, err
	}
	inPlace := false
	if call.w != nil {
		inPlace = call.w.inPlace
		call.w.recycle() // the call is done: its waiter serves another
	}
	if r.Error != "" {
		return nil, false, status.Error(codes.Code(r.Code), r.Error)
	}
	if call.w != nil {
		return r, inPlace, nil
	}
	if call.dst != nil && total(call.dst) == len(r.Data) && len(r.Data) > 0 {
		off := 0
		for _, d := range call.dst {
			off += copy(d, r.Data[off:])
		}
		wire.Recycle(r.Data)
		r.Data = nil
		return r, true, nil
	}
	return r, false, nil
}

// Do sends a request and waits for its response.
func (c *Conn) Do(req *kelpiepb.PSRequest) (*kelpiepb.PSResponse, error) {
	call, err := c.StartV(req, nil, nil)
	if err != nil {
		return nil, err
	}
	r, _, err := call.Wait(nil)
	return r, err
}

// Close ends the stream and the connection.
func (c *Conn) Close() error {
	if c.fw != nil {
		err := c.framedEnd(fmt.Errorf("psclient: connection to %s closed", c.Addr))
		c.cancel()
		<-c.done
		return err
	}
	c.sendMu.Lock()
	_ = c.stream.CloseSend()
	c.sendMu.Unlock()
	c.cancel()
	<-c.done
	return c.cc.Close()
}
