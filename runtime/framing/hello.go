package framing

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// Credentials prove a connection at connect time. The default is a per-job
// secret both ends hold (SharedSecret); a TLS-based implementation from the
// node certificates can take its place without changing the framing.
type Credentials interface {
	// Prove returns the proof this end presents for a transcript.
	Prove(transcript []byte) []byte
	// Verify checks the peer's proof for the same transcript, in constant
	// time.
	Verify(transcript, proof []byte) bool
}

// SharedSecret proves knowledge of a per-job secret with HMAC-SHA256 over
// both ends' fresh nonces, so a proof cannot be replayed. An empty secret
// is the "no secret" job (today's local clusters without one): any peer
// without a secret is accepted, and a peer that has one is refused.
type SharedSecret []byte

// Prove implements Credentials.
func (s SharedSecret) Prove(transcript []byte) []byte {
	if len(s) == 0 {
		return nil
	}
	m := hmac.New(sha256.New, s)
	m.Write(transcript)
	return m.Sum(nil)
}

// Verify implements Credentials.
func (s SharedSecret) Verify(transcript, proof []byte) bool {
	return hmac.Equal(s.Prove(transcript), proof) // constant time (crypto/subtle)
}

// Hello is what a server tells a client it has accepted.
type Hello struct {
	HostID string // identity of the server's host (see HostID)
	Unix   string // the server's Unix socket path, "" if it has none
	// Encrypted: the connection continues in TLS after the handshake
	// (cluster.data_plane_encryption: on, over TCP).
	Encrypted bool
}

const (
	nonceSize     = 32
	maxHelloField = 4096
	maxHelloMeta  = 5 * (2 + maxHelloField) // five fields at most
	// HandshakeTimeout bounds a whole handshake: a peer that stalls during
	// it is dropped.
	HandshakeTimeout = 10 * time.Second
	// ALPN is the TLS application protocol of an encrypted framed
	// connection.
	ALPN = "kelpie-tensorwire"
)

// The handshake, four frames on the new connection:
//
//	client → server  hello      role "c", client nonce
//	server → client  hello      role "s", server nonce, host id, unix path, "tls" or ""
//	client → server  hello-ack  proof over both hellos ("client")
//	server → client  hello-ack  proof over both hellos ("server")
//
// Each side checks the other's proof; a failed check closes the connection
// (a refused client is told why in an error frame first). The proofs cover
// both hellos whole, so nothing in them (the Unix path, whether the
// connection is encrypted) can be changed on the way. With "tls" both ends
// then run a TLS 1.3 handshake with their node certificates over the same
// connection, and every later frame travels inside it.

func transcript(who string, ch, sh []byte) []byte {
	t := make([]byte, 0, 32+len(ch)+len(sh))
	t = append(t, "kelpie-tensorwire-v1/"...)
	t = append(t, who...)
	t = appendFields(t, ch)
	return appendFields(t, sh)
}

// ClientHandshake proves the client to the server and the server to the
// client, and returns what the server advertised. With tlsConf (the
// client's node certificate) the client encrypts: a TCP connection to a
// server that does not is refused; without it, a server that encrypts is
// refused. A connection that the server encrypts continues in TLS.
func ClientHandshake(c *Conn, creds Credentials, tlsConf *tls.Config) (Hello, error) {
	_ = c.nc.SetDeadline(time.Now().Add(HandshakeTimeout))
	defer c.nc.SetDeadline(time.Time{})
	c.helloOnly = true
	defer func() { c.helloOnly = false }()
	cn := make([]byte, nonceSize)
	_, _ = rand.Read(cn)
	ch := appendFields(nil, []byte("c"), cn)
	if err := c.WriteFrame(KindHello, 0, ch, nil); err != nil {
		return Hello{}, fmt.Errorf("framing: send hello: %w", err)
	}
	f, sh, err := readHello(c, KindHello, 5)
	if err != nil {
		return Hello{}, err
	}
	if string(f[0]) != "s" || len(f[1]) != nonceSize || (string(f[4]) != "" && string(f[4]) != "tls") {
		return Hello{}, fmt.Errorf("%w: server hello malformed", ErrFrame)
	}
	hello := Hello{HostID: string(f[2]), Unix: string(f[3]), Encrypted: string(f[4]) == "tls"}
	if err := c.WriteFrame(KindHelloAck, 0, appendFields(nil, creds.Prove(transcript("client", ch, sh))), nil); err != nil {
		return Hello{}, fmt.Errorf("framing: send proof: %w", err)
	}
	f, _, err = readHello(c, KindHelloAck, 2)
	if err != nil {
		return Hello{}, err
	}
	if len(f[1]) > 0 {
		return Hello{}, fmt.Errorf("framing: server refused the connection: %s", f[1])
	}
	if !creds.Verify(transcript("server", ch, sh), f[0]) {
		return Hello{}, errors.New("framing: the server did not prove the job's data-plane secret")
	}
	switch {
	case hello.Encrypted && tlsConf == nil:
		return Hello{}, errors.New("framing: the server encrypts its data plane (data_plane_encryption: on) and this end has no certificate for it")
	case !hello.Encrypted && tlsConf != nil && !IsUnix(c.nc):
		return Hello{}, errors.New("framing: the server does not encrypt its data plane over TCP and this end requires it (data_plane_encryption: on)")
	case hello.Encrypted:
		if err := startTLS(c, tlsConf, true); err != nil {
			return Hello{}, fmt.Errorf("framing: tls: %w", err)
		}
	}
	return hello, nil
}

// ServerHandshake checks a client's proof and proves the server to it.
// With tlsConf (the server's node certificate; pass nil on a Unix socket,
// whose bytes never leave the host) the connection continues in TLS.
func ServerHandshake(c *Conn, creds Credentials, tlsConf *tls.Config, me Hello) error {
	_ = c.nc.SetDeadline(time.Now().Add(HandshakeTimeout))
	defer c.nc.SetDeadline(time.Time{})
	c.helloOnly = true
	defer func() { c.helloOnly = false }()
	f, ch, err := readHello(c, KindHello, 2)
	if err != nil {
		return err
	}
	if string(f[0]) != "c" || len(f[1]) != nonceSize {
		return fmt.Errorf("%w: client hello malformed", ErrFrame)
	}
	sn := make([]byte, nonceSize)
	_, _ = rand.Read(sn)
	mode := ""
	if tlsConf != nil {
		mode = "tls"
	}
	sh := appendFields(nil, []byte("s"), sn, []byte(me.HostID), []byte(me.Unix), []byte(mode))
	if err := c.WriteFrame(KindHello, 0, sh, nil); err != nil {
		return fmt.Errorf("framing: send hello: %w", err)
	}
	f, _, err = readHello(c, KindHelloAck, 1)
	if err != nil {
		return err
	}
	if !creds.Verify(transcript("client", ch, sh), f[0]) {
		_ = c.WriteFrame(KindHelloAck, 0, appendFields(nil, nil, []byte("wrong data-plane credentials")), nil)
		return errors.New("framing: client did not prove the job's data-plane secret")
	}
	if err := c.WriteFrame(KindHelloAck, 0, appendFields(nil, creds.Prove(transcript("server", ch, sh)), nil), nil); err != nil {
		return fmt.Errorf("framing: send proof: %w", err)
	}
	if tlsConf != nil {
		if err := startTLS(c, tlsConf, false); err != nil {
			if errors.Is(err, io.EOF) {
				return ErrMoved
			}
			return fmt.Errorf("framing: tls: %w", err)
		}
	}
	return nil
}

// ErrMoved: the client closed a proven connection before its TLS handshake,
// having moved to the server's Unix socket (nothing to log).
var ErrMoved = errors.New("framing: the client moved to the unix socket")

// IsUnix says whether nc is (or wraps) a Unix socket.
func IsUnix(nc net.Conn) bool {
	for {
		if _, ok := nc.(*net.UnixConn); ok {
			return true
		}
		u, ok := nc.(interface{ Unwrap() net.Conn })
		if !ok {
			return false
		}
		nc = u.Unwrap()
	}
}

// readHello reads a handshake frame of n fields; raw is a copy of its
// metadata (for the transcript), which the fields view.
func readHello(c *Conn, kind Kind, n int) (fields [][]byte, raw []byte, err error) {
	h, meta, err := c.ReadHeader()
	if err != nil {
		return nil, nil, fmt.Errorf("framing: handshake: %w", err)
	}
	if h.Kind != kind || h.Payload != 0 {
		return nil, nil, fmt.Errorf("%w: handshake expected a %v frame without payload, got %v with %d bytes", ErrFrame, kind, h.Kind, h.Payload)
	}
	raw = append([]byte(nil), meta...)
	f, err := parseFields(raw, n)
	if err != nil {
		return nil, nil, err
	}
	return f, raw, nil
}

// appendFields encodes byte strings, each with a 2-byte length.
func appendFields(b []byte, fields ...[]byte) []byte {
	for _, f := range fields {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	return b
}

// parseFields decodes exactly n fields of at most maxHelloField bytes.
func parseFields(m []byte, n int) ([][]byte, error) {
	out := make([][]byte, 0, n)
	for range n {
		if len(m) < 2 {
			return nil, fmt.Errorf("%w: hello field truncated", ErrFrame)
		}
		l := int(binary.LittleEndian.Uint16(m))
		m = m[2:]
		if l > maxHelloField || l > len(m) {
			return nil, fmt.Errorf("%w: hello field of %d bytes (%d left, at most %d)", ErrFrame, l, len(m), maxHelloField)
		}
		out = append(out, m[:l])
		m = m[l:]
	}
	if len(m) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the hello's fields", ErrFrame, len(m))
	}
	return out, nil
}

var hostID = sync.OnceValue(func() string {
	// The kernel's boot id differs between hosts (and containers share it
	// with their host only when they share its kernel, where a Unix socket
	// path may still not be visible: the client falls back to TCP then).
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := strings.TrimSpace(string(b))
	if err != nil || id == "" {
		id = "unknown"
	}
	name, _ := os.Hostname()
	return name + "/" + id
})

// HostID identifies this host: the client uses a server's Unix socket only
// when the server's host id equals its own.
func HostID() string { return hostID() }
