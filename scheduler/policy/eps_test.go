package policy

import (
	"maps"
	"strings"
	"testing"
)

func TestAdmitIncoming(t *testing.T) {
	c := Capacity{Workers: 10, Servers: 6}
	a := JobState{Name: "a", Workers: 5, Servers: 2, Removable: true, Submitted: 1}
	b := JobState{Name: "b", Workers: 3, Servers: 2, Removable: true, Submitted: 2}
	early := JobState{Name: "c", Workers: 2, Servers: 2, Removable: true, EarlyFeedback: true, Submitted: 3}
	tests := []struct {
		name     string
		running  []JobState
		incoming JobState
		want     map[string]Delta // nil: not admitted
		reason   string           // a part of the reason
	}{
		{"fits in the free slots", []JobState{{Name: "a", Workers: 4, Servers: 2}}, JobState{Name: "new", Workers: 2, Servers: 1},
			map[string]Delta{}, "it fits"},
		// 10 workers and 6 servers busy; 3 workers and 1 server needed.
		// Workers, largest first, one per round: a, b, a. Servers: a and b
		// tie at 2, a was submitted first.
		{"round-robin, largest first", []JobState{a, b, early}, JobState{Name: "new", Workers: 3, Servers: 1},
			map[string]Delta{"a": {Workers: -2, Servers: -1}, "b": {Workers: -1}}, "shrink a by 2 workers and 1 server, b by 1 worker"},
		// Only c could give 3 workers, but it has not given early feedback.
		{"early feedback protects", []JobState{{Name: "c", Workers: 8, Servers: 2, Removable: true, EarlyFeedback: true},
			{Name: "d", Workers: 2, Servers: 2, Removable: true}}, JobState{Name: "new", Workers: 3, Servers: 1},
			nil, "c protected in early feedback"},
		{"not removable", []JobState{{Name: "a", Workers: 8, Servers: 4}, {Name: "b", Workers: 2, Servers: 2, Removable: true}},
			JobState{Name: "new", Workers: 1, Servers: 1}, map[string]Delta{"b": {Workers: -1, Servers: -1}}, "shrink b"},
		// a may not go below 4 workers: it gives 1, b the other 2 (b's
		// floor is 1).
		{"minimum size", []JobState{{Name: "a", Workers: 5, Servers: 3, MinWorkers: 4, Removable: true},
			{Name: "b", Workers: 5, Servers: 3, Removable: true, Submitted: 1}}, JobState{Name: "new", Workers: 3},
			map[string]Delta{"a": {Workers: -1}, "b": {Workers: -2}}, "shrink a by 1 worker, b by 2 workers"},
		// One worker each is the floor (EPS rule 2): 2 jobs of 2 give 2.
		{"one worker is the floor", []JobState{{Name: "a", Workers: 2, Servers: 1, Removable: true},
			{Name: "b", Workers: 2, Servers: 1, Removable: true}}, JobState{Name: "new", Workers: 9},
			nil, "cannot give up enough workers"},
		{"larger than the cluster", nil, JobState{Name: "new", Workers: 11, Servers: 1}, nil, "the cluster has only 10 workers"},
	}
	for _, tt := range tests {
		got, ok, reason := AdmitIncoming(c, tt.running, tt.incoming)
		if ok != (tt.want != nil) || !equalDeltas(got, tt.want) {
			t.Errorf("%s: AdmitIncoming = %v, %v (%s); want %v", tt.name, got, ok, reason, tt.want)
		}
		if !strings.Contains(reason, tt.reason) {
			t.Errorf("%s: reason %q; want it to contain %q", tt.name, reason, tt.reason)
		}
		for name, d := range got {
			if d.Reason == "" {
				t.Errorf("%s: delta of %s has no reason", tt.name, name)
			}
		}
	}
}

// equalDeltas compares deltas without their reasons.
func equalDeltas(a, b map[string]Delta) bool {
	strip := func(m map[string]Delta) map[string]Delta {
		out := map[string]Delta{}
		for k, d := range m {
			out[k] = Delta{Workers: d.Workers, Servers: d.Servers}
		}
		return out
	}
	return maps.Equal(strip(a), strip(b))
}

func TestGrowRunning(t *testing.T) {
	c := Capacity{Workers: 10, Servers: 6}
	a := JobState{Name: "a", Workers: 4, Servers: 2, Throughput: 1000}
	b := JobState{Name: "b", Workers: 2, Servers: 1, Throughput: 500}
	early := JobState{Name: "c", Workers: 1, Servers: 1, EarlyFeedback: true}
	grownWorse := a
	grownWorse.LastGrowth, grownWorse.PrevThroughput, grownWorse.Throughput = Delta{Workers: 1, Servers: 1}, 1000, 900
	grownBetter := grownWorse
	grownBetter.Throughput = 1100
	capped := a
	capped.MaxWorkers, capped.MaxServers = 4, 2
	tests := []struct {
		name    string
		running []JobState
		want    map[string]Delta
		reason  string // part of a's reason
	}{
		// 3 workers and 2 servers free; c is still in early feedback. One
		// worker and one server each, smallest first (b, then a).
		{"grow smallest first, one each", []JobState{a, b, early},
			map[string]Delta{"a": {Workers: 1, Servers: 1}, "b": {Workers: 1, Servers: 1}}, "add 1 worker and 1 server"},
		// Only one free worker: b (2 workers) gets it before a (4).
		{"scarce slots", []JobState{a, b, {Name: "d", Workers: 3, Servers: 1}},
			map[string]Delta{"b": {Workers: 1, Servers: 1}, "d": {Servers: 1}}, ""},
		{"back off after a drop", []JobState{grownWorse, b, early},
			map[string]Delta{"a": {Workers: -1, Servers: -1}, "b": {Workers: 1, Servers: 1}}, "throughput 900 < 1000 samples/s before the last growth"},
		{"keep growing after a gain", []JobState{grownBetter, b, early},
			map[string]Delta{"a": {Workers: 1, Servers: 1}, "b": {Workers: 1, Servers: 1}}, "add"},
		{"max size", []JobState{capped, b, early},
			map[string]Delta{"b": {Workers: 1, Servers: 1}}, ""},
		{"full cluster", []JobState{{Name: "a", Workers: 10, Servers: 6}}, map[string]Delta{}, ""},
	}
	for _, tt := range tests {
		got := GrowRunning(c, tt.running)
		if !equalDeltas(got, tt.want) {
			t.Errorf("%s: GrowRunning = %v; want %v", tt.name, got, tt.want)
			continue
		}
		if !strings.Contains(got["a"].Reason, tt.reason) {
			t.Errorf("%s: a's reason %q; want it to contain %q", tt.name, got["a"].Reason, tt.reason)
		}
	}
}
