// Package wire is kelpie's raw-bytes encoding of tensors: the gRPC codec
// (cluster.transport: grpc) that carries the tensor payload of
// parameter-server messages as raw bytes beside a small protobuf header,
// helpers that view float32 tensors as bytes, and the pooled, aligned
// buffers payloads are received into (the framed transport, runtime/framing,
// reads into them too). The framed transport itself, frames and handshake,
// is runtime/framing.
//
// The codec is registered under the content-subtype "kelpie". A message whose
// type implements Payloader is written as
//
//	[4-byte little-endian header length][protobuf header][pad to 4][payload]
//
// so the payload is never marshalled float by float, is handed to gRPC without
// a copy on send, and lands 4-byte aligned on receive, where it can be read
// as []float32 in place. Payloads of PoolThreshold bytes and more are
// received into pooled buffers that the code done with them may give back
// with Recycle. Any other message falls back to the standard
// protobuf codec, and clients that do not ask for "kelpie" (grpcurl, health
// checks) get plain protobuf from the same server.
package wire

import (
	"encoding/binary"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protobuf "google.golang.org/protobuf/proto"
)

// Name is the gRPC content-subtype of the codec.
const Name = "kelpie"

// Payloader is a protobuf message with a bulk payload carried outside the
// protobuf encoding. PSRequest and PSResponse satisfy it (proto/pspb).
type Payloader interface {
	protobuf.Message
	GetData() []byte
	SetData([]byte)
}

// CallOption selects the codec on a client call or stream.
func CallOption() grpc.CallOption { return grpc.CallContentSubtype(Name) }

type codec struct{ fallback encoding.CodecV2 }

func init() {
	encoding.RegisterCodecV2(codec{fallback: encoding.GetCodecV2(proto.Name)})
}

func (codec) Name() string { return Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	p, ok := v.(Payloader)
	if !ok {
		return c.fallback.Marshal(v)
	}
	payload := p.GetData()
	// Marshal the header with the payload detached; restore it afterwards.
	p.SetData(nil)
	hdr, err := protobuf.MarshalOptions{}.MarshalAppend(make([]byte, 4, 64), p)
	p.SetData(payload)
	if err != nil {
		return nil, fmt.Errorf("wire: marshal header: %v", err)
	}
	binary.LittleEndian.PutUint32(hdr[:4], uint32(len(hdr)-4))
	for len(hdr)%4 != 0 {
		hdr = append(hdr, 0)
	}
	out := mem.BufferSlice{mem.SliceBuffer(hdr)}
	if len(payload) > 0 {
		out = append(out, sendBuffer(payload))
	}
	return out, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	p, ok := v.(Payloader)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	if total := data.Len(); total >= PoolThreshold {
		return unmarshalPooled(data, total, p)
	}
	buf := data.Materialize()
	if len(buf) < 4 {
		return fmt.Errorf("wire: message of %d bytes is shorter than its header length", len(buf))
	}
	n := int(binary.LittleEndian.Uint32(buf[:4]))
	if n > len(buf)-4 {
		return fmt.Errorf("wire: header length %d exceeds message of %d bytes", n, len(buf))
	}
	if err := protobuf.Unmarshal(buf[4:4+n], p); err != nil {
		return fmt.Errorf("wire: unmarshal header: %v", err)
	}
	off := 4 + n
	if r := off % 4; r != 0 {
		off += 4 - r
	}
	if off > len(buf) {
		return fmt.Errorf("wire: header padding runs past the message")
	}
	if off < len(buf) {
		p.SetData(buf[off:])
	} else {
		p.SetData(nil)
	}
	return nil
}

// unmarshalPooled decodes a large message: the header goes into a small
// slice and the payload into a pooled buffer of its own, which starts at the
// buffer's start (aligned, and recyclable with Recycle). It copies each
// payload byte once, as Materialize would, but into memory that is neither
// freshly allocated nor zeroed when it comes from the pool.
func unmarshalPooled(data mem.BufferSlice, total int, p Payloader) error {
	r := data.Reader()
	defer r.Close()
	var lb [4]byte
	if _, err := io.ReadFull(r, lb[:]); err != nil {
		return fmt.Errorf("wire: read header length: %v", err)
	}
	n := int(binary.LittleEndian.Uint32(lb[:]))
	if n > total-4 {
		return fmt.Errorf("wire: header length %d exceeds message of %d bytes", n, total)
	}
	off := 4 + n
	if rem := off % 4; rem != 0 {
		off += 4 - rem
	}
	if off > total {
		return fmt.Errorf("wire: header padding runs past the message")
	}
	hdr := make([]byte, off-4)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return fmt.Errorf("wire: read header: %v", err)
	}
	if err := protobuf.Unmarshal(hdr[:n], p); err != nil {
		return fmt.Errorf("wire: unmarshal header: %v", err)
	}
	if off == total {
		p.SetData(nil)
		return nil
	}
	payload := getBuffer(total - off)
	if _, err := io.ReadFull(r, payload); err != nil {
		Recycle(payload)
		return fmt.Errorf("wire: read payload: %v", err)
	}
	p.SetData(payload)
	return nil
}
