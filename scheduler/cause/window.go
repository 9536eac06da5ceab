package cause

// Keep is how many of a node's latest reports its recent split spans.
const Keep = 8

// Sample is one report of a worker: its phases summed over Iterations
// iterations, and its round trips to each server (seconds summed, count).
type Sample struct {
	Iterations int
	Phases     Phases // summed
	RoundTrips map[string]Trips
}

// Trips is a sum of round trips.
type Trips struct {
	Seconds float64
	N       int
}

// Recent is a worker's last Keep reports. The zero value is ready.
type Recent struct {
	ring [Keep]Sample
	n    int // samples added
}

// Add records a report.
func (r *Recent) Add(s Sample) {
	r.ring[r.n%Keep] = s
	r.n++
}

// Phases is the mean time per iteration in each phase over the recent
// reports; ok is false before any report carried a split.
func (r *Recent) Phases() (p Phases, ok bool) {
	var it int
	for i := range min(r.n, Keep) {
		s := r.ring[i]
		it += s.Iterations
		p.Compute += s.Phases.Compute
		p.Data += s.Phases.Data
		p.Push += s.Phases.Push
		p.Pull += s.Phases.Pull
		p.Wait += s.Phases.Wait
	}
	if it == 0 {
		return Phases{}, false
	}
	f := float64(it)
	return Phases{p.Compute / f, p.Data / f, p.Push / f, p.Pull / f, p.Wait / f}, true
}

// RoundTrips is the mean round trip to each server over the recent
// reports.
func (r *Recent) RoundTrips() map[string]float64 {
	sum := map[string]Trips{}
	for i := range min(r.n, Keep) {
		for s, t := range r.ring[i].RoundTrips {
			x := sum[s]
			x.Seconds += t.Seconds
			x.N += t.N
			sum[s] = x
		}
	}
	out := make(map[string]float64, len(sum))
	for s, t := range sum {
		if t.N > 0 {
			out[s] = t.Seconds / float64(t.N)
		}
	}
	return out
}

// Counters is a server's cumulative own time (ServerStats).
type Counters struct {
	Queue, Apply float64
	Requests     int64
}

// ServerRecent is a server's last Keep+1 counters: their differences span
// its recent requests. The zero value is ready.
type ServerRecent struct {
	ring [Keep + 1]Counters
	n    int
}

// Add records the server's counters as they are now. Counters that went
// back (a restarted server) start the window afresh.
func (r *ServerRecent) Add(c Counters) {
	if r.n > 0 && c.Requests < r.ring[(r.n-1)%(Keep+1)].Requests {
		r.n = 0
	}
	r.ring[r.n%(Keep+1)] = c
	r.n++
}

// PerRequest is the server's mean queueing and handling per request over
// its recent counters; ok is false before two of them with requests in
// between.
func (r *ServerRecent) PerRequest() (queue, apply float64, ok bool) {
	if r.n < 2 {
		return 0, 0, false
	}
	last := r.ring[(r.n-1)%(Keep+1)]
	first := r.ring[max(r.n-Keep-1, 0)%(Keep+1)]
	n := last.Requests - first.Requests
	if n <= 0 {
		return 0, 0, false
	}
	return (last.Queue - first.Queue) / float64(n), (last.Apply - first.Apply) / float64(n), true
}
