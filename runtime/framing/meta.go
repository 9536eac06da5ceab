package framing

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/kelpie/kelpie/proto/pspb"
)

// The metadata of a request and a response: the fields of pspb's
// PSRequest and PSResponse other than the payload, in a fixed binary layout
// that decodes into reused slices without allocating.
const (
	reqFixed  = 36
	respFixed = 28
)

const (
	reqNoReplyData = 1 << 0

	respDelayed = 1 << 0
	respDropped = 1 << 1
)

// AppendRequest appends the metadata of req (all but its Data) to b.
func AppendRequest(b []byte, req *pspb.PSRequest) []byte {
	var flags byte
	if req.NoReplyData {
		flags |= reqNoReplyData
	}
	b = append(b, byte(req.Op), flags, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(req.Worker))
	b = binary.LittleEndian.AppendUint64(b, uint64(req.Progress))
	b = binary.LittleEndian.AppendUint64(b, req.AssignmentVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(req.Blocks)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(req.RowKeys)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(req.PullRowKeys)))
	for _, id := range req.Blocks {
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	for _, k := range req.RowKeys {
		b = binary.LittleEndian.AppendUint64(b, k)
	}
	for _, k := range req.PullRowKeys {
		b = binary.LittleEndian.AppendUint64(b, k)
	}
	return b
}

// DecodeRequest decodes request metadata into req, reusing its slices. It
// sets every field but Id and Data.
func DecodeRequest(m []byte, req *pspb.PSRequest) error {
	if len(m) < reqFixed {
		return fmt.Errorf("%w: request metadata of %d bytes, want at least %d", ErrFrame, len(m), reqFixed)
	}
	op := pspb.Op(m[0])
	if _, ok := pspb.Op_name[int32(op)]; !ok || op == 0 {
		return fmt.Errorf("%w: request op %d unknown", ErrFrame, m[0])
	}
	if m[1]&^reqNoReplyData != 0 || m[2] != 0 || m[3] != 0 {
		return fmt.Errorf("%w: request flags %#x, reserved bits set", ErrFrame, m[1:4])
	}
	nb := uint64(binary.LittleEndian.Uint32(m[24:28]))
	nr := uint64(binary.LittleEndian.Uint32(m[28:32]))
	np := uint64(binary.LittleEndian.Uint32(m[32:36]))
	if want := reqFixed + 4*nb + 8*nr + 8*np; want != uint64(len(m)) {
		return fmt.Errorf("%w: request metadata of %d bytes for %d blocks, %d rows and %d pulled rows (%d bytes)",
			ErrFrame, len(m), nb, nr, np, want)
	}
	req.Op = op
	req.NoReplyData = m[1]&reqNoReplyData != 0
	req.Worker = int32(binary.LittleEndian.Uint32(m[4:8]))
	req.Progress = int64(binary.LittleEndian.Uint64(m[8:16]))
	req.AssignmentVersion = binary.LittleEndian.Uint64(m[16:24])
	p := m[reqFixed:]
	req.Blocks = req.Blocks[:0]
	for range nb {
		req.Blocks = append(req.Blocks, binary.LittleEndian.Uint32(p))
		p = p[4:]
	}
	req.RowKeys = decodeKeys(req.RowKeys[:0], p[:8*nr])
	p = p[8*nr:]
	req.PullRowKeys = decodeKeys(req.PullRowKeys[:0], p[:8*np])
	if nb == 0 {
		req.Blocks = nil
	}
	if nr == 0 {
		req.RowKeys = nil
	}
	if np == 0 {
		req.PullRowKeys = nil
	}
	return nil
}

func decodeKeys(dst []uint64, p []byte) []uint64 {
	for len(p) >= 8 {
		dst = append(dst, binary.LittleEndian.Uint64(p))
		p = p[8:]
	}
	return dst
}

// AppendResponse appends the metadata of resp (all but Id and Data) to b.
func AppendResponse(b []byte, resp *pspb.PSResponse) []byte {
	var flags byte
	if resp.Delayed {
		flags |= respDelayed
	}
	if resp.Dropped {
		flags |= respDropped
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(resp.Version))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(resp.HeldSeconds))
	b = binary.LittleEndian.AppendUint32(b, uint32(resp.Code))
	b = append(b, flags, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(resp.Error)))
	return append(b, resp.Error...)
}

// DecodeResponse decodes response metadata into resp. It sets every field
// but Id and Data.
func DecodeResponse(m []byte, resp *pspb.PSResponse) error {
	if len(m) < respFixed {
		return fmt.Errorf("%w: response metadata of %d bytes, want at least %d", ErrFrame, len(m), respFixed)
	}
	flags := m[20]
	if flags&^(respDelayed|respDropped) != 0 || m[21] != 0 || m[22] != 0 || m[23] != 0 {
		return fmt.Errorf("%w: response flags %#x, reserved bits set", ErrFrame, m[20:24])
	}
	n := uint64(binary.LittleEndian.Uint32(m[24:28]))
	if respFixed+n != uint64(len(m)) {
		return fmt.Errorf("%w: response metadata of %d bytes for an error of %d", ErrFrame, len(m), n)
	}
	held := math.Float64frombits(binary.LittleEndian.Uint64(m[8:16]))
	if math.IsNaN(held) || held < 0 {
		return fmt.Errorf("%w: response held seconds %v", ErrFrame, held)
	}
	resp.Version = int64(binary.LittleEndian.Uint64(m[0:8]))
	resp.HeldSeconds = held
	resp.Code = int32(binary.LittleEndian.Uint32(m[16:20]))
	resp.Delayed = flags&respDelayed != 0
	resp.Dropped = flags&respDropped != 0
	resp.Error = ""
	if n > 0 {
		resp.Error = string(m[respFixed:])
	}
	return nil
}
