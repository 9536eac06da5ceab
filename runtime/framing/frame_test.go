package framing

import (
	"bytes"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/proto/pspb"
)

// pipe is a connected pair of framed loopback TCP connections.
func pipe(t testing.TB) (*Conn, *Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	a, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, ok := <-acc
	if !ok {
		t.Fatal("accept failed")
	}
	ca, cb := NewConn(a), NewConn(b)
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}

func TestRequestRoundTrip(t *testing.T) {
	for _, req := range []*pspb.PSRequest{
		{Op: pspb.Op_OP_PUSH, Worker: 3, Progress: 7, Blocks: []uint32{1, 4, 9}, AssignmentVersion: 2},
		{Op: pspb.Op_OP_PULL, Worker: 0, Progress: -1, NoReplyData: true},
		{Op: pspb.Op_OP_PUSH_PULL, Worker: 1, Progress: 1 << 40, RowKeys: []uint64{5, 1 << 50}, PullRowKeys: []uint64{2}},
		{Op: pspb.Op_OP_JOIN, Worker: 2, Progress: 12},
	} {
		m := AppendRequest(nil, req)
		got := &pspb.PSRequest{Blocks: []uint32{99}} // reused slices are overwritten
		if err := DecodeRequest(m, got); err != nil {
			t.Fatalf("DecodeRequest(%v): %v", req, err)
		}
		if !reflect.DeepEqual(got.Blocks, req.Blocks) || !reflect.DeepEqual(got.RowKeys, req.RowKeys) ||
			!reflect.DeepEqual(got.PullRowKeys, req.PullRowKeys) || got.Op != req.Op || got.Worker != req.Worker ||
			got.Progress != req.Progress || got.AssignmentVersion != req.AssignmentVersion || got.NoReplyData != req.NoReplyData {
			t.Errorf("DecodeRequest(AppendRequest(%v)) = %v", req, got)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, resp := range []*pspb.PSResponse{
		{Version: 4, Delayed: true, HeldSeconds: 0.25},
		{Version: 1, Dropped: true},
		{Error: "server s: block 3 is not here", Code: 9},
	} {
		var got pspb.PSResponse
		if err := DecodeResponse(AppendResponse(nil, resp), &got); err != nil {
			t.Fatalf("DecodeResponse(%v): %v", resp, err)
		}
		if got.Version != resp.Version || got.Delayed != resp.Delayed || got.Dropped != resp.Dropped ||
			got.HeldSeconds != resp.HeldSeconds || got.Error != resp.Error || got.Code != resp.Code {
			t.Errorf("DecodeResponse(AppendResponse(%v)) = %v", resp, &got)
		}
	}
}

func TestFrameRoundTrip(t *testing.T) {
	a, b := pipe(t)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<14)
	req := &pspb.PSRequest{Op: pspb.Op_OP_PUSH, Blocks: []uint32{1, 2}}
	go func() { _ = a.WriteFrame(KindRequest, 42, AppendRequest(a.MetaBuf(), req), payload) }()
	h, meta, err := b.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	if h.Kind != KindRequest || h.ID != 42 || int(h.Payload) != len(payload) {
		t.Fatalf("ReadHeader = %+v", h)
	}
	var got pspb.PSRequest
	if err := DecodeRequest(meta, &got); err != nil {
		t.Fatal(err)
	}
	// A scatter read into two pieces.
	p1, p2 := make([]byte, 1000), make([]byte, len(payload)-1000)
	if err := b.ReadPayloadInto([][]byte{p1, p2}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(p1, p2...), payload) {
		t.Error("payload differs after a round trip")
	}
}

// TestGatherWrite: a payload written in pieces (empty ones among them)
// arrives as one, and WriteFrame keeps no reference to the pieces.
func TestGatherWrite(t *testing.T) {
	a, b := pipe(t)
	pieces := [][]byte{[]byte("abc"), nil, bytes.Repeat([]byte{7}, 70000), {}, []byte("z")}
	want := bytes.Join(pieces, nil)
	errc := make(chan error, 1)
	go func() {
		errc <- a.WriteFrameV(KindResponse, 9, AppendResponse(a.MetaBuf(), &pspb.PSResponse{Version: 2}), pieces)
	}()
	h, _, err := b.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, h.Payload)
	if err := b.ReadPayload(got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if h.ID != 9 || !bytes.Equal(got, want) {
		t.Errorf("gathered frame %+v carries %d bytes; want id 9 and the %d bytes of the pieces", h, len(got), len(want))
	}
	for i, v := range a.vec {
		if v != nil {
			t.Errorf("after the write the connection still refers to piece %d", i)
		}
	}
}

// TestBadFrames: every malformed header is an error naming what was wrong,
// and a truncated frame ends in an error, not a hang.
func TestBadFrames(t *testing.T) {
	good := make([]byte, HeaderSize)
	PutHeader(good, Header{Kind: KindRequest, ID: 1})
	edit := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name, want string
		b          []byte
	}{
		{"magic", "magic", edit(func(b []byte) { b[0] = 'X' })},
		{"version", "version 2", edit(func(b []byte) { b[4] = 2 })},
		{"kind", "unknown kind", edit(func(b []byte) { b[5] = 77 })},
		{"flags", "flags", edit(func(b []byte) { b[6] = 1 })},
		{"meta length", "metadata length", edit(func(b []byte) { PutHeader(b, Header{Kind: KindRequest, MetaLen: MaxMeta + 1}) })},
		{"payload length", "payload length", edit(func(b []byte) { PutHeader(b, Header{Kind: KindRequest, Payload: MaxPayload + 1}) })},
		{"short", "header of 3 bytes", good[:3]},
	} {
		_, err := ParseHeader(tc.b)
		if err == nil || !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseHeader(%s) = %v; want an ErrFrame naming %q", tc.name, err, tc.want)
		}
	}

	// Truncated: a header announcing 100 payload bytes, then the peer goes.
	a, b := pipe(t)
	hdr := make([]byte, HeaderSize)
	PutHeader(hdr, Header{Kind: KindRequest, ID: 1, Payload: 100})
	_, _ = a.NetConn().Write(append(hdr, 1, 2, 3))
	a.Close()
	if _, _, err := b.ReadHeader(); err != nil {
		t.Fatal(err)
	}
	_ = b.NetConn().SetDeadline(time.Now().Add(time.Minute)) // a bound, never reached on success
	if err := b.ReadPayload(make([]byte, 100)); !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("ReadPayload of a truncated frame = %v; want a truncated-payload ErrFrame", err)
	}
}

func TestHandshake(t *testing.T) {
	for _, tc := range []struct {
		name           string
		client, server SharedSecret
		ok             bool
	}{
		{"same secret", SharedSecret("s3cret"), SharedSecret("s3cret"), true},
		{"no secret", nil, nil, true},
		{"wrong secret", SharedSecret("guess"), SharedSecret("s3cret"), false},
		{"client without", nil, SharedSecret("s3cret"), false},
		{"server without", SharedSecret("s3cret"), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pipe(t)
			srv := make(chan error, 1)
			go func() { srv <- ServerHandshake(b, tc.server, nil, Hello{HostID: "h", Unix: "/tmp/x.sock"}) }()
			hello, err := ClientHandshake(a, tc.client, nil)
			serr := <-srv
			if tc.ok {
				if err != nil || serr != nil {
					t.Fatalf("handshake: client %v, server %v", err, serr)
				}
				if hello.HostID != "h" || hello.Unix != "/tmp/x.sock" {
					t.Errorf("hello = %+v", hello)
				}
				return
			}
			if err == nil {
				t.Errorf("client accepted: server said %v", serr)
			}
		})
	}
}

// TestHandshakeBoundsStrangers: before a peer has proven the secret, a
// frame announcing more than a hello's metadata or any payload is refused
// before anything is allocated for it.
func TestHandshakeBoundsStrangers(t *testing.T) {
	for _, h := range []Header{
		{Kind: KindHello, MetaLen: MaxMeta},
		{Kind: KindHello, MetaLen: 10, Payload: 1 << 20},
	} {
		a, b := pipe(t)
		srv := make(chan error, 1)
		go func() { srv <- ServerHandshake(b, SharedSecret("s"), nil, Hello{}) }()
		hdr := make([]byte, HeaderSize)
		PutHeader(hdr, h)
		if _, err := a.NetConn().Write(hdr); err != nil {
			t.Fatal(err)
		}
		err := <-srv
		if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), "during the handshake") {
			t.Errorf("handshake after a hello of %d+%d bytes = %v; want a refusal naming the handshake", h.MetaLen, h.Payload, err)
		}
		if cap(b.meta) > maxHelloMeta {
			t.Errorf("the server allocated %d bytes of metadata for a stranger", cap(b.meta))
		}
	}
}

func TestMuxSplitsGRPCAndFrames(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	framed := make(chan string, 1)
	m := NewMux(lis, func(c net.Conn) {
		defer c.Close()
		h, _, err := NewConn(c).ReadHeader()
		framed <- func() string {
			if err != nil {
				return err.Error()
			}
			return h.Kind.String()
		}()
	}, t.Logf)
	defer m.Close()
	other := make(chan []byte, 1)
	go func() {
		c, err := m.GRPC().Accept()
		if err != nil {
			other <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(io.LimitReader(c, 8))
		other <- b
	}()
	c1, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	_, _ = c1.Write([]byte("PRI * HT"))
	if got := string(<-other); got != "PRI * HT" {
		t.Errorf("the gRPC side read %q; want the bytes sent", got)
	}
	c2, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := NewConn(c2).WriteFrame(KindHello, 0, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := <-framed; got != "hello" {
		t.Errorf("the framed side read %q; want hello", got)
	}
}

// TestMetaBufKeepsItsGrowth: metadata built on MetaBuf that outgrew it
// becomes the next MetaBuf (no regrowth per frame); metadata from
// elsewhere stays its owner's.
func TestMetaBufKeepsItsGrowth(t *testing.T) {
	a, b := pipe(t)
	go func() {
		for {
			h, _, err := b.ReadHeader()
			if err != nil || b.Discard() != nil || h.ID == 3 {
				return
			}
		}
	}()
	keys := make([]uint64, 2000) // a pull of 2,000 sparse rows: 16 KB of metadata
	meta := AppendRequest(a.MetaBuf(), &pspb.PSRequest{Op: pspb.Op_OP_PULL, PullRowKeys: keys})
	if err := a.WriteFrame(KindRequest, 1, meta, nil); err != nil {
		t.Fatal(err)
	}
	if got := cap(a.wbuf); got < len(meta) {
		t.Errorf("MetaBuf after a %d-byte metadata has capacity %d; want it kept", len(meta), got)
	}
	own := make([]byte, 0, 1<<20)
	own = append(own, AppendRequest(nil, &pspb.PSRequest{Op: pspb.Op_OP_PULL})...)
	if err := a.WriteFrame(KindRequest, 2, own, nil); err != nil {
		t.Fatal(err)
	}
	if cap(a.wbuf) == cap(own) {
		t.Error("a caller's own metadata buffer became MetaBuf")
	}
	_ = a.WriteFrame(KindRequest, 3, nil, nil)
}

// TestQueueBatch: frames queued together go out with one Flush, in order,
// those without a payload merged into one piece; and the reader can tell
// whether the next frame is whole in its buffer.
func TestQueueBatch(t *testing.T) {
	a, b := pipe(t)
	big := bytes.Repeat([]byte{5}, 3000)
	frames := []struct {
		id            uint64
		meta, payload string
	}{{1, "a", ""}, {2, "", ""}, {3, "m", string(big)}, {4, "b", ""}, {5, "", "tail"}}
	for _, f := range frames {
		var payload [][]byte
		if f.payload != "" {
			payload = [][]byte{[]byte(f.payload)}
		}
		if err := a.Queue(KindResponse, f.id, []byte(f.meta), payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		h, meta, err := b.ReadHeader()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, h.Payload)
		if err := b.ReadPayload(got); err != nil {
			t.Fatal(err)
		}
		if h.ID != f.id || string(meta) != f.meta || string(got) != f.payload {
			t.Errorf("frame %d = id %d, meta %q, %d payload bytes; want id %d, meta %q, %d bytes", i, h.ID, meta, len(got), f.id, f.meta, len(f.payload))
		}
	}
	if b.FrameBuffered() {
		t.Error("FrameBuffered() = true with nothing sent")
	}
	errc := make(chan error, 1)
	go func() { errc <- a.WriteFrame(KindRequest, 6, nil, []byte("next")) }()
	if _, err := b.r.Peek(HeaderSize + 4); err != nil { // until the frame is in
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !b.FrameBuffered() {
		t.Error("FrameBuffered() = false with the whole next frame read")
	}
}
