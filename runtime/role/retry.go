package role

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultRetryFor is how long a role keeps retrying the coordinator while
// the scheduler is away (its agent's --orphan-timeout bounds it too).
const DefaultRetryFor = 10 * time.Minute

// retrier retries calls to the coordinator while the scheduler is away
// (restarting, or unreachable for a while): exponential backoff with jitter
// from 100 ms to 5 s, for at most For. The clock and the timer are
// injected so that tests need not wait.
type retrier struct {
	For   time.Duration // give up after this long (default DefaultRetryFor)
	Clock backoff.Clock // default: the system clock
	Timer backoff.Timer // default: a real timer
	Log   *slog.Logger  // retries are logged at WARN (first) and DEBUG
}

// retryable says whether err means the scheduler is away rather than that
// it refused the call.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

func (r retrier) backoff(ctx context.Context) backoff.BackOffContext {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = 5 * time.Second
	b.MaxElapsedTime = r.For
	if b.MaxElapsedTime <= 0 {
		b.MaxElapsedTime = DefaultRetryFor
	}
	if r.Clock != nil {
		b.Clock = r.Clock
	}
	b.Reset()
	return backoff.WithContext(b, ctx)
}

// retry calls op until it succeeds, fails for a reason other than the
// scheduler being away, ctx ends or the retry time is up.
func retry[T any](ctx context.Context, r retrier, what string, op func(context.Context) (T, error)) (T, error) {
	tries := 0
	res, err := backoff.RetryNotifyWithTimerAndData(func() (T, error) {
		v, err := op(ctx)
		if err != nil && !retryable(err) {
			return v, backoff.Permanent(err)
		}
		return v, err
	}, r.backoff(ctx), func(err error, next time.Duration) {
		tries++
		if r.Log != nil {
			lvl := slog.LevelDebug
			if tries == 1 || tries%10 == 0 {
				lvl = slog.LevelWarn
			}
			r.Log.Log(ctx, lvl, "scheduler unreachable; retrying", "call", what, "attempt", tries, "in", next.Round(time.Millisecond), "err", err)
		}
	}, r.Timer)
	if err != nil && tries > 0 && retryable(err) {
		return res, fmt.Errorf("%s: scheduler unreachable after %d attempts: %w", what, tries+1, err)
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, err
}
