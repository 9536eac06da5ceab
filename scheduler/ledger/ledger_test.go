package ledger

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// step is one event of a ledger scenario.
type step struct {
	t       float64
	report  string // worker name, with m
	m       Measure
	advance bool
	job     Phase
	nodes   map[string]Phase
}

func TestLedgerScenarios(t *testing.T) {
	R := Running
	tests := []struct {
		name    string
		workers []string
		steps   []step
		now     float64
		job     Phases
		node    map[string]Phases
	}{
		{
			name: "queued until the first report", workers: []string{"w0"},
			steps: []step{{t: 3, advance: true, job: Queued, nodes: map[string]Phase{"w0": Queued}}},
			now:   3, job: Phases{Queued: 3}, node: map[string]Phases{"w0": {Queued: 3}},
		},
		{
			name: "measured shares, the rest idle", workers: []string{"w0"},
			steps: []step{
				{t: 2, advance: true, job: Queued, nodes: map[string]Phase{"w0": Queued}},
				{t: 2, report: "w0", m: Measure{Compute: 0.5, Comm: 0.25, Wait: 0.25}}, // first: span = measured
				{t: 4, report: "w0", m: Measure{Compute: 1, Comm: 0.5, Wait: 0}},       // span 2 s: 0.5 idle
				{t: 4, advance: true, job: R, nodes: map[string]Phase{"w0": R}},
			},
			now: 4, job: Phases{Queued: 2, Computing: 1, Communicating: 0.5, Idle: 0.5},
			node: map[string]Phases{"w0": {Queued: 2, Computing: 1, Communicating: 0.5, Idle: 0.5}},
		},
		{
			name: "job phase is the mean of its workers'", workers: []string{"w0", "w1"},
			steps: []step{
				{t: 0, report: "w0", m: Measure{Compute: 1}},
				{t: 0, report: "w1", m: Measure{Wait: 1}},
				{t: 2, advance: true, job: R, nodes: map[string]Phase{"w0": R, "w1": R}},
				{t: 4, advance: true, job: R, nodes: map[string]Phase{"w0": R, "w1": Recovering}},
			},
			now: 4, job: Phases{Computing: 2, Waiting: 1, Recovering: 1},
			node: map[string]Phases{"w0": {Computing: 4}, "w1": {Waiting: 2, Recovering: 2}},
		},
		{
			name: "stale shares are idle", workers: []string{"w0"},
			steps: []step{
				{t: 0, report: "w0", m: Measure{Compute: 1}},
				{t: 4, advance: true, job: R, nodes: map[string]Phase{"w0": R}},
				{t: 10, advance: true, job: R, nodes: map[string]Phase{"w0": R}},
			},
			now: 10, job: Phases{Computing: 4, Idle: 6},
		},
		{
			name: "a job-wide pause overrides the workers", workers: []string{"w0"},
			steps: []step{
				{t: 0, report: "w0", m: Measure{Compute: 1}},
				{t: 1, advance: true, job: R, nodes: map[string]Phase{"w0": R}},
				{t: 3, advance: true, job: Paused, nodes: map[string]Phase{"w0": R}},
			},
			now: 3, job: Phases{Computing: 1, Paused: 2},
		},
		{
			name: "time after the last advance goes by its phases", workers: []string{"w0"},
			steps: []step{
				{t: 0, report: "w0", m: Measure{Compute: 0.5, Comm: 0.5}},
				{t: 1, advance: true, job: R, nodes: map[string]Phase{"w0": R}},
			},
			now: 3, job: Phases{Computing: 1.5, Communicating: 1.5},
		},
		{
			name: "over-measured spans are scaled to fit", workers: []string{"w0"},
			steps: []step{
				{t: 0, report: "w0", m: Measure{Compute: 1}},
				{t: 1, report: "w0", m: Measure{Compute: 1, Comm: 1}}, // 2 s measured in a 1 s span
				{t: 2, advance: true, job: R, nodes: map[string]Phase{"w0": R}},
			},
			now: 2, job: Phases{Computing: 1, Communicating: 1},
		},
		{
			name: "a worker that joins later counts from its first advance", workers: []string{"w0"},
			steps: []step{
				{t: 0, report: "w0", m: Measure{Compute: 1}},
				{t: 2, advance: true, job: R, nodes: map[string]Phase{"w0": R}},
				{t: 2, report: "w1", m: Measure{Wait: 1}}, // not in the ledger's order yet
				{t: 4, advance: true, job: R, nodes: map[string]Phase{"w0": R, "w1": R}},
			},
			now: 4, job: Phases{Computing: 3, Waiting: 1},
			node: map[string]Phases{"w0": {Computing: 4}, "w1": {Waiting: 2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := New(t0, tt.workers, nil)
			for _, s := range tt.steps {
				if s.advance {
					l.Advance(at(s.t), s.job, s.nodes)
				} else {
					l.Report(s.report, at(s.t), s.m)
				}
			}
			got := l.Job(at(tt.now))
			for i := range got {
				if !near(got[i], tt.job[i]) {
					t.Errorf("Job(%g) = %v; want %v", tt.now, got, tt.job)
					break
				}
			}
			if age := l.Age(at(tt.now)); !near(got.Total(), age) {
				t.Errorf("Job(%g) adds up to %g; want the age %g", tt.now, got.Total(), age)
			}
			for name, want := range tt.node {
				p, ok := l.Node(name, at(tt.now))
				if !ok || p != want {
					t.Errorf("Node(%s) = %v, %v; want %v", name, p, ok, want)
				}
			}
		})
	}
}

func TestEndFreezes(t *testing.T) {
	l := New(t0, []string{"w0"}, nil)
	l.Report("w0", at(0), Measure{Compute: 1})
	l.Advance(at(1), Running, map[string]Phase{"w0": Running})
	l.ObserveETA(at(1), 0.5, 9, true)
	l.End(at(4))
	if got := l.Job(at(100)); !near(got.Total(), 4) || !near(l.Age(at(100)), 4) {
		t.Errorf("after End(4): Job = %v (total %g), Age = %g; want 4 s", got, got.Total(), l.Age(at(100)))
	}
	c := l.Checks()
	if len(c) != 2 || c[0].Percent != 25 || c[1].Percent != 50 || !c[1].Done || !near(c[1].Actual, 3) || !near(c[1].Error(), 2) {
		t.Errorf("Checks = %+v; want 25 and 50 %% at 1 s, predicted 9 s, actual 3 s", c)
	}
}

func TestETA(t *testing.T) {
	tests := []struct {
		todo, doing, total int
		plan               int64
		rate               float64
		want               float64
		ok                 bool
	}{
		{10, 0, 20, 1000, 50, 10, true}, // half the samples left at 50/s
		{9, 2, 20, 1000, 50, 10, true},  // a shard in training counts half
		{0, 0, 20, 1000, 50, 0, true},
		{10, 0, 20, 1000, 0, 0, false},
		{10, 0, 0, 1000, 50, 0, false},
	}
	for _, tt := range tests {
		got, ok := ETA(tt.todo, tt.doing, tt.total, tt.plan, tt.rate)
		if ok != tt.ok || !near(got, tt.want) {
			t.Errorf("ETA(%d, %d, %d, %d, %g) = %g, %v; want %g, %v", tt.todo, tt.doing, tt.total, tt.plan, tt.rate, got, ok, tt.want, tt.ok)
		}
	}
}
