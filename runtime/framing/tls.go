package framing

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
)

// An encrypted connection (data_plane_encryption: on) runs TLS over the
// framed connection once the handshake has proven the job's secret.
// crypto/tls seals records of at most 16 KB and writes each one to the
// socket by itself: 64 system calls (and loopback wake-ups) for a 1 MB
// tensor. Underneath it, batchConn gathers the records of a frame into a
// buffer that goes out when full or when the frame is complete (Flush).

// tlsBuffer is the size of an encrypted connection's batches.
const tlsBuffer = 256 << 10

// batchConn is the socket under a tls.Conn.
type batchConn struct {
	net.Conn
	r io.Reader

	mu       sync.Mutex // TLS may write from its read side (key updates)
	batching bool       // after the TLS handshake
	buf      []byte
}

func (b *batchConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.batching {
		return b.Conn.Write(p)
	}
	if len(b.buf)+len(p) > cap(b.buf) {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) >= cap(b.buf) {
		return b.Conn.Write(p)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes what has been gathered.
func (b *batchConn) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *batchConn) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

func (b *batchConn) Close() error {
	_ = b.Flush()
	return b.Conn.Close()
}

// startTLS runs the TLS handshake over c's connection and moves c's frames
// into it.
func startTLS(c *Conn, conf *tls.Config, client bool) error {
	conf = withALPN(conf)
	// TLS reads the socket through the connection's buffer (empty here:
	// each end starts TLS only after the other's last plain frame).
	bc := &batchConn{Conn: c.nc, r: c.r}
	var tc *tls.Conn
	if client {
		tc = tls.Client(bc, conf)
	} else {
		tc = tls.Server(bc, conf)
	}
	if err := tc.Handshake(); err != nil {
		return err
	}
	bc.mu.Lock()
	bc.batching, bc.buf = true, make([]byte, 0, tlsBuffer)
	bc.mu.Unlock()
	c.nc, c.wc, c.flush = tc, tc, bc
	c.r = bufio.NewReaderSize(tc, ReadBuffer)
	return nil
}

// withALPN is conf offering the framed transport's application protocol, and
// only it: the identities a configuration admits are its maker's business
// (core/identity), the protocol on top is this package's.
func withALPN(conf *tls.Config) *tls.Config {
	if slices.Equal(conf.NextProtos, []string{ALPN}) {
		return conf
	}
	conf = conf.Clone()
	conf.NextProtos = []string{ALPN}
	return conf
}

// Encrypted says whether the connection's frames travel in TLS.
func (c *Conn) Encrypted() bool {
	_, ok := c.nc.(*tls.Conn)
	return ok
}

// writeEncrypted writes frames into TLS (whose records batchConn gathers)
// and flushes them.
func (c *Conn) writeEncrypted(vec [][]byte) error {
	for _, p := range vec {
		if _, err := c.wc.Write(p); err != nil {
			return err
		}
	}
	return c.flush.Flush()
}

// Stream is the connection as a plain byte stream once the handshake is
// done, for a protocol of its own on top of the proven connection (the
// allreduce peers'): reads and writes go straight to the socket, or through
// TLS when the connection is encrypted (each Write then leaves at once).
// Frames of this Conn must not be used afterwards. It fails if the peer
// sent more than the handshake before this end answered it, which no
// client of the protocol does.
func (c *Conn) Stream() (net.Conn, error) {
	if n := c.r.Buffered(); n > 0 {
		return nil, fmt.Errorf("%w: %d bytes after the handshake before this end's answer", ErrFrame, n)
	}
	if c.flush == nil {
		return c.nc, nil
	}
	return &flushingConn{Conn: c.nc, flush: c.flush}, nil
}

// TLSState is the state of an encrypted connection's TLS session (false on
// a plain one).
func (c *Conn) TLSState() (tls.ConnectionState, bool) {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return tls.ConnectionState{}, false
	}
	return tc.ConnectionState(), true
}

// flushingConn is an encrypted Stream: every Write is flushed (batchConn
// would otherwise hold it until its buffer fills).
type flushingConn struct {
	net.Conn
	flush interface{ Flush() error }
}

func (f *flushingConn) Write(p []byte) (int, error) {
	n, err := f.Conn.Write(p)
	if err != nil {
		return n, err
	}
	return n, f.flush.Flush()
}
