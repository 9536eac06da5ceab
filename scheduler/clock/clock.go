// Package clock is the scheduler's source of time: the wall clock in
// production, a fake one that tests advance by hand. Every reading of the
// time, timer and ticker in the scheduler goes through a Clock, so a test
// can drive lost-node detection, proposal expiry and timeouts without
// waiting (tailscale's tstime.Clock is the model).
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// After delivers the time on the returned channel once d has passed.
	After(d time.Duration) <-chan time.Time
	// NewTicker delivers the time every d until stopped.
	NewTicker(d time.Duration) Ticker
}

// Ticker is a time.Ticker behind an interface.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Since is the time elapsed since t on c.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// Real is the wall clock.
func Real() Clock { return realClock{} }

// OrReal is c, or the wall clock if c is nil.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// WithNow is c telling the time from now (timers still run on c): a
// manager configured with only a Now function.
func WithNow(c Clock, now func() time.Time) Clock {
	if now == nil {
		return c
	}
	return nowClock{Clock: c, now: now}
}

type nowClock struct {
	Clock
	now func() time.Time
}

func (c nowClock) Now() time.Time { return c.now() }

// Fake is a clock that moves only when told (Advance, Set). Timers and
// tickers fire, in time order, as it passes their deadlines. It is safe for
// concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
}

type waiter struct {
	at     time.Time
	period time.Duration // > 0 for a ticker
	ch     chan time.Time
	done   bool
}

// NewFake is a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After implements Clock.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &waiter{at: f.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		w.ch <- f.now
		return w.ch
	}
	f.waiters = append(f.waiters, w)
	return w.ch
}

// NewTicker implements Clock. A period that is not positive panics, as
// time.NewTicker does.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &waiter{at: f.now.Add(d), period: d, ch: make(chan time.Time, 1)}
	f.waiters = append(f.waiters, w)
	return &fakeTicker{f: f, w: w}
}

type fakeTicker struct {
	f *Fake
	w *waiter
}

func (t *fakeTicker) C() <-chan time.Time { return t.w.ch }
func (t *fakeTicker) Stop() {
	t.f.mu.Lock()
	t.w.done = true
	t.f.mu.Unlock()
}

// Advance moves the clock forward by d, firing what falls due.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the clock to t (never backwards), firing what falls due. A
// ticker's channel holds one tick, as time.Ticker's does: ticks a slow
// reader misses are dropped.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.Before(f.now) {
		return
	}
	for {
		sort.SliceStable(f.waiters, func(a, b int) bool { return f.waiters[a].at.Before(f.waiters[b].at) })
		if len(f.waiters) == 0 || f.waiters[0].at.After(t) {
			break
		}
		w := f.waiters[0]
		f.waiters = f.waiters[1:]
		if w.done {
			continue
		}
		f.now = w.at
		select {
		case w.ch <- w.at:
		default:
		}
		if w.period > 0 {
			w.at = w.at.Add(w.period)
			f.waiters = append(f.waiters, w)
		}
	}
	f.now = t
}

// Waiters counts the timers and tickers waiting (tests wait for a
// goroutine to arm its timer before they advance the clock).
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.waiters {
		if !w.done {
			n++
		}
	}
	return n
}
