package server

import "sync"

// outbox holds one session's responses on their way out. The session's
// own goroutine writes the answers to its requests itself, once it has
// handled every request already at hand (a pipeline's answers go together,
// in one send): the reply to a lone request leaves from the goroutine that
// read it, with no hand-off to another goroutine and before that goroutine
// goes back to the socket for the next request (a read that finds nothing,
// with one request in flight). Responses put while the session's goroutine
// is elsewhere (waiting for the next request: a delayed pull released by
// another worker's push, a held request let go) wake the session's sender
// goroutine, which writes them. Either writes under writeMu, so the
// connection has one writer at a time.
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
		r.recycle()
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

// setActive makes the session's goroutine the one to flush (from reading
// a request until it flushes its answers). It returns the error of an
// earlier send, if any.
func (o *outbox) setActive() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.active = true
	return o.err
}

// failed is the error of an earlier send, if any.
func (o *outbox) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// flush writes what is queued, maxBatch responses per send, until the
// queue is empty; with release, the session's goroutine then stops being
// the flusher (a response queued before that is written by it, one queued
// after wakes the sender goroutine). inject is called for each response
// before its send (the server's injected outbound slowness).
func (o *outbox) flush(send func([]*Response) error, inject func(*Response), release bool) error {
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
				inject(r)
			}
			err := send(part)
			for _, r := range part {
				r.Done()
				r.recycle()
			}
			if err != nil {
				for _, r := range batch {
					r.Done()
					r.recycle()
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
		r.recycle()
	}
}

// after is what a handler leaves to run once the server's lock is
// released: replies to send, and other work (a hand-off to start). Its
// backing array is reused from one request to the next (a session keeps
// one), so queueing a reply allocates nothing.
type after []afterItem

type afterItem struct {
	reply func(*Response) // with resp: a reply to send
	resp  *Response
	f     func() // otherwise: work to run
}

func (a *after) reply(to func(*Response), r *Response) {
	*a = append(*a, afterItem{reply: to, resp: r})
}

func (a *after) do(f func()) { *a = append(*a, afterItem{f: f}) }

// run runs what was queued, in order, and empties the list.
func (a *after) run() {
	for i, it := range *a {
		if it.f != nil {
			it.f()
		} else {
			it.reply(it.resp)
		}
		(*a)[i] = afterItem{}
	}
	*a = (*a)[:0]
}
