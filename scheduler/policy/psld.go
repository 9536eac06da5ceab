package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kelpie/kelpie/core/policydecl"
	"github.com/kelpie/kelpie/scheduler/monitor"
)

// Profile is a server's fitted communication model, PSLD's
// Pred_mean(r, s) = α_r·s + β_r (§4.1), from monitor.ServerStat.
type Profile struct {
	Alpha float64 // seconds per byte
	Beta  float64 // seconds
}

// Mean is Pred_mean at size s bytes.
func (p Profile) Mean(s float64) float64 { return p.Alpha*s + p.Beta }

// AssignPSLD is PSLD's ε-greedy load distribution (Alg. 3) with the exploit
// step of Alg. 2. Blocks (sizes in bytes) are placed one by one, in order,
// on servers 0..len(profiles)−1; the result maps each block to a server.
// With probability 1−ε a block goes to the superior server (indices into
// profiles, from monitor.SuperiorSet: Alg. 1) of least cost
//
//	cost_r = θ0/ω · Pred_mean(r, S_r) + θ1 · S_r/S_assign      (Alg. 2 line 8)
//
// where S_r is r's assigned bytes including this block, ω the mean of
// Pred_mean(r, bytes on r) over the superior set (line 4) and S_assign the
// bytes assigned so far; ties go to the later server in superior (line 9
// compares with ≤). With probability ε it goes to a server drawn uniformly
// from all of them (line 8 of Alg. 3). Dividing the cost by θ0 leaves the
// choice unchanged, so only θ1/θ0 is a parameter (1 in the paper, §6).
//
// Two details the paper leaves open. S_assign counts the block being
// placed, so the load term is the share r would hold afterwards (in
// (0, 1], as §4.3 describes it) and is defined for the first block. When
// ω is 0 (no bytes placed and β = 0), it is taken with this block on each
// server instead; if that is 0 too, the communication term is dropped.
//
// ε ≤ 0 never explores and does not touch rng (which may then be nil), so
// the assignment is deterministic; ε ≥ 1 always explores. An empty
// superior set exploits over all servers. With no servers every block
// gets −1. O(blocks × |superior|): about 10 ms for 10,000 blocks over
// 1,000 superior servers.
func AssignPSLD(blocks []int64, profiles []Profile, superior []int, theta1OverTheta0, epsilon float64, rng *rand.Rand) []int {
	out := make([]int, len(blocks))
	n := len(profiles)
	if n == 0 {
		for i := range out {
			out[i] = -1
		}
		return out
	}
	// The superior servers, compacted so the exploit loop runs over
	// contiguous arrays; pos maps a server to its slot or −1.
	pos := make([]int, n)
	for i := range pos {
		pos[i] = -1
	}
	var sup []int
	for _, r := range superior {
		if r >= 0 && r < n && pos[r] < 0 {
			pos[r] = len(sup)
			sup = append(sup, r)
		}
	}
	if len(sup) == 0 {
		for r := range n {
			pos[r] = r
			sup = append(sup, r)
		}
	}
	k := len(sup)
	alpha := make([]float64, k)
	beta := make([]float64, k)
	load := make([]float64, k)
	var sumAlpha, sumPred float64 // Σα and Σ Pred_mean(r, load_r) over the superior set
	for p, r := range sup {
		alpha[p], beta[p] = profiles[r].Alpha, profiles[r].Beta
		sumAlpha += alpha[p]
		sumPred += beta[p]
	}
	var assigned float64
	place := func(i, r int, b float64) {
		out[i] = r
		assigned += b
		if p := pos[r]; p >= 0 {
			load[p] += b
			sumPred += alpha[p] * b
		}
	}
	for i, size := range blocks {
		b := float64(size)
		if epsilon >= 1 || epsilon > 0 && rng.Float64() > 1-epsilon {
			place(i, rng.IntN(n), b)
			continue
		}
		omega := sumPred / float64(k)
		if !(omega > 0) {
			omega = (sumPred + sumAlpha*b) / float64(k)
		}
		c0 := 0.0
		if omega > 0 {
			c0 = 1 / omega
		}
		c1 := 0.0
		if s := assigned + b; s > 0 {
			c1 = theta1OverTheta0 / s
		}
		place(i, sup[cheapest(load, alpha, beta, b, c0, c1)], b)
	}
	return out
}

// cheapest returns the p minimising c0·(α_p·x_p + β_p) + c1·x_p with
// x_p = load[p] + b, the last one on ties as Alg. 2's "cost ≤ costmin"
// keeps it; 0 when no cost is a number. About a nanosecond per server
// (unrolling into independent lanes measured no faster).
func cheapest(load, alpha, beta []float64, b, c0, c1 float64) int {
	alpha, beta = alpha[:len(load)], beta[:len(load)]
	best, bestCost := 0, math.Inf(1)
	for p, l := range load {
		x := l + b
		if cost := c0*(alpha[p]*x+beta[p]) + c1*x; cost <= bestCost {
			best, bestCost = p, cost
		}
	}
	return best
}

// Proportional is the strawman PSLD compares with (§4, §6): blocks are
// spread in proportion to the servers' profiled speeds, each block (in
// order) to the server whose load after taking it, divided by its speed,
// is least (ties to the lower index). Servers with no positive speed get
// nothing unless none has one, in which case all count as equal.
func Proportional(blocks []int64, speeds []float64) []int {
	out := make([]int, len(blocks))
	n := len(speeds)
	sp := make([]float64, n)
	positive := false
	for r, v := range speeds {
		if v > 0 && !math.IsInf(v, 0) {
			sp[r], positive = v, true
		}
	}
	if !positive {
		for r := range sp {
			sp[r] = 1
		}
	}
	load := make([]float64, n)
	for i, size := range blocks {
		b := float64(size)
		best, bestT := -1, math.Inf(1)
		for r, v := range sp {
			if v <= 0 {
				continue
			}
			if t := (load[r] + b) / v; t < bestT {
				best, bestT = r, t
			}
		}
		out[i] = best
		if best >= 0 {
			load[best] += b
		}
	}
	return out
}

// PSLD is the elastic PS load-distribution policy (PSLD §4). When the job
// has a PS straggler issue it proposes a REASSIGN of the job's blocks by
// AssignPSLD over the superior set (Alg. 1–3), and when the superior set is
// smaller than ScaleThreshold × the profiled servers an ADD_SERVER (Alg. 1
// lines 11–12, a strict <). A server that the reassignment leaves without
// blocks leaves the job (scale-in, §3): the REASSIGN is proposed as that
// server's REMOVE_SERVER with the same assignment (emptying); a server
// that holds no block for another reason gets a REMOVE_SERVER of its own.
//
// Straggler issue. It exists when the PS speed variance (best − worst)/worst
// exceeds VarianceThreshold (strictly: "exceeds a threshold"), or when the
// same ratio over the servers' response times does: the mean push/pull
// time each server took over the long window at the load it holds. The
// speeds are compared at one size, so they cannot see the first cause of
// PS stragglers the paper names, an imbalanced parameter distribution; the
// response times do. That is what brings load back to a server that
// recovers: it holds the few blocks exploration gave it and answers in a
// fraction of the others' time.
//
// Which servers are compared. Only servers that hold blocks (when the job
// reports its blocks): a server without blocks is still sent an empty
// exchange every iteration, and a profile fitted to those says nothing of
// its bandwidth (its Pred_mean is its latency, whatever the size, so it
// would look like the fastest server there is). Alg. 1 is run here over
// the compared servers (its ps_set), not taken from the snapshot, which
// ranks every server the Monitor knows.
//
// Superior set. Alg. 1 keeps the servers whose 90 % bounds overlap the
// best's. With hundreds of samples in the window those bounds are narrow
// and servers a few per cent apart fall out, so that Alg. 2 would pile
// every block on one or two servers, and a server that has carried little
// load (its few bytes fit in its link's burst) can look twice as fast as
// loaded ones. So a server whose speed is within the variance threshold of
// the median speed (speed ≥ median/(1 + threshold)) is no straggler by
// §4's own ratio and joins the superior set too; when the median is itself
// that far below the best (most servers are slow) the best is the
// reference instead. Evidence "superior_alg1" counts Alg. 1's servers.
//
// New servers. A server without blocks whose window holds empty exchanges
// only (a Proportional profile with α = 0) has never carried load here: a
// server that scale-out added, or one emptied longer than a window ago.
// It is not compared; Alg. 2 considers it with the mean profile of the
// superior set, and its presence is an issue of its own (it idles).
//
// Alg. 1 returns without a superior set when it scales out; here both
// proposals are made, since each goes through the gate on its own and the
// reassignment helps the current servers while the new one starts.
//
// Strawman makes the policy the baseline PSLD is compared with (§6): on
// the same straggler check it spreads the blocks in proportion to the
// compared servers' profiled speeds (Proportional) and neither adds nor
// removes servers; servers it cannot compare get nothing.
type PSLD struct {
	Epsilon           float64 // exploration probability ε (0.1 in the paper)
	Theta1OverTheta0  float64 // load weight against communication time (1)
	ScaleThreshold    float64 // scale out when |superior| < ScaleThreshold·|PS| (1/2)
	VarianceThreshold float64 // straggler issue when the speed variance exceeds it (1)
	// MinGain is kelpie's guard against churn (not in the paper): a
	// REASSIGN is proposed only when it cuts the predicted time of the
	// slowest server by at least this fraction. Zero means DefaultMinGain.
	MinGain  float64
	Strawman bool // assign in proportion to speed instead of by Alg. 1–3
}

// DefaultMinGain is the least predicted relative improvement that makes a
// rebalancing (ADJUST_BS, REASSIGN) worth proposing: 5 %.
const DefaultMinGain = 0.05

// DefaultPSLD returns the paper's settings (§6 "Thresholds", §4.4).
func DefaultPSLD() PSLD {
	return PSLD{Epsilon: 0.1, Theta1OverTheta0: 1, ScaleThreshold: 0.5, VarianceThreshold: 1}
}

func minGain(g float64) float64 {
	if g > 0 {
		return g
	}
	return DefaultMinGain
}

// psldView is what Propose gathered about the job's servers.
type psldView struct {
	servers  []monitor.ServerStat
	index    map[string]int
	held     []float64 // bytes of the job's blocks on each server now
	compared []bool    // profiled and, when blocks are known, holding some
	fresh    []bool    // without blocks, answered empty exchanges only
	profiles []Profile // fitted for compared servers, assumed for fresh ones
	superior []int     // Alg. 1's set, widened (see PSLD), then fresh servers
	alg1     int       // how many of superior Alg. 1 chose
	profiled int       // compared servers: |PS| of Alg. 1
	issue    string    // why there is a straggler issue; "" when none
	supText  string
	common   map[string]float64
}

// Propose returns PSLD's plan for job j. rng drives exploration (it may be
// nil when Epsilon ≤ 0).
func (p PSLD) Propose(s monitor.Snapshot, j Job, rng *rand.Rand) []Action {
	v := p.view(s, j)
	var acts []Action
	if !p.Strawman {
		acts = p.scaleIn(s, j, v)
	}
	if v.issue == "" {
		return acts
	}
	if len(j.Blocks) > 0 && (p.Strawman || len(v.superior) > 0) {
		if a, ok := p.reassign(j, v, rng); ok {
			if !p.Strawman {
				a = emptying(v, a)
			}
			acts = append(acts, a)
		}
	}
	if p.Strawman {
		return acts
	}
	limit := p.ScaleThreshold * float64(v.profiled)
	if float64(len(v.superior)) < limit {
		ev := clone(v.common)
		ev["scale_threshold"] = p.ScaleThreshold
		acts = append(acts, Action{
			Kind:   KindAddServer,
			Policy: NamePSLD,
			Reason: fmt.Sprintf("%s; %s < %s × %d: scale out by one server (PSLD Alg. 1 lines 11–12)",
				v.issue, v.supText, num(p.ScaleThreshold), v.profiled),
			Evidence:  ev,
			Predicted: "one more server shares the load; the next REASSIGN spreads blocks over it",
			Key:       NamePSLD + "/" + string(KindAddServer),
		})
	}
	return acts
}

// scaleIn proposes REMOVE_SERVER for each profiled server that holds no
// block while others do and that is not new (see PSLD).
func (p PSLD) scaleIn(s monitor.Snapshot, j Job, v psldView) []Action {
	if len(j.Blocks) == 0 {
		return nil
	}
	holders := 0
	for _, h := range v.held {
		if h > 0 {
			holders++
		}
	}
	// The blocks stay where they are: without an assignment the gate
	// would re-spread them over the remaining servers by the job's
	// assignment algorithm, undoing PSLD's.
	keep := make([]int, len(j.Blocks))
	for k, b := range j.Blocks {
		i, ok := v.index[b.Server]
		if !ok {
			keep = nil
			break
		}
		keep[k] = i
	}
	var acts []Action
	for i, sv := range v.servers {
		if sv.Model == monitor.NoFit || v.held[i] > 0 || v.fresh[i] || holders == 0 {
			continue
		}
		ev := map[string]float64{"servers": float64(len(v.servers)), "holding_blocks": float64(holders),
			"pred_mean_s": sv.PredMean, "samples": float64(sv.Samples)}
		acts = append(acts, Action{
			Kind:   KindRemoveServer,
			Policy: NamePSLD,
			Target: sv.Node,
			Reason: fmt.Sprintf("%s holds no block since a REASSIGN (its last profile: %s at %s): "+
				"a server without parameters leaves the job (PSLD scale-in)",
				sv.Node, secs(sv.PredMean), byteSize(s.PredBytes)),
			Assignment: slices.Clone(keep),
			Evidence:   ev,
			Predicted:  "one server fewer; no block moves",
			Key:        NamePSLD + "/" + string(KindRemoveServer) + "/" + sv.Node,
		})
	}
	return acts
}

// emptying turns a REASSIGN that takes every block off a server which
// holds some into that server's REMOVE_SERVER carrying the same
// assignment: the blocks move and the server leaves in one table change.
// A server left without blocks would still be sent an empty exchange every
// iteration, so a server slow in compute — whose fixed cost per request
// no reassignment removes — would keep the job slow until a second change
// took it out; and once its window holds empty exchanges only it looks new
// (see PSLD) and would be given blocks again. When a REASSIGN empties
// several servers the slowest of them (at its load now) leaves with it;
// the others, holding nothing once it is applied, leave by scaleIn.
func emptying(v psldView, a Action) Action {
	after := make([]float64, len(v.servers))
	for _, i := range a.Assignment {
		after[i]++
	}
	leave, worst := -1, 0.0
	for i := range v.servers {
		if !v.compared[i] || v.held[i] == 0 || after[i] > 0 {
			continue
		}
		if t := v.profiles[i].Mean(v.held[i]); leave < 0 || t > worst {
			leave, worst = i, t
		}
	}
	if leave < 0 {
		return a
	}
	node := v.servers[leave].Node
	a.Kind, a.Target = KindRemoveServer, node
	a.Reason = fmt.Sprintf("%s; %s holds none of them afterwards and leaves the job in the same change (PSLD scale-in)", a.Reason, node)
	a.Predicted = fmt.Sprintf("%s; %s leaves, and with it its cost per request", a.Predicted, node)
	a.Evidence["leaving_pred_s"] = worst
	a.Key = NamePSLD + "/" + string(KindRemoveServer) + "/" + node
	return a
}

// view profiles the job's servers, runs the straggler checks and builds
// the superior set.
func (p PSLD) view(s monitor.Snapshot, j Job) psldView {
	v := psldView{servers: jobServers(s, j)}
	n := len(v.servers)
	v.index = make(map[string]int, n)
	for i, sv := range v.servers {
		v.index[sv.Node] = i
	}
	v.held = make([]float64, n)
	for _, b := range j.Blocks {
		if i, ok := v.index[b.Server]; ok {
			v.held[i] += float64(b.Bytes)
		}
	}
	v.compared = make([]bool, n)
	v.fresh = make([]bool, n)
	v.profiles = make([]Profile, n)
	var speeds []float64
	var preds []monitor.Pred
	var at []int          // preds[k] is server at[k]
	best, worst := -1, -1 // by speed
	slow, fast := -1, -1  // by response time
	var freshNames []string
	for i, sv := range v.servers {
		if sv.Model == monitor.NoFit {
			continue
		}
		if len(j.Blocks) > 0 && v.held[i] == 0 {
			if sv.Model == monitor.Proportional && sv.Alpha == 0 {
				v.fresh[i] = true
				freshNames = append(freshNames, sv.Node)
			}
			continue
		}
		v.compared[i] = true
		v.profiled++
		v.profiles[i] = Profile{Alpha: sv.Alpha, Beta: sv.Beta}
		preds = append(preds, monitor.Pred{Mean: sv.PredMean, SEM: sv.PredSEM})
		at = append(at, i)
		if sv.Speed > 0 {
			speeds = append(speeds, sv.Speed)
			if best < 0 || sv.Speed > v.servers[best].Speed {
				best = i
			}
			if worst < 0 || sv.Speed < v.servers[worst].Speed {
				worst = i
			}
		}
		if v.held[i] > 0 && sv.CommPer > 0 {
			if slow < 0 || sv.CommPer > v.servers[slow].CommPer {
				slow = i
			}
			if fast < 0 || sv.CommPer < v.servers[fast].CommPer {
				fast = i
			}
		}
	}
	variance := 0.0
	if best >= 0 && best != worst {
		variance = monitor.SpeedVariance([]float64{v.servers[best].Speed, v.servers[worst].Speed})
	}
	imbalance := 0.0
	if slow >= 0 && slow != fast {
		imbalance = monitor.SpeedVariance([]float64{v.servers[slow].CommPer.Seconds(), v.servers[fast].CommPer.Seconds()})
	}
	var issues []string
	if variance > p.VarianceThreshold {
		issues = append(issues, fmt.Sprintf("PS speed variance %s > %s (best %s %s/s, worst %s %s/s)",
			num(variance), num(p.VarianceThreshold),
			v.servers[best].Node, byteRate(v.servers[best].Speed), v.servers[worst].Node, byteRate(v.servers[worst].Speed)))
	}
	if imbalance > p.VarianceThreshold {
		issues = append(issues, fmt.Sprintf("PS response-time variance %s > %s (slowest %s %s for its %s, fastest %s %s for its %s)",
			num(imbalance), num(p.VarianceThreshold),
			v.servers[slow].Node, dsecs(v.servers[slow].CommPer), byteSize(v.held[slow]),
			v.servers[fast].Node, dsecs(v.servers[fast].CommPer), byteSize(v.held[fast])))
	}
	if len(freshNames) > 0 && v.profiled > 0 && !p.Strawman {
		issues = append(issues, fmt.Sprintf("%s %s no block and never carried load: new", list(freshNames), verb(len(freshNames), "holds", "hold")))
	}
	v.issue = strings.Join(issues, "; ")

	// Alg. 1 over the compared servers, then every compared server within
	// the threshold of the median speed, then the new servers.
	in := make([]bool, n)
	for _, k := range monitor.SuperiorSet(preds) {
		in[at[k]] = true
		v.superior = append(v.superior, at[k])
		v.alg1++
	}
	if ref := referenceSpeed(speeds, p.VarianceThreshold); ref > 0 {
		for _, i := range at {
			if sp := v.servers[i].Speed; !in[i] && sp > 0 && ref-sp <= p.VarianceThreshold*sp {
				in[i] = true
				v.superior = append(v.superior, i)
			}
		}
	}
	widened := len(v.superior) - v.alg1
	if len(v.superior) > 0 {
		var mean Profile
		for _, i := range v.superior {
			mean.Alpha += v.profiles[i].Alpha / float64(len(v.superior))
			mean.Beta += v.profiles[i].Beta / float64(len(v.superior))
		}
		for i := range v.servers {
			if v.fresh[i] {
				v.profiles[i] = mean
				v.superior = append(v.superior, i)
			}
		}
	}
	supNames := make([]string, len(v.superior))
	for k, i := range v.superior {
		supNames[k] = v.servers[i].Node
	}
	v.supText = fmt.Sprintf("superior set {%s}: %d of %d profiled servers", strings.Join(supNames, ", "), len(v.superior), v.profiled)
	if extra := len(v.superior) - v.alg1; extra > 0 {
		parts := []string{fmt.Sprintf("%d by Alg. 1", v.alg1)}
		if widened > 0 {
			parts = append(parts, fmt.Sprintf("%d within the threshold of the typical speed", widened))
		}
		if extra > widened {
			parts = append(parts, fmt.Sprintf("%d new", extra-widened))
		}
		v.supText += " (" + strings.Join(parts, ", ") + ")"
	}
	v.common = map[string]float64{
		"speed_variance":         variance,
		"response_time_variance": imbalance,
		"variance_threshold":     p.VarianceThreshold,
		"superior":               float64(len(v.superior)),
		"superior_alg1":          float64(v.alg1),
		"profiled":               float64(v.profiled),
		"servers":                float64(n),
	}
	return v
}

// referenceSpeed is the speed a straggler is measured against when the
// superior set is widened: the median speed, or the best when the median
// is itself a straggler against the best (more than half the servers are
// slow: then none of them may join, and Alg. 1's scale-out can fire).
// 0 for no speeds.
func referenceSpeed(speeds []float64, threshold float64) float64 {
	if len(speeds) == 0 {
		return 0
	}
	xs := slices.Clone(speeds)
	slices.Sort(xs)
	m := len(xs) / 2
	med := xs[m]
	if len(xs)%2 == 0 {
		med = (xs[m-1] + xs[m]) / 2
	}
	if best := xs[len(xs)-1]; best-med > threshold*med {
		return best
	}
	return med
}

func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// strawmanSpeeds are the speeds Proportional spreads by: the profiled
// speed of each compared server, 0 for the others.
func strawmanSpeeds(v psldView) []float64 {
	out := make([]float64, len(v.servers))
	for i, sv := range v.servers {
		if v.compared[i] {
			out[i] = sv.Speed
		}
	}
	return out
}

// reassign builds the REASSIGN proposal: Alg. 2–3 over the superior set,
// or the strawman's proportional spread.
func (p PSLD) reassign(j Job, v psldView, rng *rand.Rand) (Action, bool) {
	servers, profiles := v.servers, v.profiles
	sizes := make([]int64, len(j.Blocks))
	misplaced := 0 // blocks on servers that are not (or no longer) the job's
	for k, b := range j.Blocks {
		sizes[k] = b.Bytes
		if _, ok := v.index[b.Server]; !ok {
			misplaced++
		}
	}
	var assign []int
	if p.Strawman {
		assign = Proportional(sizes, strawmanSpeeds(v))
	} else {
		assign = AssignPSLD(sizes, profiles, v.superior, p.Theta1OverTheta0, p.Epsilon, rng)
	}
	after := make([]float64, len(servers))
	moved := 0
	for k, i := range assign {
		if i < 0 {
			return Action{}, false
		}
		after[i] += float64(sizes[k])
		if j.Blocks[k].Server != servers[i].Node {
			moved++
		}
	}
	if moved == 0 {
		return Action{}, false
	}
	known := func(i int) bool { return v.compared[i] || v.fresh[i] }
	predBefore, slowBefore := slowest(servers, profiles, v.held, known)
	predAfter, slowAfter := slowest(servers, profiles, after, known)
	if misplaced == 0 && !(predAfter <= predBefore*(1-minGain(p.MinGain))) {
		return Action{}, false
	}
	ev := clone(v.common)
	ev["epsilon"] = p.Epsilon
	ev["theta1_over_theta0"] = p.Theta1OverTheta0
	ev["blocks"] = float64(len(sizes))
	ev["moved_blocks"] = float64(moved)
	ev["pred_max_before_s"] = predBefore
	ev["pred_max_after_s"] = predAfter
	var per []string
	for i, sv := range servers {
		if !known(i) || after[i] == 0 {
			continue
		}
		ev["pred_s/"+sv.Node] = profiles[i].Mean(after[i])
		per = append(per, fmt.Sprintf("%s %s", sv.Node, secs(profiles[i].Mean(after[i]))))
	}
	gain := "slowest server: "
	if slowBefore >= 0 {
		gain += fmt.Sprintf("%s %s → ", servers[slowBefore].Node, secs(predBefore))
	}
	if slowAfter >= 0 {
		gain += fmt.Sprintf("%s %s", servers[slowAfter].Node, secs(predAfter))
	} else {
		gain += "no profiled server holds blocks"
	}
	how := fmt.Sprintf("%s; ε-greedy assignment (ε = %s, θ1/θ0 = %s)", v.supText, num(p.Epsilon), num(p.Theta1OverTheta0))
	if p.Strawman {
		ev["strawman"] = 1
		delete(ev, "epsilon")
		delete(ev, "theta1_over_theta0")
		how = "strawman: blocks in proportion to the profiled speeds (PSLD §6)"
	}
	return Action{
		Kind:         KindReassign,
		Policy:       NamePSLD,
		Assignment:   assign,
		Reason:       fmt.Sprintf("%s; %s moves %d of %d blocks: %s", v.issue, how, moved, len(sizes), gain),
		Evidence:     ev,
		Predicted:    "predicted push/pull time per server: " + strings.Join(per, ", "),
		PredictedBPT: time.Duration(predAfter * float64(time.Second)),
		Key:          NamePSLD + "/" + string(KindReassign),
	}, true
}

// slowest returns the largest predicted time α·S_r + β over the servers
// with a known profile that hold bytes, and which server it is (−1 when
// none).
func slowest(servers []monitor.ServerStat, profiles []Profile, load []float64, known func(int) bool) (float64, int) {
	t, at := 0.0, -1
	for i := range servers {
		if !known(i) || load[i] == 0 {
			continue
		}
		if x := profiles[i].Mean(load[i]); at < 0 || x > t {
			t, at = x, i
		}
	}
	return t, at
}

func clone(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m)+8)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// byteRate formats bytes per second as "97.7 MB" (decimal units).
func byteRate(x float64) string { return byteSize(x) }

// byteSize formats bytes with three significant digits in decimal units.
func byteSize(x float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	u := 0
	for math.Abs(x) >= 1000 && u < len(units)-1 {
		x /= 1000
		u++
	}
	return strconv.FormatFloat(x, 'g', 3, 64) + " " + units[u]
}

// PSLD's parameters (PSLD §4, §6).
var (
	PSLDEpsilon = policydecl.Param{Name: "epsilon", Type: policydecl.Float, Default: 0.1, Min: 0, Max: 1,
		Source: "PSLD §4.3 Alg. 3: ε is the probability of exploring, in [0, 1] (Fig. 19: speed falls beyond 0.1)"}
	PSLDTheta = policydecl.Param{Name: "theta1_over_theta0", Type: policydecl.Float, Default: 1, Min: 0, Max: math.Inf(1),
		Source: "PSLD §4.3 Alg. 2: the cost weights θ0, θ1 are not negative (Fig. 19: peak at θ1/θ0 = 1)"}
	PSLDScaleThreshold = policydecl.Param{Name: "scale_threshold", Type: policydecl.Float, Default: 0.5, Min: 0, Max: 1,
		Source: "PSLD Alg. 1 lines 11–12: scale out when |superior| < threshold·|PS|, a fraction (1/2 in the paper)"}
	PSLDVarianceThreshold = policydecl.Param{Name: "variance_threshold", Type: policydecl.Float, Default: 1, Min: 0, Max: math.Inf(1),
		Source: "PSLD §4: the PS speed variation (best−worst)/worst is not negative (1 in the paper)"}
	PSLDStrawman = policydecl.Param{Name: "strawman", Type: policydecl.Bool, Default: 0, Min: 0, Max: 1,
		Source: "kelpie: 1 assigns blocks by speed (PSLD §6's baseline), 0 runs Alg. 1–3"}
)

// psldPolicy is PSLD in the registry. It reads the job's live servers,
// blocks and their places in the job (Job.LiveServers, Job.Blocks,
// Job.ServerIndex), and explores with rng.
type psldPolicy struct{}

func (psldPolicy) Decl() policydecl.Policy {
	return policydecl.Policy{Name: NamePSLD, Doc: "PSLD §4: balance parameter blocks over the servers by their measured speed; scale out and in",
		Params: []policydecl.Param{PSLDEpsilon, PSLDTheta, PSLDScaleThreshold, PSLDVarianceThreshold, PSLDStrawman},
		Rules: func(_ policydecl.Values, c policydecl.Context) []policydecl.Violation {
			if c.Mode != "" && c.Mode != policydecl.ModeOff && c.Exchange != "" && c.Exchange != "ps" {
				return []policydecl.Violation{{Param: "mode", Msg: "psld balances parameter servers: needs exchange ps (exchange is " + c.Exchange + ")"}}
			}
			return nil
		}}
}

// Explores: PSLD draws a new plan each round (ε-greedy), so a round that
// does not repeat a pending proposal says nothing against it.
func (psldPolicy) Explores() bool { return true }

func (psldPolicy) Propose(s Snapshot, rng *rand.Rand) []Action {
	v := s.Params
	p := PSLD{Epsilon: v.Float(PSLDEpsilon), Theta1OverTheta0: v.Float(PSLDTheta), ScaleThreshold: v.Float(PSLDScaleThreshold),
		VarianceThreshold: v.Float(PSLDVarianceThreshold), Strawman: v.Bool(PSLDStrawman)}
	j := s.Job
	if j.LiveServers != nil {
		j.Servers = j.LiveServers
	}
	acts := p.Propose(s.Monitor, j, rng)
	if len(s.Job.ServerIndex) == 0 {
		return acts
	}
	// The plan names servers by their place in Job.Servers; the job's
	// block table by their index in the job.
	for _, a := range acts {
		for k, r := range a.Assignment {
			a.Assignment[k] = s.Job.ServerIndex[r]
		}
	}
	return acts
}
