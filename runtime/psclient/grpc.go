package psclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"

	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/wire"
)

// grpcStream is the gRPC transport: the service's Exchange stream, whose
// responses a goroutine receives and hands to their waiters by id.
type grpcStream struct {
	cc      *grpc.ClientConn
	stream  pspb.ParameterServer_ExchangeClient
	sendMu  sync.Mutex
	waiting map[uint64]chan *pspb.PSResponse // under Conn.mu
}

// dialGRPC opens a gRPC connection to addr and its Exchange stream, which
// lives until ctx ends or Close.
func dialGRPC(ctx context.Context, addr string) (*Conn, error) {
	cc, err := grpc.NewClient(addr, DialOptions()...)
	if err != nil {
		return nil, fmt.Errorf("psclient: dial %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := pspb.NewParameterServerClient(cc).Exchange(ctx, wire.CallOption())
	if err != nil {
		cancel()
		cc.Close()
		return nil, fmt.Errorf("psclient: open stream to %s: %w", addr, err)
	}
	g := &grpcStream{cc: cc, stream: stream, waiting: map[uint64]chan *pspb.PSResponse{}}
	c := &Conn{Addr: addr, Transport: TransportGRPC, t: g, cancel: cancel, done: make(chan struct{})}
	go g.recvLoop(c)
	return c, nil
}

func (g *grpcStream) recvLoop(c *Conn) {
	defer close(c.done)
	for {
		r, err := g.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("psclient: server %s closed the stream", c.Addr)
			} else {
				err = fmt.Errorf("psclient: stream to %s: %w", c.Addr, err)
			}
			c.fail(err)
			return
		}
		c.mu.Lock()
		ch, ok := g.waiting[r.Id]
		delete(g.waiting, r.Id)
		c.mu.Unlock()
		if ok {
			ch <- r
		}
	}
}

// start sends req with its payload joined into req.Data (a copy: gRPC
// sends one message).
func (g *grpcStream) start(c *Conn, req *pspb.PSRequest, payload, dst [][]byte) (*Call, error) {
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
	ch := make(chan *pspb.PSResponse, 1)
	if err := c.register(req, func(id uint64) { g.waiting[id] = ch }); err != nil {
		return nil, err
	}
	g.sendMu.Lock()
	err := g.stream.Send(req)
	g.sendMu.Unlock()
	if err != nil {
		c.mu.Lock()
		delete(g.waiting, req.Id)
		c.mu.Unlock()
		return nil, fmt.Errorf("psclient: send to %s: %w", c.Addr, err)
	}
	return &Call{c: c, ch: ch, dst: dst}, nil
}

func (g *grpcStream) await(call *Call, abort <-chan struct{}) (*pspb.PSResponse, bool, error) {
	select {
	case r, ok := <-call.ch:
		return r, ok, nil
	case <-abort:
		return nil, false, errAbandoned
	}
}

// land copies the payload into the call's dst when their lengths match.
func (g *grpcStream) land(call *Call, r *pspb.PSResponse) bool {
	if call.dst == nil || total(call.dst) != len(r.Data) || len(r.Data) == 0 {
		return false
	}
	off := 0
	for _, d := range call.dst {
		off += copy(d, r.Data[off:])
	}
	wire.Recycle(r.Data)
	r.Data = nil
	return true
}

func (g *grpcStream) failLocked() {
	for id, ch := range g.waiting {
		close(ch)
		delete(g.waiting, id)
	}
}

func (g *grpcStream) close(c *Conn) error {
	g.sendMu.Lock()
	_ = g.stream.CloseSend()
	g.sendMu.Unlock()
	c.cancel()
	<-c.done
	return g.cc.Close()
}

func (g *grpcStream) encrypted() bool { return false }
