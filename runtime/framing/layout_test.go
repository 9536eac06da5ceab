package framing

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kelpie/kelpie/proto/pspb"
)

// fill sets every field of m to a value other than its default, walking the
// descriptor: scalars, enums (the last value), repeated fields (three
// elements), maps (one entry), nested messages (filled in turn). Of each
// oneof it sets the member numbered variant modulo its size, and it
// reports whether some oneof has a member after that one (another variant
// is needed to cover it). seed varies the values.
func fill(m protoreflect.Message, variant, seed int) (more bool) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
			k := variant % o.Fields().Len()
			if o.Fields().Get(k) != fd {
				continue
			}
			more = more || variant+1 < o.Fields().Len()
		}
		n := seed + int(fd.Number())
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			mp.Set(value(fd.MapKey(), n).MapKey(), elem(m, fd.MapValue(), n, variant))
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := range 3 {
				if fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind {
					e := l.NewElement()
					fill(e.Message(), variant, n+j)
					l.Append(e)
				} else {
					l.Append(value(fd, n*3+j))
				}
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			more = fill(m.Mutable(fd).Message(), variant, n) || more
		default:
			m.Set(fd, value(fd, n))
		}
	}
	return more
}

// elem is a map value of fd's kind.
func elem(m protoreflect.Message, fd protoreflect.FieldDescriptor, n, variant int) protoreflect.Value {
	if fd.Kind() == protoreflect.MessageKind {
		v := m.NewField(fd.ContainingMessage().Fields().ByNumber(2)).Map().NewValue()
		fill(v.Message(), variant, n)
		return v
	}
	return value(fd, n)
}

// value is a scalar of fd's kind that is not its default, and differs with n.
func value(fd protoreflect.FieldDescriptor, n int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		vs := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vs.Get(vs.Len() - 1).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(-int32(1000 + n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-(1<<40 + int64(n)))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(1<<31 + uint32(n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(1<<63 + uint64(n))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(0.5 + float32(n))
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(0.25 + float64(n))
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s %d", fd.Name(), n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(strings.Repeat(string(fd.Name()), 3)))
	}
	panic(fmt.Sprintf("field %s: kind %v has no test value", fd.FullName(), fd.Kind()))
}

// roundTrip sends msg as one frame of kind (its id in the header, its data as
// the payload, the rest in the layout of meta.go) and decodes what arrives
// into a new message, as the server and the client do.
func roundTrip[M proto.Message](t *testing.T, kind Kind, msg M, id uint64, data []byte, encode func([]byte, M) []byte, decode func([]byte, M) error, fresh func() M) M {
	t.Helper()
	a, b := pipe(t)
	errc := make(chan error, 1)
	go func() { errc <- a.WriteFrame(kind, id, encode(nil, msg), data) }()
	h, meta, err := b.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	got := fresh()
	if err := decode(meta, got); err != nil {
		t.Fatalf("decoding %v: %v", msg, err)
	}
	payload := make([]byte, h.Payload)
	if err := b.ReadPayload(payload); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	r := got.ProtoReflect()
	if h.ID != 0 {
		r.Set(r.Descriptor().Fields().ByName("id"), protoreflect.ValueOfUint64(h.ID))
	}
	if len(payload) > 0 {
		r.Set(r.Descriptor().Fields().ByName("data"), protoreflect.ValueOfBytes(payload))
	}
	return got
}

// differ names the fields of sent that did not arrive as they were sent ("" when
// the messages are equal).
func differ(sent, got proto.Message) string {
	if proto.Equal(sent, got) {
		return ""
	}
	a, b := sent.ProtoReflect(), got.ProtoReflect()
	var out []string
	fields := a.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if va, vb := a.Get(fd), b.Get(fd); a.Has(fd) != b.Has(fd) || !va.Equal(vb) {
			out = append(out, fmt.Sprintf("%s sent %v, received %v", fd.Name(), va, vb))
		}
	}
	return strings.Join(out, "; ")
}

// TestLayoutCarriesEveryField: a PSRequest and a PSResponse with every field
// of the proto set (from the descriptor, so a field added to proto/ps.proto
// is set too) cross the framed transport unchanged. A field the layout in
// meta.go does not carry arrives as its default, and this test fails until
// the layout carries it.
func TestLayoutCarriesEveryField(t *testing.T) {
	for variant := 0; ; variant++ {
		req := &pspb.PSRequest{}
		more := fill(req.ProtoReflect(), variant, 0)
		got := roundTrip(t, KindRequest, req, req.Id, req.Data, AppendRequest, DecodeRequest, func() *pspb.PSRequest { return &pspb.PSRequest{} })
		if d := differ(req, got); d != "" {
			t.Errorf("PSRequest through the framed layout: %s", d)
		}
		resp := &pspb.PSResponse{}
		more = fill(resp.ProtoReflect(), variant, 0) || more
		gotResp := roundTrip(t, KindResponse, resp, resp.Id, resp.Data, AppendResponse, DecodeResponse, func() *pspb.PSResponse { return &pspb.PSResponse{} })
		if d := differ(resp, gotResp); d != "" {
			t.Errorf("PSResponse through the framed layout: %s", d)
		}
		if !more {
			break
		}
	}
}

// TestFillSetsEveryField: fill leaves no field of either message at its
// default (else the round trip above could not see it dropped).
func TestFillSetsEveryField(t *testing.T) {
	for _, m := range []proto.Message{&pspb.PSRequest{}, &pspb.PSResponse{}} {
		r := m.ProtoReflect()
		fill(r, 0, 0)
		fields := r.Descriptor().Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
				continue // one member per variant
			}
			if !r.Has(fd) {
				t.Errorf("%s is not set", fd.FullName())
			}
		}
	}
}
