package console

import (
	"math"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// This file holds the pure parts of a subscription: what changed since the
// client's last frame, how fast it may hear about it, which events it sees.

// Subscription defaults and bounds.
const (
	DefaultRateHz         = 4.0
	DefaultMaxRateHz      = 20.0
	DefaultHeatmapColumns = 60
	MaxHeatmapColumns     = 1000
)

// diffViews compares the views a client last received (by job name) with the
// current ones. It returns the jobs that are new or differ (each whole, in
// cur's order), the names of jobs that disappeared (sorted), and what the
// client will hold once it has them. The backend's views are immutable, so
// an unchanged job is usually the very same pointer and costs no comparison;
// otherwise proto.Equal decides.
func diffViews(last map[string]*kelpiepb.JobView, cur []*kelpiepb.JobView) (changed []*kelpiepb.JobView, removed []string, next map[string]*kelpiepb.JobView) {
	next = make(map[string]*kelpiepb.JobView, len(cur))
	for _, v := range cur {
		if v == nil {
			continue
		}
		name := v.GetName()
		if _, dup := next[name]; dup {
			continue
		}
		next[name] = v
		prev, had := last[name]
		if !had || (prev != v && !proto.Equal(prev, v)) {
			changed = append(changed, v)
		}
	}
	for name := range last {
		if _, ok := next[name]; !ok {
			removed = append(removed, name)
		}
	}
	sort.Strings(removed)
	return changed, removed, next
}

// rateHz is the delta rate a subscription gets: the asked rate, DefaultRateHz
// when unset, never above limit.
func rateHz(asked, limit float64) float64 {
	r := asked
	if r <= 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		r = DefaultRateHz
	}
	return math.Min(r, limit)
}

// period is the time between deltas at rate hz.
func period(hz float64) time.Duration {
	return time.Duration(float64(time.Second) / hz)
}

// heatmapColumns is the heatmap width a subscription gets.
func heatmapColumns(asked int32) int {
	switch {
	case asked <= 0:
		return DefaultHeatmapColumns
	case asked > MaxHeatmapColumns:
		return MaxHeatmapColumns
	}
	return int(asked)
}

// jobSet is the set of jobs a subscription names; nil means every job.
type jobSet map[string]bool

func newJobSet(names []string) jobSet {
	if len(names) == 0 {
		return nil
	}
	s := jobSet{}
	for _, n := range names {
		s[n] = true
	}
	return s
}

// names lists the set, sorted (nil for every job).
func (s jobSet) names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// filterEvents keeps the events a subscription sees: every event when it
// watches every job, otherwise the named jobs' events and those of no job.
func filterEvents(evs []*kelpiepb.Event, jobs jobSet) []*kelpiepb.Event {
	if jobs == nil {
		return evs
	}
	var out []*kelpiepb.Event
	for _, e := range evs {
		if e.GetJob() == "" || jobs[e.GetJob()] {
			out = append(out, e)
		}
	}
	return out
}

// newestFirst reverses events (the backend lists them oldest first).
func newestFirst(evs []*kelpiepb.Event) []*kelpiepb.Event {
	out := make([]*kelpiepb.Event, len(evs))
	for i, e := range evs {
		out[len(evs)-1-i] = e
	}
	return out
}
