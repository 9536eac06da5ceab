package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/framing"
)

// Framed is how the server accepts connections of the framed transport.
type Framed struct {
	// Credentials check each connection's proof (nil: no secret).
	Credentials framing.Credentials
	// Unix is the server's Unix socket path, advertised to clients on its
	// host ("" for none).
	Unix string
	// TLS, when set, encrypts every TCP connection after the handshake
	// (cluster.data_plane_encryption: on): mutual TLS with the node
	// certificates. Unix socket connections stay plain: their bytes never
	// leave the host.
	TLS *tls.Config
}

// refused logs a refused framed connection through the server's
// RefusalLog (rate limited, aggregated per source host).
func (s *Server) refused(remote net.Addr, err error) {
	s.refusals.Refused(remote, err)
}

// ServeFramed serves one framed connection until the worker closes it, the
// server's context ends, or a frame is bad: then the connection is closed
// and the reason logged (never a panic).
func (s *Server) ServeFramed(ctx context.Context, nc net.Conn, f Framed) {
	defer nc.Close()
	framing.Tune(nc)
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	creds := f.Credentials
	if creds == nil {
		creds = framing.SharedSecret(nil)
	}
	tc := framing.NewConn(nc)
	tlsConf := f.TLS
	if framing.IsUnix(nc) {
		tlsConf = nil
	}
	if err := framing.ServerHandshake(tc, creds, tlsConf, framing.Hello{HostID: framing.HostID(), Unix: f.Unix}); err != nil {
		if !errors.Is(err, framing.ErrMoved) {
			s.refused(nc.RemoteAddr(), err)
		}
		return
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		return
	}
	var spare *pspb.PSRequest // a handled request nothing refers to
	recv := func() (*pspb.PSRequest, error) {
		h, meta, err := tc.ReadHeader()
		if err != nil {
			return nil, err
		}
		if h.Kind != framing.KindRequest {
			return nil, fmt.Errorf("%w: %v frame where a request belongs", framing.ErrFrame, h.Kind)
		}
		req := spare
		if req != nil {
			spare = nil
			*req = pspb.PSRequest{Blocks: req.Blocks[:0], RowKeys: req.RowKeys[:0], PullRowKeys: req.PullRowKeys[:0]}
		} else {
			req = &pspb.PSRequest{}
		}
		req.Id = h.ID
		if err := framing.DecodeRequest(meta, req); err != nil {
			return nil, err
		}
		if h.Payload > 0 {
			if err := s.readPayload(tc, req, int(h.Payload)); err != nil {
				return nil, err
			}
		}
		return req, nil
	}
	send := func(rs []*Response) error {
		for _, r := range rs {
			meta := framing.AppendResponse(tc.MetaBuf(), r.PSResponse)
			parts := r.Parts // the parameters themselves, lent until the session's Done
			if parts == nil {
				r.partsBuf[0] = r.Data
				parts = r.partsBuf[:1]
			}
			if err := tc.Queue(framing.KindResponse, r.Id, meta, parts); err != nil {
				return err
			}
		}
		return tc.Flush()
	}
	err := s.session(recv, tc.FrameBuffered, send, func(req *pspb.PSRequest) { spare = req })
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed) && ctx.Err() != nil:
	case errors.Is(err, framing.ErrFrame):
		s.logf("data plane: %s: closing the connection: %v", nc.RemoteAddr(), err)
	default:
		s.logf("data plane: %s: connection ended: %v", nc.RemoteAddr(), err)
	}
}

// Endpoint is a server's data-plane listeners: the framed transport on the
// port gRPC also serves (framing.Mux) and, optionally, a Unix socket.
type Endpoint struct {
	mux    *framing.Mux
	unix   net.Listener
	path   string
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool // no connection is served once Close has begun
}

// Listen starts serving the framed transport on lis (and on f.Unix, a Unix
// socket path created now and removed by Close, if not empty). The
// returned endpoint's GRPC listener carries the port's other connections,
// for grpc.Server.Serve.
func (s *Server) Listen(lis net.Listener, f Framed) (*Endpoint, error) {
	ctx, cancel := context.WithCancel(context.Background())
	e := &Endpoint{cancel: cancel}
	if f.Unix != "" {
		_ = os.Remove(f.Unix) // a socket left by a killed predecessor
		// The socket may sit in the node's snapshot directory, which a
		// server's first start has not made yet.
		if err := os.MkdirAll(filepath.Dir(f.Unix), 0o700); err != nil {
			cancel()
			return nil, fmt.Errorf("server %s: unix socket dir: %v", s.cfg.Name, err)
		}
		ul, err := net.Listen("unix", f.Unix)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("server %s: unix socket: %v", s.cfg.Name, err)
		}
		e.unix, e.path = ul, f.Unix
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for {
				c, err := ul.Accept()
				if err != nil {
					return
				}
				e.wg.Add(1)
				go func() { defer e.wg.Done(); s.ServeFramed(ctx, c, f) }()
			}
		}()
	}
	e.mux = framing.NewMux(lis, func(c net.Conn) {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			c.Close()
			return
		}
		e.wg.Add(1)
		e.mu.Unlock()
		defer e.wg.Done()
		s.ServeFramed(ctx, c, f)
	}, s.cfg.Logf)
	return e, nil
}

// GRPC is the listener for the gRPC server.
func (e *Endpoint) GRPC() net.Listener { return e.mux.GRPC() }

// Close stops listening, closes every framed connection and removes the
// Unix socket.
func (e *Endpoint) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	err := e.mux.Close()
	if e.unix != nil {
		e.unix.Close()
		os.Remove(e.path)
	}
	e.cancel()
	e.wg.Wait()
	return err
}

// UnixPath is a fresh path for a server's Unix socket in dir (the system's
// temporary directory if empty), short enough for sockaddr_un.
func UnixPath(dir, name string) string {
	if dir == "" {
		dir = os.TempDir()
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	p := filepath.Join(dir, fmt.Sprintf("kelpie-%s-%x.sock", name, b))
	if len(p) >= 104 {
		p = filepath.Join(os.TempDir(), fmt.Sprintf("kelpie-%x.sock", b))
	}
	return p
}
