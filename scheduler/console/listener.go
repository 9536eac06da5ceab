package console

import (
	"container/list"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// The HTTP port's connections are bounded before anything is read from
// them: every accepted connection counts against a global cap and its
// network prefix's (Prefix) until a request on it is authenticated (a
// console stream's token, a /metrics token); one beyond a cap closes the
// oldest connection that carries nothing authenticated — an idle
// keep-alive connection first, then one that has not finished a request —
// instead of being refused. Strangers holding connections open therefore
// cannot exhaust the scheduler's file descriptors, and cannot keep an
// operator out: the operator's connection is the newest, and is
// authenticated within a request.

// ConnLimits bound the unauthenticated connections of an HTTP port.
type ConnLimits struct {
	// Max caps them all together (default 1024).
	Max int
	// PerPrefix caps those of one network prefix (default 256).
	PerPrefix int
}

func (l ConnLimits) withDefaults() ConnLimits {
	if l.Max <= 0 {
		l.Max = 1024
	}
	if l.PerPrefix <= 0 {
		l.PerPrefix = 256
	}
	return l
}

// Listener is a net.Listener that enforces ConnLimits. Use it with an
// http.Server whose ConnContext and ConnState are the Listener's (Serve
// sets them).
type Listener struct {
	net.Listener
	limits ConnLimits

	mu      sync.Mutex
	idle    *list.List // *trackedConn between requests, oldest first
	fresh   *list.List // *trackedConn before or in their first unauthenticated request, oldest first
	prefix  map[string]int
	evicted atomic.Uint64
}

// NewListener bounds l's connections.
func NewListener(l net.Listener, limits ConnLimits) *Listener {
	return &Listener{Listener: l, limits: limits.withDefaults(), idle: list.New(), fresh: list.New(), prefix: map[string]int{}}
}

// trackedConn is one accepted connection. While it counts as
// unauthenticated it is on one of the Listener's lists (elem set).
type trackedConn struct {
	net.Conn
	l      *Listener
	prefix string
	elem   *list.Element
	onIdle bool
	closed bool
	auth   int // authenticated requests or streams it carries
}

// Accept accepts a connection and, when a cap is reached, closes the
// oldest unauthenticated one to make room.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l, prefix: Prefix(c.RemoteAddr().String())}
	var victims []*trackedConn
	l.mu.Lock()
	if l.prefix[tc.prefix] >= l.limits.PerPrefix {
		if v := l.oldest(tc.prefix); v != nil {
			victims = append(victims, v)
		}
	}
	if l.idle.Len()+l.fresh.Len() >= l.limits.Max {
		if v := l.oldest(""); v != nil {
			victims = append(victims, v)
		}
	}
	l.track(tc, false)
	l.mu.Unlock()
	for _, v := range victims {
		l.evicted.Add(1)
		v.Conn.Close()
	}
	return tc, nil
}

// Evicted is how many connections were closed to make room.
func (l *Listener) Evicted() uint64 { return l.evicted.Load() }

// Unauthenticated is how many connections count against the caps now.
func (l *Listener) Unauthenticated() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idle.Len() + l.fresh.Len()
}

// oldest takes the oldest unauthenticated connection (of prefix, or any
// when prefix is empty) off the lists: an idle one first. The caller holds
// l.mu and closes it.
func (l *Listener) oldest(prefix string) *trackedConn {
	for _, ls := range []*list.List{l.idle, l.fresh} {
		for e := ls.Front(); e != nil; e = e.Next() {
			if c := e.Value.(*trackedConn); prefix == "" || c.prefix == prefix {
				l.untrack(c)
				c.closed = true
				return c
			}
		}
	}
	return nil
}

// track puts c on a list (the idle one when idle). The caller holds l.mu.
func (l *Listener) track(c *trackedConn, idle bool) {
	if c.closed || c.elem != nil {
		return
	}
	if idle {
		c.elem = l.idle.PushBack(c)
	} else {
		c.elem = l.fresh.PushBack(c)
	}
	c.onIdle = idle
	l.prefix[c.prefix]++
}

// untrack takes c off its list. The caller holds l.mu.
func (l *Listener) untrack(c *trackedConn) {
	if c.elem == nil {
		return
	}
	if c.onIdle {
		l.idle.Remove(c.elem)
	} else {
		l.fresh.Remove(c.elem)
	}
	c.elem = nil
	if l.prefix[c.prefix]--; l.prefix[c.prefix] <= 0 {
		delete(l.prefix, c.prefix)
	}
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	c.l.untrack(c)
	c.closed = true
	c.l.mu.Unlock()
	return c.Conn.Close()
}

type connKey struct{}

// ConnContext is the http.Server's ConnContext: it lets a handler find the
// connection its request came on.
func (l *Listener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*trackedConn); ok && tc.l == l {
		return context.WithValue(ctx, connKey{}, tc)
	}
	return ctx
}

// ConnState is the http.Server's ConnState: a connection between requests
// is idle, and counts as unauthenticated again.
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	tc, ok := c.(*trackedConn)
	if !ok || tc.l != l || st != http.StateIdle {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if tc.auth == 0 && !tc.onIdle {
		l.untrack(tc)
		l.track(tc, true)
	}
}

// Serve serves hs on l, with l's ConnContext and ConnState.
func (l *Listener) Serve(hs *http.Server) error {
	hs.ConnContext, hs.ConnState = l.ConnContext, l.ConnState
	return hs.Serve(l)
}

// Authenticated marks the connection r came on as carrying something
// authenticated (a request, a stream) until the returned func is called:
// meanwhile it counts against no cap and is never closed to make room.
// Without a Listener it does nothing.
func Authenticated(r *http.Request) (done func()) {
	tc, ok := r.Context().Value(connKey{}).(*trackedConn)
	if !ok {
		return func() {}
	}
	l := tc.l
	l.mu.Lock()
	tc.auth++
	l.untrack(tc)
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			if tc.auth--; tc.auth == 0 {
				l.track(tc, false) // back to unauthenticated; idle once the server says so
			}
			l.mu.Unlock()
		})
	}
}
