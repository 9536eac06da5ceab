package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// idxBytes builds an IDX file by hand (independently of EncodeIDX).
func idxBytes(typ byte, dims []uint32, data []byte) []byte {
	b := []byte{0, 0, typ, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, data...)
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestParseIDX(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    IDX
		wantErr string // substring; "" means success
	}{
		{"labels", idxBytes(IDXUint8, []uint32{3}, []byte{7, 0, 9}),
			IDX{Type: IDXUint8, Dims: []int{3}, Data: []byte{7, 0, 9}}, ""},
		{"images 2x2x3", idxBytes(IDXUint8, []uint32{2, 2, 3}, make([]byte, 12)),
			IDX{Type: IDXUint8, Dims: []int{2, 2, 3}, Data: make([]byte, 12)}, ""},
		{"int32 elements", idxBytes(IDXInt32, []uint32{2}, []byte{0, 0, 0, 1, 0, 0, 0, 2}),
			IDX{Type: IDXInt32, Dims: []int{2}, Data: []byte{0, 0, 0, 1, 0, 0, 0, 2}}, ""},
		{"zero-length dimension", idxBytes(IDXUint8, []uint32{0, 28, 28}, nil),
			IDX{Type: IDXUint8, Dims: []int{0, 28, 28}, Data: []byte{}}, ""},
		{"empty", nil, IDX{}, "too short"},
		{"short header", []byte{0, 0, 8}, IDX{}, "too short"},
		{"bad magic", []byte{1, 0, 8, 1, 0, 0, 0, 0}, IDX{}, "bad magic"},
		{"unknown type", []byte{0, 0, 0x42, 1, 0, 0, 0, 0}, IDX{}, "unknown element type"},
		{"no dims", []byte{0, 0, 8, 0}, IDX{}, "zero dimensions"},
		{"truncated dims", []byte{0, 0, 8, 3, 0, 0, 0, 1}, IDX{}, "declares 3 dimensions"},
		{"truncated data", idxBytes(IDXUint8, []uint32{4}, []byte{1, 2, 3}), IDX{}, "need 4 data bytes, have 3"},
		{"trailing data", idxBytes(IDXUint8, []uint32{2}, []byte{1, 2, 3}), IDX{}, "need 2 data bytes, have 3"},
		{"huge dims", idxBytes(IDXFloat64, []uint32{0xffffffff, 0xffffffff, 0xffffffff}, []byte{1}), IDX{}, "need over 2^62 data bytes, have 1"},
	}
	for _, tt := range tests {
		got, err := ParseIDX(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: ParseIDX(%x) error = %v; want one containing %q", tt.name, tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: ParseIDX(%x) error = %v; want nil", tt.name, tt.in, err)
			continue
		}
		if got.Type != tt.want.Type || !reflect.DeepEqual(got.Dims, tt.want.Dims) || !bytes.Equal(got.Data, tt.want.Data) {
			t.Errorf("%s: ParseIDX(%x) = %+v; want %+v", tt.name, tt.in, got, tt.want)
		}
		// DecodeIDX must agree, plain and gzip'd.
		for _, in := range [][]byte{tt.in, gz(t, tt.in)} {
			d, err := DecodeIDX(bytes.NewReader(in))
			if err != nil || d.Type != got.Type || !reflect.DeepEqual(d.Dims, got.Dims) || !bytes.Equal(d.Data, got.Data) {
				t.Errorf("%s: DecodeIDX(%x) = %+v, %v; want %+v", tt.name, in, d, err, got)
			}
		}
		// EncodeIDX is the inverse.
		var buf bytes.Buffer
		if err := EncodeIDX(&buf, got); err != nil || !bytes.Equal(buf.Bytes(), tt.in) {
			t.Errorf("%s: EncodeIDX(%+v) = %x, %v; want %x", tt.name, got, buf.Bytes(), err, tt.in)
		}
	}
}

func TestDecodeIDXErrors(t *testing.T) {
	good := idxBytes(IDXUint8, []uint32{2, 3}, []byte{1, 2, 3, 4, 5, 6})
	badGzip := gz(t, good)
	badGzip = badGzip[:len(badGzip)-6] // cut the trailer and part of the stream
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"empty", nil, "reading header"},
		{"truncated dims", good[:6], "reading 2 dimensions"},
		{"truncated data", good[:len(good)-1], "need 6 data bytes, have 5"},
		{"trailing data", append(append([]byte{}, good...), 0), "need 6 data bytes, have more"},
		{"truncated gzip", badGzip, "unexpected EOF"},
		{"gzip header only", []byte{0x1f, 0x8b}, "gzip"},
		{"oversized header", idxBytes(IDXUint8, []uint32{1 << 16, 1 << 16}, nil), "exceed"},
		{"gzip'd corrupt magic", gz(t, []byte{9, 9, 9, 9}), "bad magic"},
	}
	for _, tt := range tests {
		_, err := DecodeIDX(bytes.NewReader(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: DecodeIDX(%x) error = %v; want one containing %q", tt.name, tt.in, err, tt.wantErr)
		}
	}
}

func FuzzIDX(f *testing.F) {
	f.Add(idxBytes(IDXUint8, []uint32{3}, []byte{1, 2, 3}))
	f.Add(idxBytes(IDXUint8, []uint32{2, 2, 2}, make([]byte, 8)))
	f.Add(idxBytes(IDXFloat64, []uint32{1}, make([]byte, 8)))
	f.Add(idxBytes(IDXInt16, []uint32{0xffffffff, 2}, nil))
	f.Add(gz(f, idxBytes(IDXUint8, []uint32{2}, []byte{4, 5})))
	f.Add([]byte{0, 0, 8})
	f.Fuzz(func(t *testing.T, in []byte) {
		x, err := ParseIDX(in)
		d, derr := DecodeIDX(bytes.NewReader(in))
		if err == nil {
			size := elemSize(x.Type)
			for _, n := range x.Dims {
				size *= n
			}
			if size != len(x.Data) {
				t.Fatalf("ParseIDX(%x) = dims %v with %d data bytes", in, x.Dims, len(x.Data))
			}
			var buf bytes.Buffer
			if err := EncodeIDX(&buf, x); err != nil || !bytes.Equal(buf.Bytes(), in) {
				t.Fatalf("EncodeIDX(ParseIDX(%x)) = %x, %v", in, buf.Bytes(), err)
			}
			// Plain (non-gzip) input must decode identically from a stream.
			if len(in) < 2 || in[0] != 0x1f {
				if derr != nil || !bytes.Equal(d.Data, x.Data) || !reflect.DeepEqual(d.Dims, x.Dims) {
					t.Fatalf("DecodeIDX(%x) = %+v, %v; ParseIDX gave %+v", in, d, derr, x)
				}
			}
		}
	})
}
