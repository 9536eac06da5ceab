// Package framing is kelpie's framed tensor transport: the data plane
// between workers and parameter servers beside gRPC, which keeps every
// control service.
//
// A connection carries frames. Each frame is a fixed 24-byte header, a small
// metadata section and a payload:
//
//	0  magic "KLPW"      8  request id (uint64)
//	4  version (1)      16  metadata length (uint32)
//	5  kind             20  payload length (uint32)
//	6  flags (0)
//
// (all integers little-endian). A frame is written with one writev (header
// and metadata in one buffer, the payload as it lies in memory; under
// CopyBelow bytes, all joined into one buffer and written) and read in
// two steps, ReadHeader and ReadPayload, so the caller picks the payload's
// destination after seeing the header: a pooled, aligned buffer for a push,
// the worker's parameter slice for a pull. Nothing is allocated per frame
// once the connection's buffers have grown to the largest metadata seen.
//
// The decoder trusts nothing: a wrong magic or version, a kind it does not
// know, non-zero flags, or a length over MaxMeta/MaxPayload is an error that
// names the field, and the caller closes that connection.
//
// A connection starts with a hello exchange (see Handshake) that proves the
// peer knows the job's data-plane secret; the server can also listen on the
// same port as gRPC (Mux) and on a Unix socket for peers on its own host.
package framing

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// Version is the frame format version this package speaks.
const Version = 1

// HeaderSize is the size of a frame header in bytes.
const HeaderSize = 24

// Magic opens every frame. It differs from the HTTP/2 preface ("PRI "), so
// one port can carry both (see Mux).
var Magic = [4]byte{'K', 'L', 'P', 'W'}

// Bounds of one frame. A payload is at most 1 GiB (the same bound as the
// gRPC data plane's messages); metadata (block ids, row keys) at most 64 MiB.
const (
	MaxPayload = 1 << 30
	MaxMeta    = 64 << 20
)

// Kind is what a frame carries.
type Kind uint8

// Frame kinds.
const (
	KindHello    Kind = 1 // client → server: version, secret proof
	KindHelloAck Kind = 2 // server → client: accepted, the server's unix socket
	KindRequest  Kind = 3 // client → server: a PS request
	KindResponse Kind = 4 // server → client: a PS response
)

func (k Kind) String() string {
	switch k {
	case KindHello:
		return "hello"
	case KindHelloAck:
		return "hello-ack"
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Header is a decoded frame header.
type Header struct {
	Kind    Kind
	ID      uint64
	MetaLen uint32
	Payload uint32
}

// ErrFrame is wrapped by every error about a malformed frame.
var ErrFrame = errors.New("framing: bad frame")

// PutHeader encodes h into b[:HeaderSize].
func PutHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	copy(b[0:4], Magic[:])
	b[4] = Version
	b[5] = byte(h.Kind)
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint64(b[8:16], h.ID)
	binary.LittleEndian.PutUint32(b[16:20], h.MetaLen)
	binary.LittleEndian.PutUint32(b[20:24], h.Payload)
}

// ParseHeader decodes and checks a frame header.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: header of %d bytes, want %d", ErrFrame, len(b), HeaderSize)
	}
	if [4]byte(b[0:4]) != Magic {
		return Header{}, fmt.Errorf("%w: magic %q, want %q", ErrFrame, b[0:4], Magic[:])
	}
	if b[4] != Version {
		return Header{}, fmt.Errorf("%w: version %d, this end speaks %d", ErrFrame, b[4], Version)
	}
	h := Header{
		Kind:    Kind(b[5]),
		ID:      binary.LittleEndian.Uint64(b[8:16]),
		MetaLen: binary.LittleEndian.Uint32(b[16:20]),
		Payload: binary.LittleEndian.Uint32(b[20:24]),
	}
	if h.Kind < KindHello || h.Kind > KindResponse {
		return Header{}, fmt.Errorf("%w: unknown kind %d", ErrFrame, b[5])
	}
	if b[6] != 0 || b[7] != 0 {
		return Header{}, fmt.Errorf("%w: flags %#x, want 0", ErrFrame, binary.LittleEndian.Uint16(b[6:8]))
	}
	if h.MetaLen > MaxMeta {
		return Header{}, fmt.Errorf("%w: metadata length %d over the maximum %d", ErrFrame, h.MetaLen, MaxMeta)
	}
	if h.Payload > MaxPayload {
		return Header{}, fmt.Errorf("%w: payload length %d over the maximum %d", ErrFrame, h.Payload, MaxPayload)
	}
	return h, nil
}

// Conn is one framed connection. One goroutine may write (WriteFrame) while
// another reads (ReadHeader, ReadPayload); neither side is safe for more
// than one goroutine at a time.
type Conn struct {
	nc net.Conn // reads (and deadlines, Close)
	wc net.Conn // writes: nc itself, or the *net.TCPConn/*net.UnixConn under it, for writev

	// write side
	wbuf    []byte // MetaBuf's buffer
	metaOut bool   // MetaBuf was called since the last Queue
	arena   []byte // headers and metadata of the queued frames
	queued  []queuedFrame
	qparts  [][]byte // their payloads' pieces
	bufs    net.Buffers
	vec     [][]byte  // what one writev writes
	one     [1][]byte // WriteFrame's payload as one piece
	joined  []byte    // a small write's pieces joined (CopyBelow)
	// flush completes a frame on an encrypted connection (tls.go); nil
	// on a plain one.
	flush interface{ Flush() error }

	// read side
	r    *bufio.Reader // over nc: many small frames per read system call
	hdr  [HeaderSize]byte
	meta []byte
	left int // payload bytes of the current frame not yet read
	// helloOnly bounds what the next frames may carry while the peer is
	// not yet authenticated: metadata of a hello, no payload (see
	// Handshake), so a stranger cannot make this end allocate MaxMeta.
	helloOnly bool
}

// NewConn wraps an established connection.
func NewConn(nc net.Conn) *Conn {
	wc := nc
	if u, ok := nc.(interface{ Unwrap() net.Conn }); ok {
		wc = u.Unwrap()
	}
	return &Conn{nc: nc, wc: wc, r: bufio.NewReaderSize(nc, ReadBuffer), wbuf: make([]byte, 0, 512), arena: make([]byte, 0, 512),
		meta: make([]byte, 0, 512)}
}

// NetConn is the underlying connection.
func (c *Conn) NetConn() net.Conn { return c.nc }

// Close closes the connection.
func (c *Conn) Close() error { return c.nc.Close() }

// MetaBuf returns the connection's metadata buffer, empty, for the caller
// to append the next frame's metadata to and pass to WriteFrame or Queue
// (which copy it): no allocation once it has grown.
func (c *Conn) MetaBuf() []byte {
	c.metaOut = true
	return c.wbuf[:0]
}

// WriteFrame writes one frame: header and metadata in one buffer, the
// payload from where it lies, with one writev. meta may be (and for no
// allocation should be) the slice MetaBuf returned, grown by appending.
func (c *Conn) WriteFrame(kind Kind, id uint64, meta, payload []byte) error {
	c.one[0] = payload
	err := c.WriteFrameV(kind, id, meta, c.one[:])
	c.one[0] = nil
	return err
}

// WriteFrameV is WriteFrame with a payload in pieces, each written from
// where it lies (a gather write: the worker's gradient slices, the server's
// parameter blocks), all with the header in one writev.
func (c *Conn) WriteFrameV(kind Kind, id uint64, meta []byte, payload [][]byte) error {
	if err := c.Queue(kind, id, meta, payload); err != nil {
		return err
	}
	return c.Flush()
}

// Queue adds a frame to the ones Flush writes together, with one writev:
// a server answering several pipelined requests at once. Header and
// metadata are copied; when meta was built on MetaBuf, its memory becomes
// MetaBuf's (so that a metadata buffer grown by appending is not grown
// again). The payload's pieces are referenced and must stay unchanged
// until Flush.
func (c *Conn) Queue(kind Kind, id uint64, meta []byte, payload [][]byte) error {
	if len(meta) > MaxMeta {
		return fmt.Errorf("framing: metadata of %d bytes over the maximum %d", len(meta), MaxMeta)
	}
	n := 0
	for _, p := range payload {
		n += len(p)
		if n > MaxPayload {
			return fmt.Errorf("framing: payload of more than %d bytes over the maximum %d", n, MaxPayload)
		}
	}
	lo := len(c.arena)
	c.arena = append(c.arena, make([]byte, HeaderSize)...)
	PutHeader(c.arena[lo:], Header{Kind: kind, ID: id, MetaLen: uint32(len(meta)), Payload: uint32(n)})
	c.arena = append(c.arena, meta...)
	if c.metaOut && cap(meta) > cap(c.wbuf) {
		c.wbuf = meta[:0] // MetaBuf grown by appending: keep its capacity
	}
	c.metaOut = false
	parts := 0
	for _, p := range payload {
		if len(p) > 0 {
			c.qparts = append(c.qparts, p)
			parts++
		}
	}
	c.queued = append(c.queued, queuedFrame{lo: lo, hi: len(c.arena), parts: parts})
	return nil
}

// CopyBelow is the size under which Flush joins a write's pieces into one
// buffer and writes that, instead of a writev of the pieces: for small
// frames copying is cheaper than the kernel's walk over several pieces.
const CopyBelow = 16 << 10

func vecLen(vec [][]byte) int {
	n := 0
	for _, v := range vec {
		n += len(v)
	}
	return n
}

// queuedFrame is a frame waiting for Flush: its header and metadata in
// arena[lo:hi], then parts pieces of qparts.
type queuedFrame struct{ lo, hi, parts int }

// Flush writes the queued frames, headers and payloads, with one writev
// (on an encrypted connection: through TLS, then flushed).
func (c *Conn) Flush() error {
	if len(c.queued) == 0 {
		return nil
	}
	c.vec = c.vec[:0]
	p := 0
	// Frames without a payload (a batch of acknowledgements) lie one
	// after another in the arena: one piece for all of them.
	contiguous := false // the last piece in vec ends where the arena's next frame starts
	for _, f := range c.queued {
		if contiguous {
			last := &c.vec[len(c.vec)-1]
			*last = (*last)[:len(*last)+f.hi-f.lo]
		} else {
			c.vec = append(c.vec, c.arena[f.lo:f.hi])
		}
		c.vec = append(c.vec, c.qparts[p:p+f.parts]...)
		p += f.parts
		contiguous = f.parts == 0
	}
	var err error
	if c.flush != nil {
		err = c.writeEncrypted(c.vec)
	} else if len(c.vec) == 1 {
		_, err = c.wc.Write(c.vec[0])
	} else if n := vecLen(c.vec); n <= CopyBelow {
		c.joined = c.joined[:0]
		for _, v := range c.vec {
			c.joined = append(c.joined, v...)
		}
		_, err = c.wc.Write(c.joined)
	} else {
		c.bufs = c.vec
		_, err = c.bufs.WriteTo(c.wc)
	}
	// No reference to the callers' memory stays behind.
	clear(c.vec)
	clear(c.qparts)
	c.arena, c.queued, c.qparts = c.arena[:0], c.queued[:0], c.qparts[:0]
	return err
}

// ReadHeader reads the next frame's header and metadata. The metadata slice
// is valid until the next ReadHeader. The payload (Header.Payload bytes)
// must then be read with ReadPayload or skipped with Discard.
func (c *Conn) ReadHeader() (Header, []byte, error) {
	if c.left != 0 {
		return Header{}, nil, fmt.Errorf("framing: %d payload bytes of the last frame not read", c.left)
	}
	if _, err := io.ReadFull(c.r, c.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Header{}, nil, fmt.Errorf("%w: truncated header: %v", ErrFrame, err)
		}
		return Header{}, nil, err
	}
	h, err := ParseHeader(c.hdr[:])
	if err != nil {
		return Header{}, nil, err
	}
	if c.helloOnly && (h.MetaLen > maxHelloMeta || h.Payload != 0) {
		return Header{}, nil, fmt.Errorf("%w: %v frame of %d+%d bytes during the handshake (at most %d of metadata, no payload)",
			ErrFrame, h.Kind, h.MetaLen, h.Payload, maxHelloMeta)
	}
	if cap(c.meta) < int(h.MetaLen) {
		c.meta = make([]byte, h.MetaLen)
	}
	c.meta = c.meta[:h.MetaLen]
	if _, err := io.ReadFull(c.r, c.meta); err != nil {
		return Header{}, nil, fmt.Errorf("%w: truncated metadata (%d bytes): %v", ErrFrame, h.MetaLen, eofAsUnexpected(err))
	}
	c.left = int(h.Payload)
	return h, c.meta, nil
}

// ReadPayload reads the current frame's payload into dst, which must be
// exactly as long as the header said.
func (c *Conn) ReadPayload(dst []byte) error {
	if len(dst) != c.left {
		return fmt.Errorf("framing: payload destination of %d bytes for a payload of %d", len(dst), c.left)
	}
	c.left = 0
	if len(dst) == 0 {
		return nil
	}
	if _, err := io.ReadFull(c.r, dst); err != nil {
		return fmt.Errorf("%w: truncated payload (%d bytes): %v", ErrFrame, len(dst), eofAsUnexpected(err))
	}
	return nil
}

// ReadPayloadSome reads what has arrived of the current frame's payload,
// up to len(dst) bytes (at least one; at most one read of the
// connection), into dst: a payload taken as it arrives, each part used
// while the rest is still on its way, without a system call more than
// reading it whole takes. dst must not run past the payload's end.
func (c *Conn) ReadPayloadSome(dst []byte) (int, error) {
	if len(dst) > c.left {
		return 0, fmt.Errorf("framing: payload piece of %d bytes with %d left", len(dst), c.left)
	}
	if len(dst) == 0 {
		return 0, nil
	}
	left := c.left
	c.left = 0 // a failed read leaves the connection unusable
	for {
		n, err := c.r.Read(dst)
		if n > 0 {
			c.left = left - n
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("%w: truncated payload (%d bytes left): %v", ErrFrame, left, eofAsUnexpected(err))
		}
	}
}

// PayloadLeft is how many bytes of the current frame's payload are still
// to be read.
func (c *Conn) PayloadLeft() int { return c.left }

// ReadPayloadInto reads the current frame's payload into the slices of
// dst in order (a scatter read: the pieces lie where their owner keeps
// them); their lengths must add up to the payload's.
func (c *Conn) ReadPayloadInto(dst [][]byte) error {
	n := 0
	for _, d := range dst {
		n += len(d)
	}
	if n != c.left {
		return fmt.Errorf("framing: payload destinations of %d bytes for a payload of %d", n, c.left)
	}
	c.left = 0
	for _, d := range dst {
		if len(d) == 0 {
			continue
		}
		if _, err := io.ReadFull(c.r, d); err != nil {
			return fmt.Errorf("%w: truncated payload (%d bytes): %v", ErrFrame, n, eofAsUnexpected(err))
		}
	}
	return nil
}

// Buffered is the number of bytes read from the connection and not yet
// taken by ReadHeader, ReadPayload or Discard.
func (c *Conn) Buffered() int { return c.r.Buffered() }

// FrameBuffered says whether the next frame (after the current one's
// payload) has been read from the connection already, whole, so that
// reading it will not wait for the peer: a server answering a pipeline's
// requests handles them all before it writes their answers together.
func (c *Conn) FrameBuffered() bool {
	n := c.r.Buffered() - c.left
	if n < HeaderSize {
		return false
	}
	b, err := c.r.Peek(c.left + HeaderSize)
	if err != nil {
		return false
	}
	b = b[c.left:]
	meta := int(binary.LittleEndian.Uint32(b[16:20]))
	payload := int(binary.LittleEndian.Uint32(b[20:24]))
	return meta <= MaxMeta && payload <= MaxPayload && n >= HeaderSize+meta+payload
}

// Discard skips the current frame's payload.
func (c *Conn) Discard() error {
	n := c.left
	c.left = 0
	if n == 0 {
		return nil
	}
	if _, err := c.r.Discard(n); err != nil {
		return fmt.Errorf("%w: truncated payload (%d bytes): %v", ErrFrame, n, eofAsUnexpected(err))
	}
	return nil
}

func eofAsUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ReadBuffer is a connection's read buffer. Frames are read through it, so
// the small frames of a pipeline (requests of 4 KB, acknowledgements) come
// many to a system call; a payload larger than what is buffered is read
// straight into its destination (bufio reads into the caller's slice when
// its own buffer is empty), after at most ReadBuffer bytes copied out of
// the buffer.
const ReadBuffer = 64 << 10

// SocketBuffer is the send and receive buffer a framed Unix socket asks
// for. A Unix stream socket's default (net.core.wmem_default, about
// 208 KB) caps what a writer can hand over before the reader has drained
// it, so a 1 MB tensor would cross in five rounds of wake-ups; TCP's
// buffers grow by themselves (autotuning). The kernel caps the request at
// net.core.wmem_max and rmem_max.
const SocketBuffer = 4 << 20

// Tune sets a new connection's options: no Nagle delay on TCP (a frame is
// one writev: nothing is gained by waiting), large buffers on a Unix
// socket.
func Tune(nc net.Conn) {
	switch c := nc.(type) {
	case *net.TCPConn:
		_ = c.SetNoDelay(true)
	case *net.UnixConn:
		_ = c.SetWriteBuffer(SocketBuffer)
		_ = c.SetReadBuffer(SocketBuffer)
	}
}
