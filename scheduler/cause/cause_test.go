package cause

import (
	"math"
	"strings"
	"testing"
)

func TestWorkers(t *testing.T) {
	even := Phases{Compute: 0.010, Data: 0.001, Push: 0.002, Pull: 0.002}
	tests := []struct {
		name  string
		ws    map[string]Phases
		want  map[string]Kind
		ratio map[string]float64
	}{
		{"alone: no median to compare with", map[string]Phases{"worker-0": {Compute: 1}}, map[string]Kind{}, nil},
		{"a slow device", map[string]Phases{"worker-0": even, "worker-1": even, "worker-2": {Compute: 0.031, Data: 0.001, Push: 0.002, Pull: 0.002}},
			map[string]Kind{"worker-2": Compute}, map[string]float64{"worker-2": 3.1}},
		{"a slow loader", map[string]Phases{"worker-0": even, "worker-1": even, "worker-2": {Compute: 0.011, Data: 0.009, Push: 0.002, Pull: 0.002}},
			map[string]Kind{"worker-2": Data, "worker-0": "", "worker-1": ""}, map[string]float64{"worker-2": 9}},
		{"a slow NIC: both directions, the larger excess wins", map[string]Phases{"worker-0": even, "worker-1": even,
			"worker-2": {Compute: 0.010, Data: 0.001, Push: 0.008, Pull: 0.012}},
			map[string]Kind{"worker-2": Pull}, map[string]float64{"worker-2": 6}},
		{"everyone equally slow: nobody stands out", map[string]Phases{"worker-0": even, "worker-1": even, "worker-2": even},
			map[string]Kind{"worker-0": "", "worker-1": "", "worker-2": ""}, nil},
	}
	for _, tt := range tests {
		got := Workers(tt.ws)
		for node, k := range tt.want {
			if got[node].Kind != k {
				t.Errorf("%s: Workers()[%s] = %q; want %q", tt.name, node, got[node].Kind, k)
			}
		}
		for node, r := range tt.ratio {
			if math.Abs(got[node].Ratio-r) > 1e-9 {
				t.Errorf("%s: Workers()[%s].Ratio = %g; want %g", tt.name, node, got[node].Ratio, r)
			}
		}
	}
}

func TestServers(t *testing.T) {
	fine := Own{RoundTrip: 0.002, Queue: 0.0001, Apply: 0.0004, Workers: 4}
	tests := []struct {
		name   string
		ss     map[string]Own
		want   map[string]Kind
		detail map[string]string
	}{
		{"one server", map[string]Own{"server-0": fine}, map[string]Kind{"server-0": ""}, nil},
		{"a shaped link: round trips up, own time not", map[string]Own{"server-0": fine, "server-2": fine,
			"server-1": {RoundTrip: 0.0065, Queue: 0.0001, Apply: 0.0004, SlowFor: 4, Workers: 4}},
			map[string]Kind{"server-1": Link, "server-0": ""},
			map[string]string{"server-1": "link 4.0× median — pull wait on every worker"}},
		{"two servers: the slow one against the other, not against a median holding itself", map[string]Own{"server-0": fine,
			"server-1": {RoundTrip: 0.0065, Queue: 0.0001, Apply: 0.0004, SlowFor: 4, Workers: 4}},
			map[string]Kind{"server-1": Link, "server-0": ""},
			map[string]string{"server-1": "link 4.0× median — pull wait on every worker"}},
		{"a slow server: its own handling explains its round trips", map[string]Own{"server-0": fine, "server-2": fine,
			"server-1": {RoundTrip: 0.0065, Queue: 0.001, Apply: 0.004, SlowFor: 2, Workers: 4}},
			map[string]Kind{"server-1": Server},
			map[string]string{"server-1": "server 10× median — slow for 2 of 4 workers"}},
	}
	for _, tt := range tests {
		got := Servers(tt.ss)
		for node, k := range tt.want {
			if got[node].Kind != k {
				t.Errorf("%s: Servers()[%s] = %q; want %q", tt.name, node, got[node].Kind, k)
			}
		}
		for node, d := range tt.detail {
			if got[node].Detail != d {
				t.Errorf("%s: Servers()[%s].Detail = %q; want %q", tt.name, node, got[node].Detail, d)
			}
		}
	}
}

func TestSlowFor(t *testing.T) {
	rt := map[string]map[string]float64{
		"worker-0": {"server-0": 0.001, "server-1": 0.004},
		"worker-1": {"server-0": 0.001, "server-1": 0.004},
		"worker-2": {"server-0": 0.001, "server-1": 0.0012},
		"worker-3": {"server-1": 0.004}, // talks to one server only: not counted
	}
	if s, of := SlowFor(rt, "server-1"); s != 2 || of != 3 {
		t.Errorf("SlowFor(server-1) = %d, %d; want 2, 3", s, of)
	}
	if s, of := SlowFor(rt, "server-0"); s != 0 || of != 3 {
		t.Errorf("SlowFor(server-0) = %d, %d; want 0, 3", s, of)
	}
	// SlowForEach counts every server as SlowFor does.
	means := map[string][]ServerMean{}
	for w, per := range rt {
		for server, x := range per {
			means[w] = append(means[w], ServerMean{Server: server, Seconds: x})
		}
	}
	each := SlowForEach(means)
	for _, server := range []string{"server-0", "server-1", "server-2"} {
		s, of := SlowFor(rt, server)
		if got := each[server]; got != (Slowness{Slow: s, Of: of}) {
			t.Errorf("SlowForEach[%s] = %+v; want {%d %d}", server, got, s, of)
		}
	}
}

func TestMismatch(t *testing.T) {
	link := Cause{Kind: Pull, Ratio: 4, Detail: "pull 4.0× median"}
	tests := []struct {
		kind string
		c    Cause
		want string // a part of the warning; "" for none
	}{
		{"ADJUST_BS", Cause{Kind: Compute, Detail: "compute 3.1× median"}, ""},
		{"ADJUST_BS", link, "ADJUST_BS does not answer the measured cause: worker-2: pull 4.0× median"},
		{"ADJUST_BS", Cause{}, ""},
		{"KILL_RESTART", link, ""},
		{"REASSIGN", Cause{Kind: Compute, Detail: "compute 2.0× median"}, "does not shorten its computing"},
		{"REASSIGN", Cause{Kind: Link}, ""},
	}
	for _, tt := range tests {
		got := Mismatch(tt.kind, "worker-2", tt.c)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("Mismatch(%s, %v) = %q; want %q", tt.kind, tt.c.Kind, got, tt.want)
		}
	}
}

func TestRecent(t *testing.T) {
	var r Recent
	if _, ok := r.Phases(); ok {
		t.Fatal("Phases of nothing: ok")
	}
	for i := range Keep + 2 {
		x := float64(i)
		r.Add(Sample{Iterations: 2, Phases: Phases{Compute: 2 * x, Pull: 2}, RoundTrips: []ServerTrips{{Server: "server-0", Trips: Trips{Seconds: x, N: 1}}}})
	}
	p, ok := r.Phases()
	// The last Keep samples: x = 2..9, compute per iteration = x.
	if !ok || p.Compute != 5.5 || p.Pull != 1 {
		t.Errorf("Phases() = %+v, %v; want compute 5.5, pull 1", p, ok)
	}
	if rt := r.RoundTrips()["server-0"]; rt != 5.5 {
		t.Errorf("RoundTrips()[server-0] = %g; want 5.5", rt)
	}
	if mt := r.MeanTrips(); len(mt) != 1 || mt[0] != (ServerMean{Server: "server-0", Seconds: 5.5}) {
		t.Errorf("MeanTrips() = %v; want [{server-0 5.5}]", mt)
	}
	// A TripsWindow is the round trips as they were when it was taken.
	w := r.TripsWindow()
	r.Add(Sample{Iterations: 2, RoundTrips: []ServerTrips{{Server: "server-1", Trips: Trips{Seconds: 100, N: 1}}}})
	if mt := w.MeanTrips(); len(mt) != 1 || mt[0] != (ServerMean{Server: "server-0", Seconds: 5.5}) {
		t.Errorf("TripsWindow taken before an Add: MeanTrips() = %v; want [{server-0 5.5}]", mt)
	}
	if mt := r.MeanTrips(); len(mt) != 2 || mt[1] != (ServerMean{Server: "server-1", Seconds: 100}) {
		t.Errorf("after the Add: MeanTrips() = %v; want server-1 at 100 s second", mt)
	}
}

// TestMeanTripsAnyOrder: MeanTrips agrees with RoundTrips whether a
// worker's reports list its servers in one order or not.
func TestMeanTripsAnyOrder(t *testing.T) {
	for _, rotate := range []bool{false, true} {
		var r Recent
		servers := []string{"server-0", "server-1", "server-2", "server-3", "server-4"}
		for i := range Keep + 3 {
			var s Sample
			for k := range servers {
				at := k
				if rotate {
					at = (k + i) % len(servers)
				}
				s.AddTrip(servers[at], float64(i+1)*0.001*float64(at+1))
			}
			if i%3 == 0 {
				s.AddTrip("server-5", 0.5) // now and then one more
			}
			r.Add(s)
		}
		want := r.RoundTrips()
		got := r.MeanTrips()
		if len(got) != len(want) {
			t.Fatalf("rotate %v: MeanTrips %v; want %d servers %v", rotate, got, len(want), want)
		}
		for _, m := range got {
			if w := want[m.Server]; math.Abs(m.Seconds-w) > 1e-12 {
				t.Errorf("rotate %v: %s %g; want %g", rotate, m.Server, m.Seconds, w)
			}
		}
	}
}

func TestServerRecent(t *testing.T) {
	var r ServerRecent
	r.Add(Counters{Queue: 1, Apply: 2, Requests: 10})
	if _, _, ok := r.PerRequest(); ok {
		t.Fatal("one counter: ok")
	}
	r.Add(Counters{Queue: 2, Apply: 6, Requests: 20})
	if q, a, ok := r.PerRequest(); !ok || q != 0.1 || a != 0.4 {
		t.Errorf("PerRequest() = %g, %g, %v; want 0.1, 0.4, true", q, a, ok)
	}
	r.Add(Counters{Queue: 0.5, Apply: 0.5, Requests: 5}) // restarted
	if _, _, ok := r.PerRequest(); ok {
		t.Error("after a restart, one counter: ok")
	}
	for i := range 2 * Keep {
		r.Add(Counters{Queue: float64(i), Apply: float64(i), Requests: int64(100 + i)})
	}
	if q, _, ok := r.PerRequest(); !ok || q != 1 {
		t.Errorf("PerRequest() over a full ring = %g, %v; want 1", q, ok)
	}
}

// TestMedianWithout checks medianWithout against Median of a copy without
// the value.
func TestMedianWithout(t *testing.T) {
	xs := []float64{1, 2, 2, 3, 7, 9, 20}
	for n := 2; n <= len(xs); n++ {
		sorted := xs[:n]
		for i, x := range sorted {
			rest := append(append([]float64(nil), sorted[:i]...), sorted[i+1:]...)
			if got, want := medianWithout(sorted, x), Median(rest); got != want {
				t.Errorf("medianWithout(%v, %g) = %g; want %g", sorted, x, got, want)
			}
		}
	}
}
