package cause

// Keep is how many of a node's latest reports its recent split spans.
const Keep = 8

// Sample is one report of a worker: its phases summed over Iterations
// iterations, and its round trips to each server (seconds summed, count;
// one entry per server). A slice, not a map: a sample is made per report,
// 20,000 a second at 20,000 workers, and a report names a few servers.
type Sample struct {
	Iterations int
	Phases     Phases // summed
	RoundTrips []ServerTrips
}

// ServerTrips is a sum of round trips to one server.
type ServerTrips struct {
	Server string
	Trips
}

// Trips is a sum of round trips.
type Trips struct {
	Seconds float64
	N       int
}

// AddTrip adds a round trip of seconds to server to s.
func (s *Sample) AddTrip(server string, seconds float64) {
	for i := range s.RoundTrips {
		if t := &s.RoundTrips[i]; t.Server == server {
			t.Seconds += seconds
			t.N++
			return
		}
	}
	s.RoundTrips = append(s.RoundTrips, ServerTrips{Server: server, Trips: Trips{Seconds: seconds, N: 1}})
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
		for _, t := range r.ring[i].RoundTrips {
			s := t.Server
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

// ServerMean is the mean round trip to one server.
type ServerMean struct {
	Server  string
	Seconds float64
}

// MeanTrips is RoundTrips as a slice (servers in the order they first
// appear in the recent reports), summed in the same order: no map per
// call — a view asks it of every worker, 20,000 maps a view at 20,000.
func (r *Recent) MeanTrips() []ServerMean {
	w := r.TripsWindow()
	return w.MeanTrips()
}

// TripsWindow is the round trips of a Recent's samples as they are now:
// what MeanTrips is computed from, a fifth of the Recent's size (a view
// freezes one per worker, 20,000 of them a second at 20,000). It shares
// the samples' round trips, which are never changed once added.
type TripsWindow struct {
	trips [Keep][]ServerTrips
	n     int
}

// TripsWindow is r's round trips as they are now.
func (r *Recent) TripsWindow() TripsWindow {
	w := TripsWindow{n: min(r.n, Keep)}
	for i := range w.n {
		w.trips[i] = r.ring[i].RoundTrips
	}
	return w
}

// MeanTrips is Recent.MeanTrips of the Recent w was taken from, as it was
// then.
func (w *TripsWindow) MeanTrips() []ServerMean {
	var buf [16]ServerTrips
	sums := buf[:0]
	for i := range w.n {
	next:
		for at, t := range w.trips[i] {
			// A worker's reports list its servers in one order as a
			// rule: try the sum at the trip's own index first (the
			// sums name each server once), then all of them.
			if at < len(sums) && sums[at].Server == t.Server {
				sums[at].Seconds += t.Seconds
				sums[at].N += t.N
				continue
			}
			for k := range sums {
				if sums[k].Server == t.Server {
					sums[k].Seconds += t.Seconds
					sums[k].N += t.N
					continue next
				}
			}
			sums = append(sums, t)
		}
	}
	var out []ServerMean
	for _, t := range sums {
		if t.N > 0 {
			if out == nil {
				out = make([]ServerMean, 0, len(sums))
			}
			out = append(out, ServerMean{Server: t.Server, Seconds: t.Seconds / float64(t.N)})
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
