package server

import (
	"sync"
	"sync/atomic"

	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/runtime/wire"
)

// A pull is answered from the parameters themselves: the response's payload
// is a list of views of the blocks' values, lent to the transport until it
// has written them (the framed transport writes them with one writev, no
// copy). A block whose values are lent and must change (a push, a commit)
// changes a copy instead and leaves the lent values to the responses still
// writing them (copy on write): updates never wait for a slow reader, and
// the copy is made only when an update meets a pull in flight.

// lease is one version of a block's values lent to responses.
type lease struct {
	// refs counts the block's own reference (while the values are still
	// the block's) and one per response writing them. Responses take
	// references under the server's lock and drop them without it.
	refs atomic.Int32
	vals []float32
}

// drop gives one reference back; the last one recycles the values (they
// are no longer the block's then).
func (l *lease) drop() {
	if l.refs.Add(-1) == 0 {
		wire.Recycle(wire.AsBytes(l.vals))
	}
}

// lend returns the block's values for a response to write and the lease
// that covers them. The caller holds the server's lock.
func (b *block) lend() *lease {
	if b.lent == nil {
		b.lent = &lease{vals: b.vals}
		b.lent.refs.Store(1)
	}
	b.lent.refs.Add(1)
	return b.lent
}

// mutable makes the block's values safe to change: if a response is still
// writing them, the block moves to a copy. The caller holds the server's
// lock.
func (b *block) mutable() {
	b.seq++ // the values or state are about to change
	l := b.lent
	if l == nil {
		return
	}
	b.lent = nil
	if l.refs.Load() == 1 {
		// Only the block's reference: no response holds the values, and
		// none can take them without the lock.
		return
	}
	vals := wire.AsFloats(wire.Buffer(4 * len(b.vals)))
	copy(vals, b.vals)
	b.vals, b.pooled = vals, true
	l.drop()
}

// Response is a response on its way to a worker: its payload is either
// Data or Parts, views of the parameters lent until Done, and a pooled
// buffer of gathered sparse rows.
type Response struct {
	*pspb.PSResponse
	// Parts is the payload in pieces, in order (Data is then nil).
	Parts  [][]byte
	leases []*lease
	pooled []byte

	partsBuf [2][]byte
	leaseBuf [1]*lease
	reusable bool // from newResponse: recycle takes it back once sent
}

func respond(r *pspb.PSResponse) *Response { return &Response{PSResponse: r} }

var responses = sync.Pool{New: func() any {
	return &Response{PSResponse: &pspb.PSResponse{}, reusable: true}
}}

// newResponse is a pooled response to id (its PSResponse with it). A
// session's outbox gives it back with recycle once it is sent; one
// returned elsewhere (a unary call's result) is simply not reused.
func newResponse(id uint64) *Response {
	r := responses.Get().(*Response)
	r.Id = id
	return r
}

// recycle gives a sent response from newResponse back to the pool (after
// Done); nothing may refer to it any more.
func (r *Response) recycle() {
	if !r.reusable {
		return
	}
	pb := r.PSResponse
	*pb = pspb.PSResponse{}
	*r = Response{PSResponse: pb, reusable: true}
	responses.Put(r)
}

// Done tells the response that its payload has been written (or never
// will be): the lent values and the pooled buffer go back.
func (r *Response) Done() {
	for i, l := range r.leases {
		l.drop()
		r.leases[i] = nil
	}
	r.leases, r.Parts = nil, nil
	if r.pooled != nil {
		wire.Recycle(r.pooled)
		r.pooled = nil
	}
}

// Flatten turns Parts into one Data buffer (for gRPC, whose messages are
// one slice) and calls Done. Data comes from wire.NewPayload: the codec
// recycles it once gRPC has written it.
func (r *Response) Flatten() {
	if r.Parts == nil {
		return
	}
	n := 0
	for _, p := range r.Parts {
		n += len(p)
	}
	data := wire.NewPayload(n)[:0]
	for _, p := range r.Parts {
		data = append(data, p...)
	}
	r.Data = data
	r.Done()
}

// payloadLen is the size of the response's payload in bytes.
func (r *Response) payloadLen() int {
	if r.Parts == nil {
		return len(r.Data)
	}
	n := 0
	for _, p := range r.Parts {
		n += len(p)
	}
	return n
}
