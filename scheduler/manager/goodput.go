package manager

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/coordinatorpb"
	"github.com/kelpie/kelpie/scheduler/hang"
	"github.com/kelpie/kelpie/scheduler/ledger"
)

// StateHung is how a running job whose progress stopped for longer than
// its bound (scheduler/hang) shows in its views. It is a view of the
// running state, not a state of its own: the job goes on running (and
// leaves it as soon as it makes progress).
const StateHung = "hung"

// goodputState is the job's goodput ledger and hang detector, fed from its
// reports (on the actor) and its tick (on the ticker) and read by its
// views' builders.
type goodputState struct {
	// mu guards the ledger and the detector (the fields up to inMu)
	// between the ticker and the view builders (lockLedger). The tick
	// holds it while it advances every node and judges the hang (tens of
	// milliseconds at 20,000 nodes), so the actor never takes it: a report
	// is queued in the ledger's inbox (in), which whoever locks the ledger
	// takes in first. Reports are taken in in their order and only ever
	// set a node's latest share, so the ledger reads as it did when each
	// report took the lock itself — and the actor no longer waited for
	// the tick (at 20,000 agents those waits were most of the ingest p99).
	mu      sync.Mutex
	led     *ledger.Ledger
	det     hang.Detector
	verdict hang.Verdict
	// comm is the seconds workers spent on the wire with each server
	// since the last tick: a server's share of communicating time.
	comm  map[string]float64
	spare []ledgerReport // in's other buffer (under mu)

	// inMu guards the inbox: held for O(1) per report, and by lockLedger
	// while it swaps the buffers; never while mu is wanted.
	inMu   sync.Mutex
	in     []ledgerReport
	inComm map[string]float64 // comm's share since the last take-in
}

// ledgerReport is a report on its way to the ledger (Ledger.Report).
type ledgerReport struct {
	node string
	at   time.Time
	m    ledger.Measure
}

// ledgerInbox bounds the reports waiting for the ledger: past it a report
// takes the ledger's lock and the inbox in itself (a tick takes them in
// every second, some 20,000 at 20,000 agents).
const ledgerInbox = 1 << 16

// lockLedger locks the ledger (gp.mu) and takes in the reports queued for
// it. The caller unlocks gp.mu.
func (j *jobState) lockLedger() {
	j.gp.mu.Lock()
	j.gp.inMu.Lock()
	in := j.gp.in
	j.gp.in = j.gp.spare[:0]
	for s, sec := range j.gp.inComm {
		j.gp.comm[s] += sec
	}
	clear(j.gp.inComm)
	j.gp.inMu.Unlock()
	if l := j.gp.led; l != nil {
		for _, r := range in {
			l.Report(r.node, r.at, r.m)
		}
	}
	clear(in) // no names kept
	j.gp.spare = in[:0]
}

// initGoodput starts the job's ledger at its submission.
func (j *jobState) initGoodput() {
	var workers, servers []string
	for name, n := range j.nodes {
		if n.role == "worker" {
			workers = append(workers, name)
		} else {
			servers = append(servers, name)
		}
	}
	j.gp.led = ledger.New(j.submitted, workers, servers)
	j.gp.comm, j.gp.inComm = map[string]float64{}, map[string]float64{}
	cfg := hang.Config{Min: j.m.cfg.HangMin, Factor: j.m.cfg.HangFactor}
	if t := j.spec.Train; t.HangMin > 0 || t.HangFactor > 0 {
		cfg = hang.Config{Min: cmpOr(t.HangMin, cfg.Min), Factor: cmpOr(t.HangFactor, cfg.Factor)}
	}
	j.gp.det.Config = cfg
}

func cmpOr[T time.Duration | float64](a, b T) T {
	if a > 0 {
		return a
	}
	return b
}

// goodputReport takes a worker's report into the ledger: its time on the
// wire (its push-pulls' seconds, the servers' held time left out, divided
// by the servers it exchanged with, since it talks to them side by side;
// at most its BPT), its computing (the rest of its BPT: forward and
// backward, data loading, a compute straggler's delay) and its wait at the
// pull condition. A report without push-pull samples (allreduce) counts
// its compute_seconds as computing and the rest of its BPT (the exchange)
// as communicating.
func (j *jobState) goodputReport(node string, r *coordinatorpb.ProgressReport, now time.Time, servers []string) {
	var bpt, wait float64
	for _, b := range r.BptSeconds {
		bpt += b
	}
	for _, w := range r.WaitSeconds {
		wait += w
	}
	var comm float64
	with := 0 // the servers it exchanged with
	for i, cs := range r.Comm {
		comm += cs.Seconds
		if !slices.ContainsFunc(r.Comm[:i], func(x *coordinatorpb.CommSample) bool { return x.Server == cs.Server }) {
			with++
		}
	}
	m := ledger.Measure{Compute: r.ComputeSeconds, Comm: max(bpt-r.ComputeSeconds, 0), Wait: wait}
	if with > 0 {
		m.Comm = min(comm/float64(with), bpt)
		m.Compute = bpt - m.Comm
	}
	g := &j.gp
	g.inMu.Lock()
	if g.inComm == nil { // no ledger (initGoodput)
		g.inMu.Unlock()
		return
	}
	for _, cs := range r.Comm {
		if int(cs.Server) < len(servers) {
			g.inComm[servers[cs.Server]] += cs.Seconds
		}
	}
	g.in = append(g.in, ledgerReport{node: node, at: now, m: m})
	full := len(g.in) >= ledgerInbox
	g.inMu.Unlock()
	if full { // nothing took the inbox in: bounded, as a report once was
		j.lockLedger()
		j.gp.mu.Unlock()
	}
}

// goodputTick advances the ledger to now with the phases the job and its
// nodes are in, records the ETA at the check points, and judges whether
// the job has hung (an event when that changes).
func (j *jobState) goodputTick(now time.Time) {
	var (
		jobPhase ledger.Phase
		phases   map[string]ledger.Phase
		nodes    []hang.Node
		workers  int
	)
	j.lifecycle(func(job ledger.Phase, ph map[string]ledger.Phase, ns []hang.Node, w int) {
		jobPhase, phases, nodes, workers = job, ph, ns, w
	})
	name := j.spec.Name
	todo, doing, _, total := j.coord.ShardCounts()
	eta, ok := ledger.ETA(todo, doing, total, j.coord.Plan().Total(), j.thr.rate())
	progress := j.coord.WorkerSamples()

	j.lockLedger()
	if j.gp.led == nil {
		j.gp.mu.Unlock()
		return
	}
	if span := now.Sub(j.gp.led.Now()).Seconds(); span > 0 && workers > 0 {
		for s, sec := range j.gp.comm {
			j.gp.led.ServerComm(s, now, sec/span/float64(workers))
		}
	}
	clear(j.gp.comm)
	j.gp.led.Advance(now, jobPhase, phases)
	j.gp.led.ObserveETA(now, 1-ledger.Left(todo, doing, total), eta, ok)
	excused := jobPhase != ledger.Running
	for _, p := range phases {
		excused = excused || p == ledger.Recovering
	}
	var v hang.Verdict
	if excused {
		j.gp.det.Excuse(now)
	} else {
		v = j.gp.det.Observe(hang.Observation{Now: now, Progress: progress, Nodes: nodes})
	}
	was := j.gp.verdict
	j.gp.verdict = v
	j.gp.mu.Unlock()

	switch {
	case v.Hung && (!was.Hung || !slices.Equal(v.Missing, was.Missing)):
		j.m.event(name, "job", "", fmt.Sprintf("%s hung: no progress for %s (bound %s), waiting for %s%s", name,
			now.Sub(v.Since).Round(time.Second), v.Bound.Round(100*time.Millisecond), orNone(v.Missing), holdingText(v.Holding)), "")
		j.invalidateViews()
	case was.Hung && !v.Hung:
		j.m.event(name, "job", "", name+" is no longer hung", "")
		j.invalidateViews()
	}
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "no node in particular"
	}
	return strings.Join(names, ", ")
}

func holdingText(servers []string) string {
	if len(servers) == 0 {
		return ""
	}
	return "; " + strings.Join(servers, ", ") + " hold pushes waiting for them"
}

// lifecycle hands got the phase the job and each node are in by their
// state, what the hang detector needs of the nodes, and the live workers,
// taken on the job's actor: the job's phase and its node list in one
// turn, the nodes in turns of rowsPerTurn (as a view's rows: an O(nodes)
// turn would hold the reports back). The job is queued until it starts,
// recovering while the checkpoint-and-restart baseline relaunches it,
// paused while a block-table change has blocks in transit, and otherwise
// running (its phases come from its workers'). A node is queued until its
// first report (a worker; a server until it runs), recovering while it
// restarts (and after a restart until it reports again), running while it
// runs, idle once it is done, stopped, failed or lost. The caller is not
// the actor.
func (j *jobState) lifecycle(got func(ledger.Phase, map[string]ledger.Phase, []hang.Node, int)) {
	job := ledger.Running
	var all []*nodeState
	j.onActor(func() {
		switch {
		case j.state == StateQueued || j.state == StateStarting:
			job = ledger.Queued
		case j.relaunching > 0:
			job = ledger.Recovering
		}
		all = make([]*nodeState, 0, len(j.nodes))
		for _, n := range j.nodes {
			all = append(all, n)
		}
	})
	phases := make(map[string]ledger.Phase, len(all))
	nodes := make([]hang.Node, 0, len(all))
	workers, paused := 0, false
	for len(all) > 0 {
		turn := all[:min(rowsPerTurn, len(all))]
		all = all[len(turn):]
		j.onActor(func() {
			for _, n := range turn {
				ph, hn, live, moving := n.lifecycle()
				phases[n.name] = ph
				nodes = append(nodes, hn)
				if live && n.role == "worker" {
					workers++
				}
				paused = paused || moving
			}
		})
	}
	if job == ledger.Running && paused {
		job = ledger.Paused
	}
	got(job, phases, nodes, workers)
}

// lifecycle is the node's phase, what the hang detector needs of it,
// whether it is live and whether it has blocks in transit (a server). The
// caller is the job's actor.
func (n *nodeState) lifecycle() (ledger.Phase, hang.Node, bool, bool) {
	p := n.progress()
	st := n.status.State
	live := st == agentpb.NodeState_NODE_STATE_RUNNING && !n.removed
	ph := ledger.Idle
	switch st {
	case agentpb.NodeState_NODE_STATE_STARTING, agentpb.NodeState_NODE_STATE_UNSPECIFIED:
		ph = ledger.Queued
		if n.status.Restarts > 0 || n.relaunched {
			ph = ledger.Recovering
		}
	case agentpb.NodeState_NODE_STATE_RESTARTING:
		ph = ledger.Recovering
	case agentpb.NodeState_NODE_STATE_RUNNING:
		ph = ledger.Running
		if n.role == "worker" && !p.reported {
			ph = ledger.Queued
			if n.status.Restarts > 0 || n.relaunched {
				ph = ledger.Recovering
			}
		}
	}
	if n.removed {
		ph = ledger.Idle
	}
	hn := hang.Node{Name: n.name, Server: n.role != "worker", Live: live, Iteration: p.iteration, Heard: p.reportedAt}
	if p.rate > 0 {
		hn.Iter = time.Duration(float64(time.Second) / p.rate)
	}
	moving := false
	if s := n.stats; s != nil {
		hn.Version, hn.Held = s.VTrain, s.HeldPulls
		for _, w := range s.Behind {
			hn.Behind = append(hn.Behind, spec.WorkerName(int(w)))
		}
		moving = s.InTransit > 0 || s.Outgoing > 0
	}
	return ph, hn, live, moving
}

// goodputView fills the view's goodput and, while the job is hung, its
// hung state (the ledger as of the job's last tick, or its end).
func (j *jobState) goodputView(v *consolepb.JobView, over bool, ended time.Time) {
	todo, doing, total := int(v.ShardsTodo), int(v.ShardsDoing), int(v.ShardsTotal)
	var eta float64
	var etaOK bool
	if !over {
		eta, etaOK = ledger.ETA(todo, doing, total, j.coord.Plan().Total(), j.thr.rate())
	}
	j.lockLedger()
	defer j.gp.mu.Unlock()
	l := j.gp.led
	if l == nil || over && !l.Now().After(j.submitted) {
		return // a job that ended before this scheduler ran has no ledger
	}
	if over && !ended.IsZero() {
		l.End(ended)
	}
	at := l.Now()
	ph := l.Job(at)
	g := &consolepb.Goodput{AgeS: proto.Float64(l.Age(at)), Phases: ph.Map(), ProductiveShare: proto.Float64(ph.Share())}
	if etaOK {
		g.EtaS = proto.Float64(eta)
	}
	for _, c := range l.Checks() {
		ec := &consolepb.EtaCheck{Percent: int32(c.Percent), At: ts(c.At), PredictedS: c.Predicted}
		if c.Done {
			ec.ActualS, ec.Error = proto.Float64(c.Actual), proto.Float64(c.Error())
		}
		g.EtaChecks = append(g.EtaChecks, ec)
	}
	v.Goodput = g
	if h := j.gp.verdict; h.Hung && !over {
		v.State = StateHung
		v.Hung = &consolepb.Hung{Since: ts(h.Since), Missing: h.Missing, Holding: h.Holding, BoundS: h.Bound.Seconds(), Detected: ts(h.Detected)}
	}
}

// nodePhasesView fills each node's phases (the detail view's rows). The
// ledger's lock is held for rowsPerTurn nodes at a time, and only to copy
// their phases: the job's actor takes it for every report (goodputReport),
// and a 20,000-node view that made each node's map under it held the
// reports back for milliseconds.
func (j *jobState) nodePhasesView(nodes []*consolepb.NodeView) {
	type nodePhases struct {
		p  ledger.Phases
		ok bool
	}
	got := make([]nodePhases, len(nodes))
	for from := 0; from < len(nodes); from += rowsPerTurn {
		to := min(from+rowsPerTurn, len(nodes))
		j.lockLedger()
		l := j.gp.led
		if l == nil {
			j.gp.mu.Unlock()
			return
		}
		for i := from; i < to; i++ {
			got[i].p, got[i].ok = l.Node(nodes[i].Name, l.Now())
		}
		j.gp.mu.Unlock()
	}
	for i, nv := range nodes {
		if got[i].ok {
			nv.Phases = got[i].p.Map()
		}
	}
}
