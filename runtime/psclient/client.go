// Package psclient is the worker's side of the parameter-server data plane:
// one long-lived connection per server, with many requests in flight and
// responses matched to requests by id (delayed pulls come back out of
// order). The connection is kelpie's framed transport (runtime/framing: TCP, or
// the server's Unix socket on the same host) by default, or a gRPC
// Exchange stream (Options.Transport). Which one is chosen once, when the
// Conn is dialled: a Conn holds one transport (framed.go, grpc.go) and
// never asks which it is.
package psclient

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/pspb"
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
	t         transport
	cancel    context.CancelFunc

	mu     sync.Mutex
	nextID uint64
	err    error // set once the connection has failed
	done   chan struct{}
}

// transport is what a Conn sends its requests over and reads their
// responses from: the framed connection or the gRPC stream. The Conn
// numbers the requests and keeps the first error; the transport keeps its
// requests in flight (under Conn.mu) and moves the bytes.
type transport interface {
	// start registers req (req.Id set, under Conn.mu, unless the Conn has
	// failed) and sends it, its payload in pieces when payload is not nil;
	// the response's payload goes into dst when their lengths add up.
	start(c *Conn, req *pspb.PSRequest, payload, dst [][]byte) (*Call, error)
	// await waits for call's response, or until abort is closed (nil:
	// never; then errAbandoned). ok is false when the connection failed.
	await(call *Call, abort <-chan struct{}) (r *pspb.PSResponse, ok bool, err error)
	// land finishes a call whose response r has come: it says whether the
	// payload is in the call's dst (resp.Data then nil).
	land(call *Call, r *pspb.PSResponse) (inPlace bool)
	// failLocked fails every request in flight (Conn.mu held): their
	// channels are closed.
	failLocked()
	// close ends the connection; the Conn's done is closed once the
	// transport's reading goroutine has stopped.
	close(c *Conn) error
	// encrypted says whether tensors travel in TLS on this transport.
	encrypted() bool
}

// errAbandoned is the error of a request given up because its abort
// channel closed: another server of the same exchange failed, so the
// iteration cannot complete.
var errAbandoned = errors.New("psclient: abandoned: another server of the exchange failed")

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
		return dialFramedConn(ctx, addr, o)
	case TransportGRPC:
		return dialGRPC(ctx, addr)
	default:
		return nil, fmt.Errorf("psclient: transport %q: want tcp, unix or grpc", o.Transport)
	}
}

// fail records the connection's first error and fails every request in
// flight.
func (c *Conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
	c.t.failLocked()
}

// failed is the connection's error (nil while it works).
func (c *Conn) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// register numbers req and runs add with its id, under c.mu, unless the
// connection has failed.
func (c *Conn) register(req *pspb.PSRequest, add func(id uint64)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	c.nextID++
	req.Id = c.nextID
	add(req.Id)
	return nil
}

// Start sends a request and returns a channel for its response; the channel
// is closed without a value if the stream fails first. It sets req.Id.
func (c *Conn) Start(req *pspb.PSRequest) (<-chan *pspb.PSResponse, error) {
	call, err := c.t.start(c, req, nil, nil)
	if err != nil {
		return nil, err
	}
	return call.ch, nil
}

// Wait turns a response channel into the response or an error.
func (c *Conn) Wait(ch <-chan *pspb.PSResponse) (*pspb.PSResponse, error) {
	return c.WaitOr(ch, nil) // a nil abort channel never fires
}

// WaitOr is Wait that gives up when abort is closed (another server of the
// same exchange failed: the iteration cannot complete).
func (c *Conn) WaitOr(ch <-chan *pspb.PSResponse, abort <-chan struct{}) (*pspb.PSResponse, error) {
	r, ok, err := c.t.await(&Call{c: c, ch: ch}, abort)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, c.failed()
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
	ch  <-chan *pspb.PSResponse
	w   *waiter // framed: the pooled waiter this call belongs to
	dst [][]byte
}

// StartInto is Start for a pull whose values go straight into dst: the
// slices, in order, receive the response's payload when their lengths add
// up to it (the framed transport reads it from the socket into them; gRPC
// copies it). Wait reports whether that happened.
func (c *Conn) StartInto(req *pspb.PSRequest, dst [][]byte) (*Call, error) {
	return c.StartV(req, nil, dst)
}

// Encrypted says whether the connection's tensors travel in TLS (a framed
// connection to a server that encrypts; gRPC connections have TLS whenever
// the node has a certificate, and report false here).
func (c *Conn) Encrypted() bool { return c.t.encrypted() }

// Framed says whether the connection is the framed transport (tcp or
// unix), which writes a payload in pieces without joining them.
func (c *Conn) Framed() bool { return c.Transport != TransportGRPC }

// StartV is StartInto for a request whose payload is in pieces (req.Data
// is then ignored): the framed transport writes them from where they lie
// with one writev; gRPC sends them joined into one message (a copy, which a
// caller that reuses its own buffer may rather make itself). The pieces
// must stay unchanged until StartV returns.
func (c *Conn) StartV(req *pspb.PSRequest, payload, dst [][]byte) (*Call, error) {
	return c.t.start(c, req, payload, dst)
}

// Wait waits for the response, or until abort is closed (nil: never). When
// inPlace is true the payload is in dst and resp.Data is nil.
func (call *Call) Wait(abort <-chan struct{}) (resp *pspb.PSResponse, inPlace bool, err error) {
	c := call.c
	r, ok, err := c.t.await(call, abort)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		return nil, false, c.failed()
	}
	inPlace = c.t.land(call, r)
	if r.Error != "" {
		return nil, false, status.Error(codes.Code(r.Code), r.Error)
	}
	return r, inPlace, nil
}

// Do sends a request and waits for its response.
func (c *Conn) Do(req *pspb.PSRequest) (*pspb.PSResponse, error) {
	call, err := c.StartV(req, nil, nil)
	if err != nil {
		return nil, err
	}
	r, _, err := call.Wait(nil)
	return r, err
}

// Close ends the connection.
func (c *Conn) Close() error { return c.t.close(c) }
