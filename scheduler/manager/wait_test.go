package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/clock"
)

// waitHarness is a manager and a job just big enough for await.
func waitHarness() (*Manager, *jobState, *clock.Fake) {
	f := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := &Manager{clk: f, done: make(chan struct{})}
	j := &jobState{m: m, endedCh: make(chan struct{})}
	return m, j, f
}

// awaitIn runs await in a goroutine and returns its result channel once
// the goroutine has armed its deadline timer.
func awaitIn(t *testing.T, m *Manager, j *jobState, f *clock.Fake, cond func() bool) <-chan error {
	t.Helper()
	before := f.Waiters()
	out := make(chan error, 1)
	go func() { out <- m.await(j, time.Minute, j.changed, cond) }()
	for f.Waiters() == before {
		time.Sleep(time.Millisecond) // until the deadline timer is armed
	}
	return out
}

func TestAwaitWokenByReport(t *testing.T) {
	m, j, f := waitHarness()
	var reported bool
	res := awaitIn(t, m, j, f, func() bool {
		pauseActor(j)
		defer resumeActor(j)
		return reported
	})
	pauseActor(j)
	reported = true
	j.wakeWaiters()
	resumeActor(j)
	if err := <-res; err != nil {
		t.Errorf("await after the condition held = %v; want nil", err)
	}
}

func TestAwaitEnds(t *testing.T) {
	never := func() bool { return false }
	for _, tc := range []struct {
		name string
		end  func(m *Manager, j *jobState, f *clock.Fake)
		want func(error) bool
	}{
		{"timeout", func(_ *Manager, _ *jobState, f *clock.Fake) { f.Advance(time.Minute) },
			func(err error) bool { return errors.As(err, new(timeoutError)) }},
		{"job ended", func(_ *Manager, j *jobState, _ *clock.Fake) { close(j.endedCh) },
			func(err error) bool { return errors.Is(err, errJobEnded) }},
		{"manager closing", func(m *Manager, _ *jobState, _ *clock.Fake) { close(m.done) },
			func(err error) bool { return errors.Is(err, errClosing) }},
	} {
		m, j, f := waitHarness()
		res := awaitIn(t, m, j, f, never)
		f.Advance(59 * time.Second)
		select {
		case err := <-res:
			t.Fatalf("%s: await returned %v before its end", tc.name, err)
		default:
		}
		tc.end(m, j, f)
		if err := <-res; !tc.want(err) {
			t.Errorf("%s: await = %v", tc.name, err)
		}
	}
}

func TestSpawnAfterCloseDoesNotRun(t *testing.T) {
	m := &Manager{done: make(chan struct{})}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	started := make(chan struct{})
	m.spawn(func() {
		close(started)
		<-m.done
	})
	<-started
	m.Close()
	ran := false
	m.spawn(func() { ran = true })
	m.Close()
	if ran {
		t.Error("a goroutine spawned after Close ran")
	}
}
