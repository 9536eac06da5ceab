package hang

import (
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestBound(t *testing.T) {
	tests := []struct {
		cfg    Config
		median time.Duration
		want   time.Duration
	}{
		{Config{}, 100 * time.Millisecond, 30 * time.Second},
		{Config{}, 2 * time.Second, 40 * time.Second},
		{Config{Min: time.Second, Factor: 5}, 100 * time.Millisecond, time.Second},
		{Config{Min: time.Second, Factor: 5}, time.Second, 5 * time.Second},
	}
	for _, tt := range tests {
		if got := tt.cfg.Bound(tt.median); got != tt.want {
			t.Errorf("%+v.Bound(%v) = %v; want %v", tt.cfg, tt.median, got, tt.want)
		}
	}
}

func worker(name string, it int64, heard float64) Node {
	return Node{Name: name, Live: true, Iteration: it, Heard: sec(heard), Iter: 100 * time.Millisecond}
}

func TestDetector(t *testing.T) {
	type obs struct {
		t        float64
		progress int64
		nodes    []Node
	}
	w := func(a, b int64, ha, hb float64) []Node {
		return []Node{worker("worker-0", a, ha), worker("worker-1", b, hb),
			{Name: "server-0", Server: true, Live: true, Version: min(a, b)},
			{Name: "server-1", Server: true, Live: true, Version: max(a, b)}}
	}
	held := []Node{worker("worker-0", 5, 0), worker("worker-1", 5, 0), worker("worker-2", 5, 0),
		{Name: "server-0", Server: true, Live: true, Version: 5, Behind: []string{"worker-2"}, Held: 2},
		{Name: "server-1", Server: true, Live: true, Version: 5, Behind: []string{"worker-1", "worker-2"}, Held: 1},
		{Name: "server-2", Server: true, Live: true, Version: 6}}
	tests := []struct {
		name    string
		obs     []obs
		hung    bool
		since   float64
		missing []string
		holding []string
	}{
		{name: "never started is not hung", obs: []obs{{0, 0, nil}, {100, 0, nil}}},
		{name: "moving is not hung", obs: []obs{{0, 10, w(1, 1, 0, 0)}, {1, 20, w(2, 2, 1, 1)}, {5, 30, w(3, 3, 5, 5)}}},
		{name: "within the bound", obs: []obs{{0, 10, w(1, 1, 0, 0)}, {1.5, 10, w(1, 1, 0, 0)}}},
		{
			name: "the worker behind is missing",
			obs:  []obs{{0, 10, w(5, 5, 0, 0)}, {1, 20, w(5, 6, 0, 1)}, {4, 20, w(5, 6, 0, 4)}},
			hung: true, since: 1, missing: []string{"worker-0"}, holding: []string{"server-0"},
		},
		{
			name: "all level: the silent one is missing",
			obs:  []obs{{0, 10, w(5, 5, 0, 0)}, {4, 10, w(5, 5, 0, 3)}},
			hung: true, since: 0, missing: []string{"worker-0"},
		},
		{
			name: "the servers say whom they hold pulls for",
			obs:  []obs{{0, 10, held}, {4, 10, held}},
			hung: true, since: 0, missing: []string{"worker-1", "worker-2"}, holding: []string{"server-0", "server-1"},
		},
		{
			name: "progress clears it",
			obs:  []obs{{0, 10, w(5, 5, 0, 0)}, {4, 10, w(5, 5, 0, 3)}, {5, 11, w(6, 6, 5, 5)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &Detector{Config: Config{Min: 2 * time.Second, Factor: 5}}
			var v Verdict
			for _, o := range tt.obs {
				v = d.Observe(Observation{Now: sec(o.t), Progress: o.progress, Nodes: o.nodes})
			}
			if v.Hung != tt.hung {
				t.Fatalf("Hung = %v; want %v (%+v)", v.Hung, tt.hung, v)
			}
			if !tt.hung {
				return
			}
			if !v.Since.Equal(sec(tt.since)) || !slices.Equal(v.Missing, tt.missing) || !slices.Equal(v.Holding, tt.holding) {
				t.Errorf("verdict = since %v, missing %v, holding %v; want since %v, missing %v, holding %v",
					v.Since.Sub(t0), v.Missing, v.Holding, tt.since, tt.missing, tt.holding)
			}
		})
	}
}
