package framing

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Mux shares one listening port between gRPC (HTTP/2) and framed
// connections: it reads the first four bytes of each accepted connection
// and hands a framed one (Magic) to its Framed callback and anything else
// to the listener returned by GRPC, with those bytes replayed. Servers keep
// their one advertised address; the worker chooses the transport.
type Mux struct {
	lis    net.Listener
	framed func(net.Conn)
	logf   func(string, ...any)

	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

// NewMux starts serving lis. framed is called (on its own goroutine) for
// every framed connection.
func NewMux(lis net.Listener, framed func(net.Conn), logf func(string, ...any)) *Mux {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	m := &Mux{lis: lis, framed: framed, logf: logf, conns: make(chan net.Conn), done: make(chan struct{})}
	go m.accept()
	return m
}

// GRPC is the listener of the non-framed connections, for grpc.Server.Serve.
func (m *Mux) GRPC() net.Listener { return muxListener{m} }

// Close stops accepting.
func (m *Mux) Close() error {
	m.closeOnce.Do(func() { close(m.done) })
	return m.lis.Close()
}

func (m *Mux) accept() {
	for {
		c, err := m.lis.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			m.closeOnce.Do(func() { close(m.done) })
			return
		}
		go m.route(c)
	}
}

func (m *Mux) route(c net.Conn) {
	var first [4]byte
	_ = c.SetReadDeadline(time.Now().Add(HandshakeTimeout))
	n, err := io.ReadFull(c, first[:])
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	pc := &prefixConn{Conn: c, prefix: first[:n]}
	if first == Magic {
		m.framed(pc)
		return
	}
	select {
	case m.conns <- pc:
	case <-m.done:
		c.Close()
	}
}

type muxListener struct{ m *Mux }

func (l muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.m.conns:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

func (l muxListener) Close() error   { return l.m.Close() }
func (l muxListener) Addr() net.Addr { return l.m.lis.Addr() }

// prefixConn replays bytes already read from a connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Unwrap is the connection underneath, for writev on a *net.TCPConn once
// the prefix has been read.
func (c *prefixConn) Unwrap() net.Conn { return c.Conn }
