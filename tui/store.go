package tui

import (
	"sort"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// maxEvents bounds the events the console keeps.
const maxEvents = 1000

// store is the console's copy of the scheduler's state, built from snapshots and deltas. JobViews
// are never modified: a delta replaces a job whole, so copying a store copies pointers.
type store struct {
	jobs     map[string]*consolepb.JobView
	events   []*consolepb.Event // newest first
	complete bool               // a snapshot of every job has arrived: jobs names them all
}

func newStore() *store { return &store{jobs: map[string]*consolepb.JobView{}} }

func (s *store) clone() *store {
	c := &store{jobs: make(map[string]*consolepb.JobView, len(s.jobs)), events: s.events, complete: s.complete}
	for k, v := range s.jobs {
		c.jobs[k] = v
	}
	return c
}

// applySnapshot replaces the jobs in scope (every job when scope is empty) and, for a snapshot of
// every job, the events.
func (s *store) applySnapshot(scope []string, snap *consolepb.Snapshot) {
	if len(scope) == 0 {
		s.jobs = make(map[string]*consolepb.JobView, len(snap.GetJobs()))
		s.events = nil
		s.complete = true
	} else {
		for _, n := range scope {
			delete(s.jobs, n)
		}
	}
	for _, j := range snap.GetJobs() {
		s.jobs[j.GetName()] = j
	}
	s.addEvents(snap.GetEvents())
}

func (s *store) applyDelta(d *consolepb.Delta) {
	for _, n := range d.GetRemovedJobs() {
		delete(s.jobs, n)
	}
	for _, j := range d.GetJobs() {
		s.jobs[j.GetName()] = j
	}
	s.addEvents(d.GetEvents())
}

// addEvents merges events newest first, dropping ones already held (a snapshot after a reconnect
// repeats some) and the oldest past maxEvents.
func (s *store) addEvents(evs []*consolepb.Event) {
	if len(evs) == 0 {
		return
	}
	type key struct {
		t   int64
		msg string
	}
	seen := make(map[key]bool, len(s.events))
	for _, e := range s.events {
		seen[key{e.GetTime().AsTime().UnixNano(), e.GetMessage()}] = true
	}
	merged := append([]*consolepb.Event(nil), s.events...)
	for _, e := range evs {
		k := key{e.GetTime().AsTime().UnixNano(), e.GetMessage()}
		if !seen[k] {
			seen[k] = true
			merged = append(merged, e)
		}
	}
	sort.SliceStable(merged, func(i, j int) bool {
		return merged[i].GetTime().AsTime().After(merged[j].GetTime().AsTime())
	})
	if len(merged) > maxEvents {
		merged = merged[:maxEvents]
	}
	s.events = merged
}

// names returns the job names, sorted.
func (s *store) names() []string {
	out := make([]string, 0, len(s.jobs))
	for n := range s.jobs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
