package tensorwire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
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
}

const (
	nonceSize     = 32
	maxHelloField = 4096
	maxHelloMeta  = 4 * (2 + maxHelloField) // four fields at most
	// HandshakeTimeout bounds a whole handshake: a peer that stalls during
	// it is dropped.
	HandshakeTimeout = 10 * time.Second
)

// The handshake, four frames on the new connection:
//
//	client → server  hello      role "c", client nonce
//	server → client  hello      role "s", server nonce, host id, unix path
//	client → server  hello-ack  proof over both nonces ("client")
//	server → client  hello-ack  proof over both nonces ("server")
//
// Each side checks the other's proof; a failed check closes the connection
// (a refused client is told why in an error frame first).

func transcript(who string, cn, sn []byte) []byte {
	t := make([]byte, 0, 32+2*nonceSize)
	t = append(t, "kelpie-tensorwire-v1/"...)
	t = append(t, who...)
	t = append(t, cn...)
	return append(t, sn...)
}

// ClientHandshake proves the client to the server and the server to the
// client, and returns what the server advertised.
func ClientHandshake(c *Conn, creds Credentials) (Hello, error) {
	_ = c.nc.SetDeadline(time.Now().Add(HandshakeTimeout))
	defer c.nc.SetDeadline(time.Time{})
	c.helloOnly = true
	defer func() { c.helloOnly = false }()
	cn := make([]byte, nonceSize)
	_, _ = rand.Read(cn)
	if err := c.WriteFrame(KindHello, 0, appendFields(nil, []byte("c"), cn), nil); err != nil {
		return Hello{}, fmt.Errorf("tensorwire: send hello: %v", err)
	}
	f, err := readHello(c, KindHello, 4)
	if err != nil {
		return Hello{}, err
	}
	if string(f[0]) != "s" || len(f[1]) != nonceSize {
		return Hello{}, fmt.Errorf("%w: server hello malformed", ErrFrame)
	}
	sn := append([]byte(nil), f[1]...) // f is the connection's buffer, reused by the next read
	hello := Hello{HostID: string(f[2]), Unix: string(f[3])}
	if err := c.WriteFrame(KindHelloAck, 0, appendFields(nil, creds.Prove(transcript("client", cn, sn))), nil); err != nil {
		return Hello{}, fmt.Errorf("tensorwire: send proof: %v", err)
	}
	f, err = readHello(c, KindHelloAck, 2)
	if err != nil {
		return Hello{}, err
	}
	if len(f[1]) > 0 {
		return Hello{}, fmt.Errorf("tensorwire: server refused the connection: %s", f[1])
	}
	if !creds.Verify(transcript("server", cn, sn), f[0]) {
		return Hello{}, errors.New("tensorwire: the server did not prove the job's data-plane secret")
	}
	return hello, nil
}

// ServerHandshake checks a client's proof and proves the server to it.
func ServerHandshake(c *Conn, creds Credentials, me Hello) error {
	_ = c.nc.SetDeadline(time.Now().Add(HandshakeTimeout))
	defer c.nc.SetDeadline(time.Time{})
	c.helloOnly = true
	defer func() { c.helloOnly = false }()
	f, err := readHello(c, KindHello, 2)
	if err != nil {
		return err
	}
	if string(f[0]) != "c" || len(f[1]) != nonceSize {
		return fmt.Errorf("%w: client hello malformed", ErrFrame)
	}
	cn := append([]byte(nil), f[1]...)
	sn := make([]byte, nonceSize)
	_, _ = rand.Read(sn)
	if err := c.WriteFrame(KindHello, 0, appendFields(nil, []byte("s"), sn, []byte(me.HostID), []byte(me.Unix)), nil); err != nil {
		return fmt.Errorf("tensorwire: send hello: %v", err)
	}
	f, err = readHello(c, KindHelloAck, 1)
	if err != nil {
		return err
	}
	if !creds.Verify(transcript("client", cn, sn), f[0]) {
		_ = c.WriteFrame(KindHelloAck, 0, appendFields(nil, nil, []byte("wrong data-plane credentials")), nil)
		return errors.New("tensorwire: client did not prove the job's data-plane secret")
	}
	if err := c.WriteFrame(KindHelloAck, 0, appendFields(nil, creds.Prove(transcript("server", cn, sn)), nil), nil); err != nil {
		return fmt.Errorf("tensorwire: send proof: %v", err)
	}
	return nil
}

func readHello(c *Conn, kind Kind, n int) ([][]byte, error) {
	h, meta, err := c.ReadHeader()
	if err != nil {
		return nil, fmt.Errorf("tensorwire: handshake: %w", err)
	}
	if h.Kind != kind || h.Payload != 0 {
		return nil, fmt.Errorf("%w: handshake expected a %v frame without payload, got %v with %d bytes", ErrFrame, kind, h.Kind, h.Payload)
	}
	f, err := parseFields(meta, n)
	if err != nil {
		return nil, err
	}
	return f, nil
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
