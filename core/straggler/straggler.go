// Package straggler computes the slowness injected into a node for
// experiments and the demo, from the job spec's `stragglers:` block: an added
// compute delay per iteration (AntDT §VII-A4: T_delay = SleepDuration ×
// Intensity with some probability), CPU contention that stretches compute
// time, a bandwidth cap on a server's link (each direction on its own
// budget, as a full-duplex NIC), and pauses.
//
// Two kinds model a contended CPU. cpu is contention for real: a competitor
// process takes a share of the CPU the node's process is pinned to
// (runtime/contend carries it out; nothing here delays anything). cpu-sleep
// is the model: compute time stretched by sleeping, which on a machine
// whose cores the nodes share frees CPU for the node's peers instead of
// taking it (until issue 26 it was what kind cpu meant).
//
// Everything here is pure: the caller passes the time since the job started
// and its own uniform draws, and does the sleeping. An injection is active
// from Start to End (End 0: to the end of the job); a transient one is, within
// that span, active for the first On of every Period, phase counted from
// Start. Several active injections of one node add up (compute, cpu), take
// the tightest cap (bandwidth) or chain (pause).
package straggler

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Kind is what an injection does.
type Kind string

// Injection kinds.
const (
	Compute   Kind = "compute"   // add Sleep × Intensity per iteration (per request on a server)
	CPU       Kind = "cpu"       // contention for real: a competitor takes Intensity of the node's CPU (runtime/contend)
	CPUSleep  Kind = "cpu-sleep" // the sleep model: compute time × 1/(1-Intensity) (a server's: handling each request)
	Bandwidth Kind = "bandwidth" // cap a server's link at Rate bytes per second, each direction on its own budget
	Pause     Kind = "pause"     // the node stops while active
	Link      Kind = "link"      // tc caps a node's link or a rack's uplink at Rate, each way (link.go)
)

// Injection is one entry of the spec's `stragglers:` block.
type Injection struct {
	Node string
	Kind Kind

	Sleep       time.Duration // compute: SleepDuration
	Intensity   float64       // compute: in [0, 1]; cpu, cpu-sleep: in [0, 1)
	Probability float64       // compute, cpu-sleep: chance per iteration; 0 means 1 (cpu: 1 only)

	Start, End time.Duration // active from Start; End 0 = until the end
	Period, On time.Duration // transient: active for the first On of every Period

	Rate float64 // bandwidth, link: bytes per second
	// Region (link only, instead of Node) is the rack whose uplink is
	// capped.
	Region string

	// FollowsRestart keeps the injection on the node after a KILL_RESTART;
	// by default the slowness belongs to the old host and stays behind.
	FollowsRestart bool
	// CuredByRestart makes the slowness the process's own rather than its
	// host's: a KILL_RESTART leaves it behind also when the node is
	// restarted where it was.
	CuredByRestart bool
}

// Validate reports the first field that is out of range.
func (in Injection) Validate() error {
	where := fmt.Sprintf("straggler %s/%s", in.Node, in.Kind)
	if in.Node == "" && (in.Kind != Link || in.Region == "") {
		return fmt.Errorf("straggler: node is empty")
	}
	if in.CuredByRestart && (in.FollowsRestart || in.Kind == Link) {
		return fmt.Errorf("%s: cured_by_restart is a process's own slowness: not with follows_restart, not for a link", where)
	}
	switch in.Kind {
	case Compute:
		if in.Sleep <= 0 {
			return fmt.Errorf("%s: sleep must be > 0", where)
		}
		if !(in.Intensity >= 0 && in.Intensity <= 1) {
			return fmt.Errorf("%s: intensity %v must be in [0, 1]", where, in.Intensity)
		}
	case CPU, CPUSleep:
		if !(in.Intensity >= 0 && in.Intensity < 1) {
			return fmt.Errorf("%s: intensity %v must be in [0, 1)", where, in.Intensity)
		}
		if in.Kind == CPU && in.Probability != 0 && in.Probability != 1 {
			return fmt.Errorf("%s: probability %v: a competitor contends while active (a chance per iteration is cpu-sleep's)", where, in.Probability)
		}
	case Bandwidth, Link:
		if !(in.Rate > 0) || math.IsInf(in.Rate, 1) {
			return fmt.Errorf("%s: rate %v must be a positive number of bytes per second", where, in.Rate)
		}
	case Pause:
		if in.End == 0 && (in.Period == 0 || in.On == in.Period) {
			return fmt.Errorf("%s: a pause needs an end or an off time in its period, or the node never resumes", where)
		}
	default:
		return fmt.Errorf("straggler %s: unknown kind %q (want compute, cpu, cpu-sleep, bandwidth, pause or link)", in.Node, in.Kind)
	}
	if !(in.Probability >= 0 && in.Probability <= 1) {
		return fmt.Errorf("%s: probability %v must be in [0, 1]", where, in.Probability)
	}
	if in.Start < 0 {
		return fmt.Errorf("%s: start %v is negative", where, in.Start)
	}
	if in.End != 0 && in.End <= in.Start {
		return fmt.Errorf("%s: end %v must be after start %v", where, in.End, in.Start)
	}
	if in.Period < 0 || in.On < 0 {
		return errors.New(where + ": period and on must not be negative")
	}
	if in.Period == 0 && in.On != 0 {
		return fmt.Errorf("%s: on %v needs a period", where, in.On)
	}
	if in.Period > 0 && (in.On == 0 || in.On > in.Period) {
		return fmt.Errorf("%s: on %v must be in (0, period %v]", where, in.On, in.Period)
	}
	return nil
}

// Active reports whether the injection is in force at t (time since the job
// started).
func (in Injection) Active(t time.Duration) bool {
	if t < in.Start || (in.End != 0 && t >= in.End) {
		return false
	}
	return in.Period == 0 || (t-in.Start)%in.Period < in.On
}

// until is how long from t the injection stays active, given it is active
// at t.
func (in Injection) until(t time.Duration) time.Duration {
	left := time.Duration(math.MaxInt64)
	if in.End != 0 {
		left = in.End - t
	}
	if in.Period > 0 {
		left = min(left, in.On-(t-in.Start)%in.Period)
	}
	return left
}

// Schedule is the injections of one node.
type Schedule struct {
	injections []Injection
}

// ForNode picks the injections aimed at node, in spec order.
func ForNode(all []Injection, node string) Schedule {
	var s Schedule
	for _, in := range all {
		if in.Node == node {
			s.injections = append(s.injections, in)
		}
	}
	return s
}

// Empty reports whether the node has no injection at all.
func (s Schedule) Empty() bool { return len(s.injections) == 0 }

// AfterRestartInPlace is the schedule of the node restarted where it was
// (the agent restarts its role in place): the host's injections stay, the
// process's own (CuredByRestart) are gone with the old process.
func (s Schedule) AfterRestartInPlace() Schedule {
	var out Schedule
	for _, in := range s.injections {
		if !in.CuredByRestart {
			out.injections = append(out.injections, in)
		}
	}
	return out
}

// Injections returns the node's injections.
func (s Schedule) Injections() []Injection { return append([]Injection(nil), s.injections...) }

// AfterRestart is the schedule of the node relaunched by KILL_RESTART on
// a fresh host (a spare one, OnHost): only the injections marked
// FollowsRestart come along. A node restarted where it was keeps its
// host's injections (AfterRestartInPlace): the slowness of a host stays
// with whatever runs on it.
func (s Schedule) AfterRestart() Schedule {
	var out Schedule
	for _, in := range s.injections {
		if in.FollowsRestart {
			out.injections = append(out.injections, in)
		}
	}
	return out
}

// OnHost is the schedule of node running on a simulated host
// (cluster.spare_hosts), where every node starts on a host named after
// it and spare hosts have names of their own: the host's injections —
// those aimed at the node that started on it, neither FollowsRestart nor
// CuredByRestart, which belong to the host and stay there when its node
// moves — and the node's own FollowsRestart injections, and its
// CuredByRestart ones unless the process was relaunched. On its own host
// that is ForNode (AfterRestartInPlace once relaunched); on a spare host,
// AfterRestart; on a host another node left, that host's slowness.
func OnHost(all []Injection, node, host string, relaunched bool) Schedule {
	var s Schedule
	for _, in := range all {
		switch {
		case in.Node == node && in.FollowsRestart,
			in.Node == node && in.CuredByRestart && !relaunched,
			in.Node == host && !in.FollowsRestart && !in.CuredByRestart:
			s.injections = append(s.injections, in)
		}
	}
	return s
}

// InProcess reports whether the node has an injection the role carries out
// itself, in its own code path (compute, cpu-sleep, bandwidth, pause); cpu
// (a competitor process) and link (tc) do not touch it.
func (s Schedule) InProcess() bool {
	for _, in := range s.injections {
		if in.inProcess() {
			return true
		}
	}
	return false
}

func (in Injection) inProcess() bool {
	return in.Kind == Compute || in.Kind == CPUSleep || in.Kind == Bandwidth || in.Kind == Pause
}

// InProcessActive reports whether an in-process injection is in force at
// t: while none is, the role runs exactly as a node without injections
// (the server keeps its inline, staged and in-place paths).
func (s Schedule) InProcessActive(t time.Duration) bool {
	for _, in := range s.injections {
		if in.inProcess() && in.Active(t) {
			return true
		}
	}
	return false
}

// Contention is the share of the node's CPU competitors take at t: the
// active cpu injections' intensities added up, at most max (they cannot
// take all of it).
func (s Schedule) Contention(t time.Duration, most float64) float64 {
	c := 0.0
	for _, in := range s.injections {
		if in.Kind == CPU && in.Active(t) {
			c += in.Intensity
		}
	}
	return min(c, most)
}

// Contends reports whether the node has a cpu injection at all.
func (s Schedule) Contends() bool {
	for _, in := range s.injections {
		if in.Kind == CPU {
			return true
		}
	}
	return false
}

// Active returns the injections in force at t.
func (s Schedule) Active(t time.Duration) []Injection {
	var out []Injection
	for _, in := range s.injections {
		if in.Active(t) {
			out = append(out, in)
		}
	}
	return out
}

// ComputeDelay is the extra time to add to an iteration (or a server
// request) that starts at t and whose own compute took compute. u is a
// uniform draw from [0, 1), shared by the injections of this call. A compute
// injection adds Sleep × Intensity, a cpu-sleep injection compute × I/(1-I) (the
// stretch of a core shared with a competitor that takes a fraction I of it,
// so a smaller batch shrinks the delay too); each applies when u <
// Probability (0 meaning always).
func (s Schedule) ComputeDelay(t time.Duration, compute time.Duration, u float64) time.Duration {
	var d time.Duration
	for _, in := range s.injections {
		if (in.Kind != Compute && in.Kind != CPUSleep) || !in.Active(t) {
			continue
		}
		if p := in.Probability; p != 0 && u >= p {
			continue
		}
		if in.Kind == Compute {
			d += scale(in.Sleep, in.Intensity)
		} else {
			d += scale(compute, in.Intensity/(1-in.Intensity))
		}
	}
	return d
}

// CPUDelay is the part of ComputeDelay that stretches compute (kind
// cpu-sleep): what a server adds after a request kept it busy for compute, so
// that a server on a contended CPU slows down in proportion to the work it
// is given (PSLD §6's disrupted machine pattern), where kind compute adds
// the same delay to every request however small.
func (s Schedule) CPUDelay(t time.Duration, compute time.Duration, u float64) time.Duration {
	var d time.Duration
	for _, in := range s.injections {
		if in.Kind != CPUSleep || !in.Active(t) {
			continue
		}
		if p := in.Probability; p != 0 && u >= p {
			continue
		}
		d += scale(compute, in.Intensity/(1-in.Intensity))
	}
	return d
}

func scale(d time.Duration, f float64) time.Duration {
	return time.Duration(math.Round(float64(d) * f))
}

// Pause reports how long from t the node stays paused: 0 when it runs.
// Back-to-back or overlapping pauses count as one (up to maxChain of them).
func (s Schedule) Pause(t time.Duration) (remaining time.Duration) {
	at := t
	for range maxChain {
		var step time.Duration
		for _, in := range s.injections {
			if in.Kind == Pause && in.Active(at) {
				step = max(step, in.until(at))
			}
		}
		if step == 0 {
			return at - t
		}
		if step > math.MaxInt64-at {
			return math.MaxInt64 - t
		}
		at += step
	}
	return at - t
}

// maxChain bounds how many abutting pause windows Pause follows.
const maxChain = 1000

// Bandwidth is the node's link rate at t when a bandwidth injection is
// active: the lowest of the active caps.
func (s Schedule) Bandwidth(t time.Duration) (bytesPerSec float64, ok bool) {
	for _, in := range s.injections {
		if in.Kind == Bandwidth && in.Active(t) && (!ok || in.Rate < bytesPerSec) {
			bytesPerSec, ok = in.Rate, true
		}
	}
	return bytesPerSec, ok
}

// Limiter is a token bucket of bytes, with time passed in. It starts full.
// A sender asks Delay before sending n bytes and waits the answer; the bytes
// are charged at once, so the bucket may go into debt and later senders
// queue behind. The zero rate means no limit.
type Limiter struct {
	rate   float64 // bytes per second; <= 0: unlimited
	burst  float64
	tokens float64
	last   time.Duration
}

// NewLimiter returns a limiter of rate bytes per second holding at most
// burst bytes. A rate <= 0 (or +Inf) does not limit.
func NewLimiter(rate float64, burst int) *Limiter {
	b := float64(max(burst, 0))
	return &Limiter{rate: rate, burst: b, tokens: b}
}

func (l *Limiter) unlimited() bool { return !(l.rate > 0) || math.IsInf(l.rate, 1) }

// Delay charges n bytes sent at now and returns how long the sender must
// wait before sending them.
func (l *Limiter) Delay(now time.Duration, n int) time.Duration {
	if l.unlimited() {
		l.last = max(l.last, now)
		l.tokens = l.burst
		return 0
	}
	if now > l.last {
		l.tokens = min(l.burst, l.tokens+l.rate*(now-l.last).Seconds())
		l.last = now
	}
	l.tokens -= float64(n)
	if l.tokens >= 0 {
		return 0
	}
	wait := math.Ceil(-l.tokens / l.rate * float64(time.Second))
	if wait >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(wait)
}

// SetRate changes the rate for the time from the last Delay on. A rate <= 0
// lifts the limit.
func (l *Limiter) SetRate(rate float64) { l.rate = rate }

// Rate is the current rate in bytes per second (<= 0: unlimited).
func (l *Limiter) Rate() float64 { return l.rate }
