package server

import "sync"

// outbox holds one session's responses on their way out. The session's
// own goroutine writes the responses to its requests itself, once it has
// handled every request it has at hand (a pipeline's answers together, in
// one send), with no hand-off to another goroutine on the way: the reply
// to a lone request leaves from the goroutine that read it. Responses
// queued while the session's goroutine is elsewhere (waiting for the next
// request: a delayed pull released by another worker's push, a held
// request let go) wake the session's sender goroutine, which writes them.
// Either writes under writeMu, so a connection sees one writer at a time.
type outbox struct {
	mu     sync.Mutex
	q      []*Response
	active bool // the session's goroutine will flush what is queued
	closed bool
	err    error // the first send's error: the session ends with it
	wake   chan struct{}

	writeMu sync.Mutex
	spare   []*Response // the flusher's batch (under writeMu)
}

func newOutbox() *outbox { return &outbox{wake: make(chan struct{}, 1)} }

// put queues a response, from any goroutine.
func (o *outbox) put(r *Response) {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		r.Done() // never to be sent: give its payload back
		return
	}
	o.q = append(o.q, r)
	wake := !o.active
	o.mu.Unlock()
	if wake {
		select {
		case o.wake <- struct{}{}:
		default:
		}
	}
}

// setActive says whether the session's goroutine is the one to flush
// (between reading a request and flushing its answers).
func (o *outbox) setActive() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.active = true
	return o.err
}

// flush writes what is queued, maxBatch responses per send, until the
// queue is empty; with release, the session's goroutine then stops being
// the flusher (a response queued meanwhile is written before it does).
func (o *outbox) flush(s *Server, send func([]*Response) error, release bool) error {
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	for {
		o.mu.Lock()
		if len(o.q) == 0 || o.err != nil {
			if release {
				o.active = false
			}
			err := o.err
			o.mu.Unlock()
			return err
		}
		all := o.q
		o.q = o.spare[:0]
		o.mu.Unlock()
		for batch := all; len(batch) > 0; {
			part := batch[:min(len(batch), maxBatch)]
			batch = batch[len(part):]
			for _, r := range part {
				s.inject(r.payloadLen())
			}
			err := send(part)
			for _, r := range part {
				r.Done()
			}
			if err != nil {
				for _, r := range batch {
					r.Done()
				}
				o.mu.Lock()
				o.err = err
				o.mu.Unlock()
				break
			}
		}
		clear(all)
		o.spare = all[:0]
	}
}

// close gives back what was never sent; later responses are dropped.
func (o *outbox) close() {
	o.mu.Lock()
	q := o.q
	o.q, o.closed = nil, true
	o.mu.Unlock()
	for _, r := range q {
		r.Done()
	}
}
