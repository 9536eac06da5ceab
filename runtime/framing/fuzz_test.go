package framing

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/pspb"
)

// memConn is a net.Conn that reads from a byte slice (the decoder's input).
type memConn struct {
	net.Conn
	r *bytes.Reader
}

func (c memConn) Read(p []byte) (int, error)      { return c.r.Read(p) }
func (c memConn) Write(p []byte) (int, error)     { return len(p), nil }
func (c memConn) Close() error                    { return nil }
func (c memConn) SetDeadline(time.Time) error     { return nil }
func (c memConn) SetReadDeadline(time.Time) error { return nil }

// FuzzDecode feeds arbitrary bytes to the frame decoder as a server reads
// them: frames until the first error. It must never panic, hang or ask for
// more memory than the bounds allow.
func FuzzDecode(f *testing.F) {
	seed := func(kind Kind, meta, payload []byte) []byte {
		b := make([]byte, HeaderSize)
		PutHeader(b, Header{Kind: kind, ID: 7, MetaLen: uint32(len(meta)), Payload: uint32(len(payload))})
		return append(append(b, meta...), payload...)
	}
	f.Add(seed(KindRequest, AppendRequest(nil, &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{1}}), make([]byte, 16)))
	f.Add(seed(KindResponse, AppendResponse(nil, &pspb.PSResponse{Version: 3, Error: "x"}), nil))
	f.Add(seed(KindHello, appendFields(nil, []byte("c"), make([]byte, nonceSize)), nil))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := NewConn(memConn{r: bytes.NewReader(in)})
		for range 16 {
			h, meta, err := c.ReadHeader()
			if err != nil {
				return
			}
			switch h.Kind {
			case KindRequest:
				var req pspb.PSRequest
				_ = DecodeRequest(meta, &req)
			case KindResponse:
				var resp pspb.PSResponse
				_ = DecodeResponse(meta, &resp)
			default:
				_, _ = parseFields(meta, 2)
				_, _ = parseFields(meta, 4)
			}
			if int(h.Payload) > len(in) {
				return // the read would fail: not worth allocating for
			}
			if h.Kind == KindRequest {
				// A push's payload as a server takes it: in pieces (of a
				// size the input picks), checked against what is left.
				// Odd ids read what has arrived, even ones fill each piece.
				dst := make([]byte, h.Payload)
				piece := 1 + int(h.ID%4096)
				for off := 0; off < len(dst); {
					next := min(off+piece, len(dst))
					if h.ID%2 == 1 {
						n, err := c.ReadPayloadSome(dst[off:next])
						if err != nil {
							return
						}
						if n < 1 || n > next-off {
							t.Fatalf("ReadPayloadSome read %d bytes into %d", n, next-off)
						}
						next = off + n
					} else {
						for got := off; got < next; {
							n, err := c.ReadPayloadSome(dst[got:next])
							if err != nil {
								return
							}
							got += n
						}
					}
					if c.PayloadLeft() != len(dst)-next {
						t.Fatalf("%d payload bytes left after %d of %d", c.PayloadLeft(), next, len(dst))
					}
					off = next
				}
				if _, err := c.ReadPayloadSome(make([]byte, 1)); err == nil {
					t.Fatal("a payload piece past the frame's end was read")
				}
				continue
			}
			if err := c.ReadPayload(make([]byte, h.Payload)); err != nil {
				return
			}
		}
	})
}
