package wire

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// littleEndian reports whether float32 memory can be viewed as wire bytes
// directly.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// AsBytes returns the little-endian byte form of f. On little-endian hosts it
// is a view of f's memory (no copy); elsewhere it is a converted copy.
func AsBytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
	}
	b := make([]byte, len(f)*4)
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(v))
	}
	return b
}

// AsFloats returns b as float32 values. On little-endian hosts, when b is
// 4-byte aligned (the codec guarantees it for payloads), it is a view of b's
// memory; otherwise a converted copy. len(b) must be a multiple of 4.
func AsFloats(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
	}
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return f
}
