package allreduce

import (
	"context"
	"math/rand/v2"
	"time"
)

// Pauses is RAT §4's scenario of a network with failures: time from Start
// is cut into periods, and in each period K of the Nodes nodes, chosen
// afresh from Seed, stop sending for its first On. Pure: time is a value.
type Pauses struct {
	Nodes, K   int
	Period, On time.Duration
	Seed       uint64
	Start      time.Time
}

// Paused returns whether node is paused at t, and until when.
func (p Pauses) Paused(node int, t time.Time) (time.Time, bool) {
	if p.K <= 0 || p.Period <= 0 || p.On <= 0 || t.Before(p.Start) {
		return time.Time{}, false
	}
	k := int64(t.Sub(p.Start) / p.Period)
	begin := p.Start.Add(time.Duration(k) * p.Period)
	end := begin.Add(min(p.On, p.Period))
	if !t.Before(end) {
		return time.Time{}, false
	}
	rng := rand.New(rand.NewPCG(p.Seed, uint64(k)))
	for _, v := range rng.Perm(p.Nodes)[:min(p.K, p.Nodes)] {
		if v == node {
			return end, true
		}
	}
	return time.Time{}, false
}

// Hook returns a Config.BeforeSend for node that waits out its pauses
// (reading the clock through now).
func (p Pauses) Hook(node int, now func() time.Time) func(context.Context, int) {
	return func(ctx context.Context, _ int) {
		for {
			until, paused := p.Paused(node, now())
			if !paused {
				return
			}
			t := time.NewTimer(until.Sub(now()))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}
