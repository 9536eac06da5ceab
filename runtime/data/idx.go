package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// IDX element types (the third byte of the magic number).
const (
	IDXUint8   byte = 0x08
	IDXInt8    byte = 0x09
	IDXInt16   byte = 0x0B
	IDXInt32   byte = 0x0C
	IDXFloat32 byte = 0x0D
	IDXFloat64 byte = 0x0E
)

// MaxIDXBytes bounds the data section DecodeIDX will allocate, so a corrupt header cannot
// request an absurd allocation. MNIST's largest file holds 47 MB.
const MaxIDXBytes = 1 << 30

// IDX is a decoded IDX file: an n-dimensional array of big-endian elements.
type IDX struct {
	Type byte   // element type, one of the IDX* constants
	Dims []int  // sizes of the dimensions, outermost first
	Data []byte // raw elements, big-endian, len = product(Dims) * element size
}

// elemSize returns the byte size of an IDX element type, or 0 if the type is unknown.
func elemSize(t byte) int {
	switch t {
	case IDXUint8, IDXInt8:
		return 1
	case IDXInt16:
		return 2
	case IDXInt32, IDXFloat32:
		return 4
	case IDXFloat64:
		return 8
	}
	return 0
}

// idxHeader checks the 4-byte magic number and returns the element type and dimension count.
func idxHeader(magic []byte) (typ byte, ndims int, err error) {
	if magic[0] != 0 || magic[1] != 0 {
		return 0, 0, fmt.Errorf("idx: bad magic %#x: first two bytes must be zero", magic)
	}
	typ, ndims = magic[2], int(magic[3])
	if elemSize(typ) == 0 {
		return 0, 0, fmt.Errorf("idx: unknown element type %#02x", typ)
	}
	if ndims == 0 {
		return 0, 0, errors.New("idx: zero dimensions")
	}
	return typ, ndims, nil
}

// idxDims decodes the dimension sizes and returns them with the byte size of the data section.
// The size saturates at maxIDXSize so that absurd headers cannot overflow it.
func idxDims(typ byte, raw []byte) ([]int, uint64) {
	dims := make([]int, len(raw)/4)
	size := uint64(elemSize(typ))
	for i := range dims {
		d := uint64(binary.BigEndian.Uint32(raw[4*i:]))
		dims[i] = int(d)
		if d != 0 && size > maxIDXSize/d {
			size = maxIDXSize
		} else {
			size = min(size*d, maxIDXSize)
		}
	}
	return dims, size
}

// maxIDXSize is where idxDims saturates; far above any real file.
const maxIDXSize = 1 << 62

// sizeError reports a data section that does not match the header.
func sizeError(dims []int, want uint64, have string) error {
	need := fmt.Sprint(want)
	if want == maxIDXSize {
		need = "over 2^62"
	}
	return fmt.Errorf("idx: dimensions %v need %s data bytes, have %s", dims, need, have)
}

// ParseIDX decodes an uncompressed IDX file held in memory. Data aliases raw. It never panics;
// a truncated, oversized or inconsistent input returns an error.
func ParseIDX(raw []byte) (IDX, error) {
	if len(raw) < 4 {
		return IDX{}, fmt.Errorf("idx: %d bytes is too short for a header", len(raw))
	}
	typ, ndims, err := idxHeader(raw[:4])
	if err != nil {
		return IDX{}, err
	}
	if len(raw) < 4+4*ndims {
		return IDX{}, fmt.Errorf("idx: header declares %d dimensions but the input ends at %d bytes", ndims, len(raw))
	}
	body := raw[4+4*ndims:]
	dims, size := idxDims(typ, raw[4:4+4*ndims])
	if size != uint64(len(body)) {
		return IDX{}, sizeError(dims, size, fmt.Sprint(len(body)))
	}
	return IDX{Type: typ, Dims: dims, Data: body}, nil
}

// DecodeIDX reads one IDX file from r, gunzipping it first if it starts with the gzip magic.
// The data section is allocated once from the header's dimensions (at most MaxIDXBytes) and
// the input must end exactly after it.
func DecodeIDX(r io.Reader) (IDX, error) {
	br := bufio.NewReader(r)
	if head, _ := br.Peek(2); bytes.Equal(head, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return IDX{}, fmt.Errorf("idx: gzip: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	var magic [4]byte
	if _, err := io.ReadFull(br, magic[:]); err != nil {
		return IDX{}, fmt.Errorf("idx: reading header: %w", err)
	}
	typ, ndims, err := idxHeader(magic[:])
	if err != nil {
		return IDX{}, err
	}
	rawDims := make([]byte, 4*ndims)
	if _, err := io.ReadFull(br, rawDims); err != nil {
		return IDX{}, fmt.Errorf("idx: reading %d dimensions: %w", ndims, err)
	}
	dims, size := idxDims(typ, rawDims)
	if size > MaxIDXBytes {
		return IDX{}, fmt.Errorf("idx: dimensions %v exceed the %d-byte limit", dims, MaxIDXBytes)
	}
	// Trust the header for up to 64 MiB (all of MNIST) and grow beyond that only as bytes
	// arrive, so a short corrupt file cannot make us allocate a gigabyte.
	var buf bytes.Buffer
	buf.Grow(int(min(size, 64<<20)) + 1)
	n, err := io.Copy(&buf, io.LimitReader(br, int64(size)+1))
	if err != nil {
		return IDX{}, fmt.Errorf("idx: reading data: %w", err)
	}
	if n > int64(size) {
		return IDX{}, sizeError(dims, size, "more")
	}
	if n < int64(size) {
		return IDX{}, sizeError(dims, size, fmt.Sprint(n))
	}
	return IDX{Type: typ, Dims: dims, Data: buf.Bytes()}, nil
}

// EncodeIDX writes x in IDX format (uncompressed). Tests use it to build files; it is the exact
// inverse of ParseIDX.
func EncodeIDX(w io.Writer, x IDX) error {
	if elemSize(x.Type) == 0 {
		return fmt.Errorf("idx: unknown element type %#02x", x.Type)
	}
	if len(x.Dims) == 0 || len(x.Dims) > 255 {
		return fmt.Errorf("idx: %d dimensions, want 1..255", len(x.Dims))
	}
	head := make([]byte, 4+4*len(x.Dims))
	head[2], head[3] = x.Type, byte(len(x.Dims))
	for i, d := range x.Dims {
		if d < 0 || uint64(d) > 0xffffffff {
			return fmt.Errorf("idx: dimension %d out of range", d)
		}
		binary.BigEndian.PutUint32(head[4+4*i:], uint32(d))
	}
	if _, size := idxDims(x.Type, head[4:]); size != uint64(len(x.Data)) {
		return sizeError(x.Dims, size, fmt.Sprint(len(x.Data)))
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	_, err := w.Write(x.Data)
	return err
}
