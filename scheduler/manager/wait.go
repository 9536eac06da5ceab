package manager

import (
	"errors"
	"fmt"
	"time"
)

// Waiting without polling: a goroutine that carries out an action (a table
// change, an added worker, the checkpoint-and-restart baseline) waits for
// a condition to hold, woken when what it depends on changes, and gives up
// when its time is up, the job ends or the manager closes.

// errClosing ends a wait because the manager is closing.
var errClosing = errors.New("the scheduler is closing")

// errJobEnded ends a wait because the job has ended.
var errJobEnded = errors.New("the job ended")

// timeoutError ends a wait that ran out of time.
type timeoutError struct{ after time.Duration }

func (e timeoutError) Error() string { return fmt.Sprintf("not within %s", e.after) }

// await returns nil once cond holds, re-checking it whenever wake's
// channel closes. wake is called before each check, so a change between
// the check and the wait is not missed. A nil wake polls every
// pollInterval (for conditions outside the scheduler). within ≤ 0: no
// time limit.
func (m *Manager) await(j *jobState, within time.Duration, wake func() <-chan struct{}, cond func() bool) error {
	var deadline <-chan time.Time
	if within > 0 {
		deadline = m.clk.After(within)
	}
	for {
		var ch <-chan struct{}
		var poll <-chan time.Time
		if wake != nil {
			ch = wake()
		} else {
			poll = m.clk.After(pollInterval)
		}
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-poll:
		case <-deadline:
			if cond() {
				return nil
			}
			return timeoutError{within}
		case <-j.endedCh:
			return errJobEnded
		case <-m.done:
			return errClosing
		}
	}
}

// pollInterval is how often await checks a condition it cannot be woken
// for (the servers' state).
const pollInterval = 20 * time.Millisecond

// changed is a channel closed at the job's next report or agent
// connection. Waiters share it: the first to find none makes it.
func (j *jobState) changed() <-chan struct{} {
	for {
		if c := j.wake.Load(); c != nil {
			return *c
		}
		c := make(chan struct{})
		if j.wake.CompareAndSwap(nil, &c) {
			return c
		}
	}
}

// wakeWaiters wakes the waiters on changed: the channel is taken out, then
// closed, so that it is closed once and a waiter coming after makes a new
// one. O(1) and lock-free: it runs for every report.
func (j *jobState) wakeWaiters() {
	if c := j.wake.Swap(nil); c != nil {
		close(*c)
	}
}

// sleep waits for d, the job's end or the manager's close; false unless d
// passed.
func (m *Manager) sleep(j *jobState, d time.Duration) bool {
	select {
	case <-m.clk.After(d):
		return true
	case <-j.endedCh:
	case <-m.done:
	}
	return false
}
