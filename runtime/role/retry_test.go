package role

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeClock is a clock that a fakeTimer advances: retries take no time.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

type fakeTimer struct {
	c     *fakeClock
	ch    chan time.Time
	waits []time.Duration
}

func (t *fakeTimer) Start(d time.Duration) {
	t.waits = append(t.waits, d)
	t.c.now = t.c.now.Add(d)
	t.ch <- t.c.now
}
func (t *fakeTimer) Stop()               {}
func (t *fakeTimer) C() <-chan time.Time { return t.ch }
func newFake() (*fakeClock, *fakeTimer) {
	c := &fakeClock{now: time.Unix(1e9, 0)}
	return c, &fakeTimer{c: c, ch: make(chan time.Time, 1)}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	away := status.Error(codes.Unavailable, "connection refused")
	t.Run("scheduler comes back", func(t *testing.T) {
		c, tm := newFake()
		calls := 0
		v, err := retry(ctx, retrier{For: 3 * time.Minute, Clock: c, Timer: tm}, "fetch", func(context.Context) (int, error) {
			calls++
			if c.now.Sub(time.Unix(1e9, 0)) < 2*time.Minute {
				return 0, away
			}
			return 7, nil
		})
		if err != nil || v != 7 {
			t.Fatalf("retry = %v, %v; want 7 after the outage", v, err)
		}
		for _, w := range tm.waits {
			if w > 5*time.Second*3/2 {
				t.Errorf("a wait of %v; the backoff is capped at 5s (±50%% jitter)", w)
			}
		}
		t.Logf("%d calls over a 2-minute outage", calls)
	})
	t.Run("gives up after For", func(t *testing.T) {
		c, tm := newFake()
		_, err := retry(ctx, retrier{For: time.Minute, Clock: c, Timer: tm}, "fetch", func(context.Context) (int, error) { return 0, away })
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "scheduler unreachable after") {
			t.Fatalf("retry = %v; want Unavailable after giving up", err)
		}
		// It stops before a wait would pass the minute.
		if el := c.now.Sub(time.Unix(1e9, 0)); el > time.Minute || el < time.Minute-8*time.Second {
			t.Errorf("gave up after %v; want just under a minute", el)
		}
	})
	t.Run("a refusal is not retried", func(t *testing.T) {
		c, tm := newFake()
		calls := 0
		refused := status.Error(codes.FailedPrecondition, "job over")
		_, err := retry(ctx, retrier{Clock: c, Timer: tm}, "register", func(context.Context) (int, error) { calls++; return 0, refused })
		if !errors.Is(err, refused) || calls != 1 {
			t.Fatalf("retry = %v after %d calls; want the refusal after 1", err, calls)
		}
	})
	t.Run("context ends", func(t *testing.T) {
		c, tm := newFake()
		cctx, cancel := context.WithCancel(ctx)
		calls := 0
		_, err := retry(cctx, retrier{Clock: c, Timer: tm}, "ready", func(context.Context) (int, error) {
			calls++
			if calls == 3 {
				cancel()
			}
			return 0, away
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("retry = %v; want context.Canceled", err)
		}
	})
}
