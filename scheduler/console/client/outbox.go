package client

import (
	"context"
	"sync"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// outbox sits between the reader and the UI: push never blocks, and while the handler is busy
// consecutive deltas merge into one and consecutive status reports keep only the latest.
type outbox struct {
	mu     sync.Mutex
	queue  []any
	notify chan struct{}
}

func newOutbox() *outbox { return &outbox{notify: make(chan struct{}, 1)} }

func (o *outbox) push(m any) {
	o.mu.Lock()
	if n := len(o.queue); n > 0 {
		switch last := o.queue[n-1].(type) {
		case DeltaMsg:
			if d, ok := m.(DeltaMsg); ok {
				o.queue[n-1] = DeltaMsg{Delta: MergeDeltas(last.Delta, d.Delta), Seq: d.Seq, Time: d.Time}
				m = nil
			}
		case StatusMsg:
			if _, ok := m.(StatusMsg); ok {
				o.queue[n-1] = m
				m = nil
			}
		}
	}
	if m != nil {
		o.queue = append(o.queue, m)
	}
	o.mu.Unlock()
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

func (o *outbox) run(ctx context.Context, handler func(any)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.notify:
		}
		for {
			o.mu.Lock()
			if len(o.queue) == 0 {
				o.mu.Unlock()
				break
			}
			m := o.queue[0]
			o.queue[0] = nil
			o.queue = o.queue[1:]
			o.mu.Unlock()
			if handler != nil {
				handler(m)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// MergeDeltas returns one delta equivalent to applying a then b: jobs by name with b's winning,
// a job removed by b dropped, a job re-added by b no longer removed, events in order.
func MergeDeltas(a, b *consolepb.Delta) *consolepb.Delta {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	out := &consolepb.Delta{}
	inB := map[string]bool{}
	for _, j := range b.Jobs {
		inB[j.GetName()] = true
	}
	removedB := map[string]bool{}
	for _, n := range b.RemovedJobs {
		removedB[n] = true
	}
	for _, j := range a.Jobs {
		if !inB[j.GetName()] && !removedB[j.GetName()] {
			out.Jobs = append(out.Jobs, j)
		}
	}
	out.Jobs = append(out.Jobs, b.Jobs...)
	seen := map[string]bool{}
	for _, n := range append(append([]string(nil), a.RemovedJobs...), b.RemovedJobs...) {
		if !inB[n] && !seen[n] {
			seen[n] = true
			out.RemovedJobs = append(out.RemovedJobs, n)
		}
	}
	out.Events = append(append(out.Events, a.Events...), b.Events...)
	return out
}
