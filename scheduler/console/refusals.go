package console

import (
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
)

// refusals keeps a user's refused commands cheap, as the throttle does for
// refused connections: each user has a budget of refusals (a token bucket,
// Options.RefusedCommands refilled one per Options.RefusedCommandEvery);
// each refusal within it is audited on its own, and once it is spent the
// user's commands are answered ResourceExhausted without being looked at
// and only counted, the count written with the user's next audited refusal.
// So a viewer sending approve after approve leaves a handful of records a
// minute, not one per frame.
type refusals struct {
	burst int
	every time.Duration

	mu    sync.Mutex
	users map[string]*userRefusals // by principal name: the token file bounds them
}

type userRefusals struct {
	tokens     float64
	at         time.Time // when tokens was last brought up to date
	suppressed int       // refusals not audited since the last that was
}

func newRefusals(o Options) *refusals {
	return &refusals{burst: o.RefusedCommands, every: o.RefusedCommandEvery, users: map[string]*userRefusals{}}
}

// state brings who's budget up to date.
func (r *refusals) state(who string, now time.Time) *userRefusals {
	u, ok := r.users[who]
	if !ok {
		u = &userRefusals{tokens: float64(r.burst), at: now}
		r.users[who] = u
	}
	if d := now.Sub(u.at); d > 0 {
		u.tokens = min(float64(r.burst), u.tokens+float64(d)/float64(r.every))
		u.at = now
	}
	return u
}

// limited says how long who must wait before a command of theirs is looked
// at again (0: now). A command turned away here counts as a refusal.
func (r *refusals) limited(who string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.state(who, now)
	if u.tokens >= 1 {
		return 0
	}
	u.suppressed++
	return time.Duration((1 - u.tokens) * float64(r.every))
}

// refused spends one refusal of who's budget: due says it is audited, with
// suppressed refusals before it that were not.
func (r *refusals) refused(who string, now time.Time) (due bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.state(who, now)
	if u.tokens < 1 {
		u.suppressed++
		return false, 0
	}
	u.tokens--
	suppressed, u.suppressed = u.suppressed, 0
	return true, suppressed
}

// refuseCommand audits a refused command within the user's budget and
// returns the refusal for the client.
func (c *conn) refuseCommand(entry AuditEntry, err error) error {
	due, suppressed := c.s.refusals.refused(c.who.Name, c.s.opts.Now())
	if due {
		entry.Reason = err.Error()
		if suppressed > 0 {
			entry.Detail = joinDetail(entry.Detail, fmt.Sprintf("and %d more refused commands by %s not recorded", suppressed, c.who.Name))
		}
		c.s.audit(entry)
	}
	return err
}

// errTooManyRefused is the answer to a user whose refusal budget is spent.
func errTooManyRefused(who Principal, wait time.Duration) error {
	return errorf(codes.ResourceExhausted, "console: too many refused commands from %s %s: retry in %s",
		who.Role, who.Name, wait.Round(time.Second)+time.Second)
}
