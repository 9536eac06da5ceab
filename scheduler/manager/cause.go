package manager

import (
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/proto/pspb"
	"github.com/kelpie/kelpie/scheduler/cause"
)

// nodeCause is what a node's reports said of where its time went
// (scheduler/cause), on the actor: a worker's recent splits and round
// trips, a server's recent own-time counters.
type nodeCause struct {
	worker cause.Recent
	server cause.ServerRecent
}

// addSplit records a worker's report: its split and its round trips to
// each server (servers by index, as the coordinator names them). The
// caller is the actor.
func (c *nodeCause) addSplit(r *coordinatorpb.ProgressReport, servers []string) {
	sp := r.GetSplit()
	s := cause.Sample{Iterations: int(sp.GetIterations()), Phases: cause.Phases{Compute: sp.GetComputeS(), Data: sp.GetDataS(),
		Push: sp.GetPushS(), Pull: sp.GetPullS(), Wait: sp.GetWaitS()}}
	if len(r.GetComm()) > 0 {
		// One array for the report's round trips (AddTrip would grow it
		// two or three times: 20,000 reports a second at 20,000 workers).
		s.RoundTrips = make([]cause.ServerTrips, 0, len(r.GetComm()))
	}
	for _, cs := range r.GetComm() {
		if int(cs.Server) >= len(servers) {
			continue
		}
		s.AddTrip(servers[cs.Server], cs.Seconds)
	}
	if s.Iterations > 0 || len(s.RoundTrips) > 0 {
		c.worker.Add(s)
	}
}

// addStats records a server's counters. The caller is the actor.
func (c *nodeCause) addStats(st *pspb.ServerStats) {
	if st.GetRequests() > 0 {
		c.server.Add(cause.Counters{Queue: st.GetQueueSeconds(), Apply: st.GetApplySeconds(), Requests: st.GetRequests()})
	}
}

// causeInputs is what the causes are computed from, copied from the nodes.
type causeInputs struct {
	phases map[string]cause.Phases
	trips  map[string][]cause.ServerMean // worker -> its mean round trip to each server
	own    map[string][2]float64         // server -> queue, apply per request
}

// causeInputs copies every live node's recent split. The caller is
// the job's actor.
func (j *jobState) causeInputs() causeInputs {
	in := newCauseInputs()
	for _, n := range j.nodes {
		in.add(n)
	}
	return in
}

func newCauseInputs() causeInputs {
	return causeInputs{phases: map[string]cause.Phases{}, trips: map[string][]cause.ServerMean{}, own: map[string][2]float64{}}
}

// add copies n's recent split, unless n was removed. The caller is the
// job's actor.
func (in causeInputs) add(n *nodeState) {
	c := n.cause.freeze()
	in.addCause(n.name, n.role, n.removed, &c)
}

// frozenCause is what the causes need of a nodeCause, taken on the actor
// (nodeCause.freeze) and read off it: a worker's mean phases and its
// recent round trips (shared: never changed once added), a server's time
// per request. A view freezes one per node; a copy of the whole
// nodeCause (some 800 bytes) made a 20,000-node view's rows 19 MB.
type frozenCause struct {
	phases       cause.Phases
	phasesOK     bool
	trips        cause.TripsWindow
	queue, apply float64
	ownOK        bool
}

// freeze is what the causes need of c as it is now. The caller is the
// job's actor.
func (c *nodeCause) freeze() frozenCause {
	f := frozenCause{trips: c.worker.TripsWindow()}
	f.phases, f.phasesOK = c.worker.Phases()
	f.queue, f.apply, f.ownOK = c.server.PerRequest()
	return f
}

// addCause adds a node's recent split from c, frozen on the actor
// (nodeCause.freeze): off it for a view (nodeRow.cause).
func (in causeInputs) addCause(name, role string, removed bool, c *frozenCause) {
	if removed {
		return
	}
	if role == "worker" {
		if c.phasesOK {
			in.phases[name] = c.phases
		}
		if rt := c.trips.MeanTrips(); len(rt) > 0 {
			in.trips[name] = rt
		}
	} else if c.ownOK {
		in.own[name] = [2]float64{c.queue, c.apply}
	}
}

// causes is each node's dominant cause against the job's median
// (scheduler/cause), whether or not it straggles.
func (in causeInputs) causes() map[string]cause.Cause {
	out := cause.Workers(in.phases)
	if out == nil {
		out = map[string]cause.Cause{}
	}
	// A server's round trip is its workers' mean; its own time is what it
	// said, zero before it said anything (the whole round trip is then
	// its link's).
	rts := map[string][]float64{}
	for _, per := range in.trips {
		for _, x := range per {
			rts[x.Server] = append(rts[x.Server], x.Seconds)
		}
	}
	ss := map[string]cause.Own{}
	slow := cause.SlowForEach(in.trips)
	for s, xs := range rts {
		var sum float64
		for _, x := range xs {
			sum += x
		}
		o := cause.Own{RoundTrip: sum / float64(len(xs))}
		o.Queue, o.Apply = in.own[s][0], in.own[s][1]
		o.SlowFor, o.Workers = slow[s].Slow, slow[s].Of
		ss[s] = o
	}
	for s, c := range cause.Servers(ss) {
		out[s] = c
	}
	return out
}

// causeView is c as the console shows it.
func causeView(c cause.Cause) *consolepb.NodeCause {
	return &consolepb.NodeCause{Kind: string(c.Kind), Ratio: finite(c.Ratio), Detail: c.Detail, Seconds: c.Seconds, MedianSeconds: c.Median}
}

// splitView is a worker's recent phases per iteration as the console
// shows them.
func splitView(p cause.Phases) *coordinatorpb.TimeSplit {
	return &coordinatorpb.TimeSplit{ComputeS: p.Compute, DataS: p.Data, PushS: p.Push, PullS: p.Pull, WaitS: p.Wait}
}

// straggling says whether a node's class makes it a straggler.
func straggling(class string) bool { return class == "transient" || class == "persistent" }

// citeCause names in a the measured cause of the straggler it acts on —
// its target, or for a batch split the worker whose batch it cuts with the
// strongest cause — in its reason, and warns (cause_warning) when its kind
// does not answer that cause (a batch cut for a slow link). The caller
// is the job's actor.
func (j *jobState) citeCause(a *consolepb.Action, why map[string]cause.Cause) {
	node, c := "", cause.Cause{}
	consider := func(name string) {
		if x, ok := why[name]; ok && x.Ratio > c.Ratio {
			node, c = name, x
		}
	}
	switch {
	case a.Target != "":
		consider(a.Target)
	case len(a.BatchSizes) > 0:
		for w, b := range a.BatchSizes {
			if n := j.nodes[w]; n != nil && int(b)*max(int(a.Accumulation[w]), 1) < n.progress().batch {
				consider(w)
			}
		}
	}
	if node == "" {
		return
	}
	a.Cause = string(c.Kind)
	a.Reason += " [cause: " + cause.Describe(node, c) + "]"
	a.CauseWarning = cause.Mismatch(a.Kind, node, c)
}

// forgetCause drops what a node's reports said of its time when a is its
// KILL_RESTART: the relaunched process (or Pod, on another host) is
// judged by its own reports, as the Monitor forgets its BPT windows. The
// caller is the job's actor.
func (j *jobState) forgetCause(a *consolepb.Action) {
	if a.Kind != "KILL_RESTART" {
		return
	}
	if n := j.nodes[a.Target]; n != nil {
		n.cause = nodeCause{}
	}
}
