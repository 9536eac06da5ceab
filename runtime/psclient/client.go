// Package psclient is the worker's side of the parameter-server data plane:
// one gRPC connection and one long-lived Exchange stream per server, with
// many requests in flight and responses matched to requests by id (delayed
// pulls come back out of order).
package psclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/wire"
)

// MaxMessage bounds one gRPC message on the data plane (a block is 4 MiB by
// default, a pull may carry several).
const MaxMessage = 1 << 30

// DialOptions are the gRPC options of every data-plane connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
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
	Addr   string
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

// Dial opens the connection and its stream.
func Dial(addr string) (*Conn, error) { return DialContext(context.Background(), addr) }

// DialContext opens the connection and a stream that lives until ctx ends or
// Close: cancelling ctx fails every request in flight and unblocks a Send
// stuck on flow control (Close waits for Send to return, so it cannot).
func DialContext(ctx context.Context, addr string) (*Conn, error) {
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
	c := &Conn{Addr: addr, cc: cc, stream: stream, cancel: cancel,
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
}

// Start sends a request and returns a channel for its response; the channel
// is closed without a value if the stream fails first. It sets req.Id.
func (c *Conn) Start(req *kelpiepb.PSRequest) (<-chan *kelpiepb.PSResponse, error) {
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
	select {
	case r, ok := <-ch:
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
	case <-abort:
		return nil, fmt.Errorf("psclient: abandoned: another server of the exchange failed")
	}
}

// Do sends a request and waits for its response.
func (c *Conn) Do(req *kelpiepb.PSRequest) (*kelpiepb.PSResponse, error) {
	ch, err := c.Start(req)
	if err != nil {
		return nil, err
	}
	return c.Wait(ch)
}

// Close ends the stream and the connection.
func (c *Conn) Close() error {
	c.sendMu.Lock()
	_ = c.stream.CloseSend()
	c.sendMu.Unlock()
	c.cancel()
	<-c.done
	return c.cc.Close()
}
