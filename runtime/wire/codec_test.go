package wire

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/pspb"
)

func codecUnderTest(t testing.TB) encoding.CodecV2 {
	c := encoding.GetCodecV2(Name)
	if c == nil {
		t.Fatal("codec not registered")
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	c := codecUnderTest(t)
	for _, n := range []int{0, 1, 3, 4096, 1 << 20} {
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(i) * 0.5
		}
		in := &pspb.PSRequest{Id: 7, Op: pspb.Op_OP_PUSH_PULL, Worker: 3, Progress: -1,
			Blocks: []uint32{1, 2}, RowKeys: []uint64{9}, Data: AsBytes(vals)}
		out, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Data) != n*4 {
			t.Fatalf("Marshal changed the payload of the message")
		}
		var got pspb.PSRequest
		if err := c.Unmarshal(out, &got); err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if !proto.Equal(in, &got) {
			t.Fatalf("n=%d: round trip differs", n)
		}
		fs := AsFloats(got.Data)
		for i := range fs {
			if fs[i] != vals[i] {
				t.Fatalf("n=%d: value %d = %v; want %v", n, i, fs[i], vals[i])
			}
		}
	}
}

func TestFallbackToProto(t *testing.T) {
	c := codecUnderTest(t)
	in := &pspb.StatsRequest{}
	out, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var got pspb.StatsRequest
	if err := c.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
}

func TestUnmarshalRejectsGarbage(t *testing.T) {
	c := codecUnderTest(t)
	for _, b := range [][]byte{{}, {1, 2}, {0xff, 0xff, 0xff, 0x7f, 1}, {2, 0, 0, 0, 0xff, 0xff}} {
		var got pspb.PSResponse
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err == nil {
			t.Errorf("Unmarshal(%v) accepted garbage", b)
		}
	}
}

func FuzzUnmarshal(f *testing.F) {
	c := codecUnderTest(f)
	seed, _ := c.Marshal(&pspb.PSResponse{Id: 1, Version: 2, Data: []byte{1, 2, 3, 4}})
	f.Add(seed.Materialize())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got pspb.PSResponse
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil {
			return
		}
		// Whatever decodes must encode to something that decodes the same.
		again, err := c.Marshal(&got)
		if err != nil {
			t.Fatal(err)
		}
		var got2 pspb.PSResponse
		if err := c.Unmarshal(again, &got2); err != nil || !proto.Equal(&got, &got2) {
			t.Fatalf("re-encoding differs: %v", err)
		}
		if !bytes.Equal(got.Data, got2.Data) {
			t.Fatal("payload differs")
		}
	})
}

func TestFloatsView(t *testing.T) {
	f := []float32{1, -2.5, 3e9}
	b := AsBytes(f)
	if len(b) != 12 {
		t.Fatalf("AsBytes len = %d; want 12", len(b))
	}
	g := AsFloats(b)
	for i := range f {
		if g[i] != f[i] {
			t.Errorf("AsFloats(AsBytes(f))[%d] = %v; want %v", i, g[i], f[i])
		}
	}
	// Unaligned input is converted, not misread.
	u := append([]byte{0}, b...)[1:]
	h := AsFloats(u)
	for i := range f {
		if h[i] != f[i] {
			t.Errorf("unaligned AsFloats[%d] = %v; want %v", i, h[i], f[i])
		}
	}
}
