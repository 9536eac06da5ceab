package straggler

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	ms  = time.Millisecond
	sec = time.Second
	MiB = 1 << 20
)

func TestActive(t *testing.T) {
	persistent := Injection{Node: "w", Kind: Compute, Sleep: sec, Intensity: 1}
	bounded := Injection{Node: "w", Kind: Compute, Sleep: sec, Intensity: 1, Start: 5 * sec, End: 30 * sec}
	// The spec reference's transient example (core/spec/doc.go): on for 10s of every 20s.
	transient := Injection{Node: "w", Kind: Compute, Sleep: sec, Intensity: 1, Period: 20 * sec, On: 10 * sec}
	late := Injection{Node: "w", Kind: Compute, Sleep: sec, Intensity: 1, Start: 3 * sec, End: 50 * sec, Period: 20 * sec, On: 10 * sec}
	tests := []struct {
		name string
		in   Injection
		t    time.Duration
		want bool
	}{
		{"persistent at 0", persistent, 0, true},
		{"persistent much later", persistent, 10 * time.Hour, true},
		{"bounded before start", bounded, 5*sec - 1, false},
		{"bounded at start", bounded, 5 * sec, true},
		{"bounded just before end", bounded, 30*sec - 1, true},
		{"bounded at end", bounded, 30 * sec, false},
		{"transient on", transient, 0, true},
		{"transient last on instant", transient, 10*sec - 1, true},
		{"transient off edge", transient, 10 * sec, false},
		{"transient off", transient, 19 * sec, false},
		{"transient on again", transient, 20 * sec, true},
		{"transient second off edge", transient, 30 * sec, false},
		{"phase from start: before", late, 2 * sec, false},
		{"phase from start: on", late, 3 * sec, true},
		{"phase from start: off edge", late, 13 * sec, false},
		{"phase from start: on again", late, 23 * sec, true},
		{"phase from start: window cut by end", late, 50 * sec, false},
	}
	for _, tt := range tests {
		if got := tt.in.Active(tt.t); got != tt.want {
			t.Errorf("%s: Active(%v) = %v; want %v", tt.name, tt.t, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Injection{Node: "worker-2", Kind: Compute, Sleep: 200 * ms, Intensity: 0.8, Probability: 1, Start: 5 * sec, End: 30 * sec}
	tests := []struct {
		in      Injection
		wantErr string
	}{
		{ok, ""},
		{Injection{Node: "worker-0", Kind: CPUSleep, Intensity: 0.5}, ""},
		{Injection{Node: "server-1", Kind: Bandwidth, Rate: 20 * MiB}, ""},
		{Injection{Node: "worker-1", Kind: Pause, Start: 10 * sec, End: 12 * sec}, ""},
		{Injection{Node: "worker-3", Kind: Compute, Sleep: 100 * ms, Intensity: 0.5, Period: 20 * sec, On: 10 * sec}, ""},
		{Injection{Node: "w", Kind: Pause, Period: 20 * sec, On: 2 * sec}, ""},
		{Injection{Kind: Compute, Sleep: sec}, "node is empty"},
		{Injection{Node: "w", Kind: "disk"}, "unknown kind"},
		{Injection{Node: "w", Kind: Compute, Intensity: 0.5}, "sleep"},
		{Injection{Node: "w", Kind: Compute, Sleep: sec, Intensity: 1.2}, "intensity"},
		{Injection{Node: "w", Kind: CPUSleep, Intensity: 1}, "intensity"},
		{Injection{Node: "w", Kind: CPUSleep, Intensity: math.NaN()}, "intensity"},
		{Injection{Node: "w", Kind: Bandwidth}, "rate"},
		{Injection{Node: "w", Kind: Pause, Start: sec}, "never resumes"},
		{Injection{Node: "w", Kind: Pause, Period: sec, On: sec}, "never resumes"},
		{Injection{Node: "w", Kind: Compute, Sleep: sec, Probability: 1.5}, "probability"},
		{Injection{Node: "w", Kind: Compute, Sleep: sec, Start: -sec}, "negative"},
		{Injection{Node: "w", Kind: Compute, Sleep: sec, Start: 5 * sec, End: 5 * sec}, "after start"},
		{Injection{Node: "w", Kind: Compute, Sleep: sec, On: sec}, "needs a period"},
		{Injection{Node: "w", Kind: Compute, Sleep: sec, Period: sec, On: 2 * sec}, "must be in (0, period"},
		{Injection{Node: "w", Kind: Compute, Sleep: sec, Period: sec}, "must be in (0, period"},
	}
	for _, tt := range tests {
		err := tt.in.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%+v.Validate() = %v; want nil", tt.in, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%+v.Validate() = %v; want error containing %q", tt.in, err, tt.wantErr)
		}
	}
}

// A spec's stragglers block, one entry of each kind.
var designSpec = []Injection{
	{Node: "worker-2", Kind: Compute, Sleep: 200 * ms, Intensity: 0.8, Probability: 1, Start: 5 * sec, End: 30 * sec},
	{Node: "worker-0", Kind: CPUSleep, Intensity: 0.5},
	{Node: "server-1", Kind: Bandwidth, Rate: 20 * MiB},
	{Node: "worker-1", Kind: Pause, Start: 10 * sec, End: 12 * sec},
	{Node: "worker-3", Kind: Compute, Sleep: 100 * ms, Intensity: 0.5, Period: 20 * sec, On: 10 * sec},
}

func TestComputeDelay(t *testing.T) {
	tests := []struct {
		name    string
		s       Schedule
		t       time.Duration
		compute time.Duration
		u       float64
		want    time.Duration
	}{
		// AntDT: T_delay = SleepDuration × Intensity
		{"before start", ForNode(designSpec, "worker-2"), 4 * sec, 50 * ms, 0, 0},
		{"active", ForNode(designSpec, "worker-2"), 5 * sec, 50 * ms, 0.99, 160 * ms},
		{"after end", ForNode(designSpec, "worker-2"), 30 * sec, 50 * ms, 0, 0},
		{"AntDT 1.5s x 0.8", ForNode([]Injection{{Node: "w", Kind: Compute, Sleep: 1500 * ms, Intensity: 0.8}}, "w"), 0, 0, 0.5, 1200 * ms},
		// cpu: compute × I/(1-I)
		{"cpu 0.5 doubles", ForNode(designSpec, "worker-0"), 7 * sec, 40 * ms, 0, 40 * ms},
		{"cpu 0.75 quadruples", ForNode([]Injection{{Node: "w", Kind: CPUSleep, Intensity: 0.75}}, "w"), 0, 40 * ms, 0, 120 * ms},
		{"cpu 0 adds nothing", ForNode([]Injection{{Node: "w", Kind: CPUSleep}}, "w"), 0, 40 * ms, 0, 0},
		{"cpu: smaller batch, smaller delay", ForNode(designSpec, "worker-0"), 0, 10 * ms, 0, 10 * ms},
		// transient
		{"transient on", ForNode(designSpec, "worker-3"), 9 * sec, 0, 0, 50 * ms},
		{"transient off", ForNode(designSpec, "worker-3"), 15 * sec, 0, 0, 0},
		// other kinds add no compute delay
		{"bandwidth only", ForNode(designSpec, "server-1"), 0, 40 * ms, 0, 0},
		{"pause only", ForNode(designSpec, "worker-1"), 11 * sec, 40 * ms, 0, 0},
		{"no injection", ForNode(designSpec, "worker-9"), 0, 40 * ms, 0, 0},
		// probability
		{"p=0.3, u below", ForNode([]Injection{{Node: "w", Kind: Compute, Sleep: sec, Intensity: 0.5, Probability: 0.3}}, "w"), 0, 0, 0.29, 500 * ms},
		{"p=0.3, u at", ForNode([]Injection{{Node: "w", Kind: Compute, Sleep: sec, Intensity: 0.5, Probability: 0.3}}, "w"), 0, 0, 0.3, 0},
		{"p=0 means always", ForNode([]Injection{{Node: "w", Kind: Compute, Sleep: sec, Intensity: 0.5}}, "w"), 0, 0, 0.999, 500 * ms},
		{"cpu with probability", ForNode([]Injection{{Node: "w", Kind: CPUSleep, Intensity: 0.5, Probability: 0.5}}, "w"), 0, 30 * ms, 0.7, 0},
		// several add up
		{"compute + cpu", ForNode([]Injection{
			{Node: "w", Kind: Compute, Sleep: 100 * ms, Intensity: 1},
			{Node: "w", Kind: CPUSleep, Intensity: 0.5},
		}, "w"), 0, 30 * ms, 0, 130 * ms},
	}
	for _, tt := range tests {
		if got := tt.s.ComputeDelay(tt.t, tt.compute, tt.u); got != tt.want {
			t.Errorf("%s: ComputeDelay(%v, %v, %v) = %v; want %v", tt.name, tt.t, tt.compute, tt.u, got, tt.want)
		}
	}
}

// TestCPUDelay: only kind cpu stretches a server's busy time; kind
// compute's fixed delay is not part of it.
func TestCPUDelay(t *testing.T) {
	both := ForNode([]Injection{
		{Node: "s", Kind: Compute, Sleep: 100 * ms, Intensity: 1},
		{Node: "s", Kind: CPUSleep, Intensity: 0.8, Start: sec},
	}, "s")
	for _, c := range []struct {
		name        string
		t, busy     time.Duration
		u           float64
		want        time.Duration
		fixedFromCD time.Duration // ComputeDelay(t, 0, u): the fixed part a request gets beforehand
	}{
		{"cpu 0.8: five times the work, four added", 2 * sec, 10 * ms, 0, 40 * ms, 100 * ms},
		{"less work, less delay", 2 * sec, 1 * ms, 0, 4 * ms, 100 * ms},
		{"before the cpu injection", 0, 10 * ms, 0, 0, 100 * ms},
	} {
		if got := both.CPUDelay(c.t, c.busy, c.u); got != c.want {
			t.Errorf("%s: CPUDelay(%v, %v) = %v; want %v", c.name, c.t, c.busy, got, c.want)
		}
		if got := both.ComputeDelay(c.t, 0, c.u); got != c.fixedFromCD {
			t.Errorf("%s: ComputeDelay(%v, 0) = %v; want %v", c.name, c.t, got, c.fixedFromCD)
		}
	}
}

// TestProbabilityRate checks that over evenly spread draws a compute
// injection with probability p fires for a fraction p of iterations.
func TestProbabilityRate(t *testing.T) {
	s := ForNode([]Injection{{Node: "w", Kind: Compute, Sleep: sec, Intensity: 1, Probability: 0.3}}, "w")
	fired := 0
	const n = 1000
	for i := range n {
		if s.ComputeDelay(0, 0, (float64(i)+0.5)/n) > 0 {
			fired++
		}
	}
	if fired != 300 {
		t.Errorf("fired %d of %d iterations; want 300", fired, n)
	}
}

func TestPause(t *testing.T) {
	design := ForNode(designSpec, "worker-1")
	chained := ForNode([]Injection{
		{Node: "w", Kind: Pause, Start: 10 * sec, End: 12 * sec},
		{Node: "w", Kind: Pause, Start: 12 * sec, End: 13 * sec},
		{Node: "w", Kind: Pause, Start: 11 * sec, End: 11500 * ms},
	}, "w")
	periodic := ForNode([]Injection{{Node: "w", Kind: Pause, Period: 10 * sec, On: 2 * sec, End: 25 * sec}}, "w")
	tests := []struct {
		name string
		s    Schedule
		t    time.Duration
		want time.Duration
	}{
		{"before", design, 9 * sec, 0},
		{"at start", design, 10 * sec, 2 * sec},
		{"inside", design, 11500 * ms, 500 * ms},
		{"at end", design, 12 * sec, 0},
		{"chained pauses", chained, 10 * sec, 3 * sec},
		{"chained, in the overlap", chained, 11200 * ms, 1800 * ms},
		{"periodic on", periodic, 21 * sec, sec},
		{"periodic off", periodic, 5 * sec, 0},
		{"periodic cut by end", periodic, 24 * sec, 0},
		{"not a pause", ForNode(designSpec, "worker-2"), 10 * sec, 0},
	}
	for _, tt := range tests {
		if got := tt.s.Pause(tt.t); got != tt.want {
			t.Errorf("%s: Pause(%v) = %v; want %v", tt.name, tt.t, got, tt.want)
		}
	}
}

func TestBandwidth(t *testing.T) {
	s := ForNode([]Injection{
		{Node: "s", Kind: Bandwidth, Rate: 20 * MiB},
		{Node: "s", Kind: Bandwidth, Rate: 5 * MiB, Start: 10 * sec, End: 20 * sec},
	}, "s")
	tests := []struct {
		s      Schedule
		t      time.Duration
		want   float64
		wantOK bool
	}{
		{s, 0, 20 * MiB, true},
		{s, 15 * sec, 5 * MiB, true}, // the tightest cap wins
		{s, 20 * sec, 20 * MiB, true},
		{ForNode(designSpec, "worker-0"), 0, 0, false},
	}
	for _, tt := range tests {
		got, ok := tt.s.Bandwidth(tt.t)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Bandwidth(%v) = %v, %v; want %v, %v", tt.t, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestForNodeAndRestart(t *testing.T) {
	all := append([]Injection(nil), designSpec...)
	all = append(all, Injection{Node: "worker-2", Kind: CPUSleep, Intensity: 0.2, FollowsRestart: true})
	s := ForNode(all, "worker-2")
	if s.Empty() || len(s.Injections()) != 2 {
		t.Fatalf("ForNode(worker-2) has %d injections; want 2", len(s.Injections()))
	}
	if !ForNode(all, "worker-7").Empty() {
		t.Errorf("ForNode(worker-7).Empty() = false; want true")
	}
	r := s.AfterRestart()
	if got := r.Injections(); len(got) != 1 || got[0].Kind != CPUSleep {
		t.Errorf("AfterRestart() = %+v; want only the cpu-sleep injection that follows restarts", got)
	}
	if !ForNode(designSpec, "worker-1").AfterRestart().Empty() {
		t.Errorf("a pause stayed with a restarted node; by default the slowness stays behind")
	}
	if got := len(s.Active(6 * sec)); got != 2 {
		t.Errorf("Active(6s) has %d injections; want 2", got)
	}
	if got := len(s.Active(40 * sec)); got != 1 {
		t.Errorf("Active(40s) has %d injections; want 1", got)
	}
}

func TestLimiter(t *testing.T) {
	type send struct {
		at   time.Duration
		n    int
		want time.Duration
	}
	tests := []struct {
		name  string
		rate  float64
		burst int
		sends []send
	}{
		{"20 MiB/s, 1 MiB chunks back to back after a 1 MiB burst", 20 * MiB, MiB, []send{
			{0, MiB, 0},
			{0, MiB, 50 * ms},       // charged at once: waits for its tokens
			{50 * ms, MiB, 50 * ms}, // the sender went at 50 ms; the next at 100 ms
			{100 * ms, MiB, 50 * ms},
			{150 * ms, MiB, 50 * ms},
		}},
		{"4 MiB burst then 50 ms each", 20 * MiB, 4 * MiB, []send{
			{0, MiB, 0}, {0, MiB, 0}, {0, MiB, 0}, {0, MiB, 0},
			{0, MiB, 50 * ms},
			{50 * ms, MiB, 50 * ms},
		}},
		{"idle time refills up to the burst only", 20 * MiB, MiB, []send{
			{0, MiB, 0},
			{10 * sec, MiB, 0},
			{10 * sec, MiB, 50 * ms},
		}},
		{"chunk larger than the burst", 10 * MiB, 64 << 10, []send{
			{0, 2 * MiB, 193750 * time.Microsecond}, // (2 MiB - 64 KiB) / 10 MiB/s
		}},
		{"queued senders", 1000, 0, []send{
			{0, 100, 100 * ms},
			{0, 100, 200 * ms},
			{100 * ms, 100, 200 * ms},
		}},
		{"time going backwards refills nothing", 1000, 0, []send{
			{sec, 100, 100 * ms},
			{0, 100, 200 * ms},
		}},
		{"unlimited", 0, 0, []send{{0, 100 * MiB, 0}, {0, 100 * MiB, 0}}},
		{"unlimited (+Inf)", math.Inf(1), 0, []send{{0, 100 * MiB, 0}}},
	}
	for _, tt := range tests {
		l := NewLimiter(tt.rate, tt.burst)
		for i, s := range tt.sends {
			if got := l.Delay(s.at, s.n); got != s.want {
				t.Errorf("%s: send %d: Delay(%v, %d) = %v; want %v", tt.name, i, s.at, s.n, got, s.want)
			}
		}
	}
}

func TestLimiterSetRate(t *testing.T) {
	l := NewLimiter(0, MiB)
	if d := l.Delay(0, 10*MiB); d != 0 {
		t.Fatalf("unlimited Delay = %v; want 0", d)
	}
	l.SetRate(20 * MiB)
	if l.Rate() != 20*MiB {
		t.Errorf("Rate() = %v; want %v", l.Rate(), 20*MiB)
	}
	// Full bucket after the unlimited period: one chunk free, then 50 ms.
	if d := l.Delay(sec, MiB); d != 0 {
		t.Errorf("first chunk after SetRate: Delay = %v; want 0", d)
	}
	if d := l.Delay(sec, MiB); d != 50*ms {
		t.Errorf("second chunk after SetRate: Delay = %v; want 50ms", d)
	}
	// Halving the rate doubles the wait of the debt.
	l.SetRate(10 * MiB)
	if d := l.Delay(sec, MiB); d != 200*ms {
		t.Errorf("after SetRate(10 MiB/s): Delay = %v; want 200ms (2 MiB owed at 10 MiB/s)", d)
	}
	l.SetRate(0)
	if d := l.Delay(sec, MiB); d != 0 {
		t.Errorf("after SetRate(0): Delay = %v; want 0", d)
	}
}

// TestCPUIsNotSleep: kind cpu (a real competitor, runtime/contend) adds no
// delay in the node's own code path and needs no hook there; cpu-sleep (the
// sleep model) does; an injection not yet active leaves the path as a node
// without injections has it.
func TestCPUIsNotSleep(t *testing.T) {
	real := ForNode([]Injection{{Node: "w", Kind: CPU, Intensity: 0.75, Start: 2 * sec, End: 4 * sec}}, "w")
	if d := real.ComputeDelay(3*sec, 40*ms, 0); d != 0 {
		t.Errorf("cpu: ComputeDelay = %v; want 0 (the competitor is the delay)", d)
	}
	if real.InProcess() || real.InProcessActive(3*sec) || !real.Contends() {
		t.Errorf("cpu: InProcess %v, InProcessActive %v, Contends %v; want false, false, true", real.InProcess(), real.InProcessActive(3*sec), real.Contends())
	}
	for _, c := range []struct {
		t    time.Duration
		want float64
	}{{sec, 0}, {3 * sec, 0.75}, {5 * sec, 0}} {
		if got := real.Contention(c.t, 0.99); got != c.want {
			t.Errorf("Contention(%v) = %v; want %v", c.t, got, c.want)
		}
	}
	two := ForNode([]Injection{{Node: "w", Kind: CPU, Intensity: 0.75}, {Node: "w", Kind: CPU, Intensity: 0.5}}, "w")
	if got := two.Contention(0, 0.99); got != 0.99 {
		t.Errorf("two competitors: Contention = %v; want capped at 0.99", got)
	}
	model := ForNode([]Injection{{Node: "w", Kind: CPUSleep, Intensity: 0.75, Start: 2 * sec}}, "w")
	if d := model.ComputeDelay(3*sec, 40*ms, 0); d != 120*ms {
		t.Errorf("cpu-sleep: ComputeDelay = %v; want 120ms", d)
	}
	if !model.InProcess() || model.InProcessActive(sec) || !model.InProcessActive(3*sec) {
		t.Errorf("cpu-sleep: InProcess %v, active at 1s %v, at 3s %v; want true, false, true", model.InProcess(), model.InProcessActive(sec), model.InProcessActive(3*sec))
	}
	if err := (Injection{Node: "w", Kind: CPU, Intensity: 0.5, Probability: 0.5}).Validate(); err == nil {
		t.Error("cpu with probability 0.5: no error")
	}
}

// TestAfterRestartInPlace: a node restarted where it was keeps its host's
// injections; the process's own (CuredByRestart) are gone with it.
func TestAfterRestartInPlace(t *testing.T) {
	s := ForNode([]Injection{
		{Node: "worker-0", Kind: Compute, Sleep: time.Millisecond, Intensity: 1, CuredByRestart: true},
		{Node: "worker-0", Kind: Pause, Start: time.Second},
	}, "worker-0")
	got := s.AfterRestartInPlace().Injections()
	if len(got) != 1 || got[0].Kind != Pause {
		t.Errorf("AfterRestartInPlace() = %+v; want only the host's pause", got)
	}
	if err := (Injection{Node: "worker-0", Kind: Pause, CuredByRestart: true, FollowsRestart: true}).Validate(); err == nil {
		t.Errorf("Validate of cured_by_restart with follows_restart = nil; want an error")
	}
}

func TestOnHost(t *testing.T) {
	all := []Injection{
		{Node: "worker-2", Kind: Compute, Sleep: 40 * time.Millisecond, Intensity: 0.4},   // worker-2's host's
		{Node: "worker-2", Kind: CPU, Intensity: 0.8},                                     // worker-2's host's
		{Node: "worker-2", Kind: CPUSleep, Intensity: 0.2, FollowsRestart: true},          // worker-2's, anywhere
		{Node: "worker-2", Kind: Pause, End: sec, CuredByRestart: true},                   // worker-2's process's
		{Node: "worker-1", Kind: Compute, Sleep: 10 * time.Millisecond, Intensity: 1},     // worker-1's host's
		{Node: "worker-1", Kind: CPUSleep, Intensity: 0.5, FollowsRestart: true},          // worker-1's, anywhere
		{Node: "server-0", Kind: Bandwidth, Rate: 1e6},                                    // server-0's host's
		{Node: "server-0", Kind: Compute, Sleep: sec, Intensity: 1, CuredByRestart: true}, // server-0's process's
	}
	kinds := func(s Schedule) []string {
		var out []string
		for _, in := range s.Injections() {
			out = append(out, in.Node+"/"+string(in.Kind))
		}
		return out
	}
	tests := []struct {
		node, host string
		relaunched bool
		want       Schedule
	}{
		{"worker-2", "worker-2", false, ForNode(all, "worker-2")},
		{"worker-2", "worker-2", true, ForNode(all, "worker-2").AfterRestartInPlace()},
		{"worker-2", "spare-0", true, ForNode(all, "worker-2").AfterRestart()},
		{"server-0", "server-0", true, ForNode(all, "server-0").AfterRestartInPlace()},
		{"server-0", "spare-1", true, ForNode(all, "server-0").AfterRestart()},
		// worker-1 lands on the host worker-2 left: that host's slowness
		// and its own that follows it.
		{"worker-1", "worker-2", true, Schedule{injections: []Injection{all[0], all[1], all[5]}}},
		// A new server on the old one's host keeps the host's link, not the
		// old process's own slowness.
		{"server-3", "server-0", false, Schedule{injections: []Injection{all[6]}}},
	}
	for _, tt := range tests {
		got := OnHost(all, tt.node, tt.host, tt.relaunched)
		if !reflect.DeepEqual(kinds(got), kinds(tt.want)) {
			t.Errorf("OnHost(%s, %s, relaunched %v) = %v; want %v", tt.node, tt.host, tt.relaunched, kinds(got), kinds(tt.want))
		}
	}
}
