package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

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

// PSLD is the elastic PS load-distribution policy (PSLD §4). When the PS
// speed variance (best − worst)/worst over the job's profiled servers
// exceeds VarianceThreshold (strictly: "exceeds a threshold") it
// proposes a REASSIGN of the job's blocks by AssignPSLD over the superior
// set in the snapshot (Alg. 1–3); when the superior set is smaller than
// ScaleThreshold × the profiled servers, an ADD_SERVER (Alg. 1 lines
// 11–12, a strict <); and a REMOVE_SERVER for each profiled server the
// proposed assignment leaves without blocks (scale-in, §3).
//
// Alg. 1 returns without a superior set when it scales out; here both
// proposals are made, since each goes through the gate on its own and the
// reassignment helps the current servers while the new one starts (the
// new server gets blocks at the next REASSIGN, once it has a profile or
// through exploration).
type PSLD struct {
	Epsilon           float64 // exploration probability ε (0.1 in the paper)
	Theta1OverTheta0  float64 // load weight against communication time (1)
	ScaleThreshold    float64 // scale out when |superior| < ScaleThreshold·|PS| (1/2)
	VarianceThreshold float64 // straggler issue when the speed variance exceeds it (1)
	// MinGain is kelpie's guard against churn (not in the paper): a
	// REASSIGN is proposed only when it cuts the predicted time of the
	// slowest server by at least this fraction. Zero means DefaultMinGain.
	MinGain float64
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

// Propose returns PSLD's plan for job j. rng drives exploration (it may be
// nil when Epsilon ≤ 0).
func (p PSLD) Propose(s monitor.Snapshot, j Job, rng *rand.Rand) []Action {
	servers := jobServers(s, j)
	if len(servers) == 0 {
		return nil
	}
	var speeds []float64
	profiles := make([]Profile, len(servers))
	var superior []int
	profiled := 0
	best, worst := -1, -1
	for i, v := range servers {
		if v.Model == monitor.NoFit {
			continue
		}
		profiled++
		profiles[i] = Profile{Alpha: v.Alpha, Beta: v.Beta}
		if v.Superior {
			superior = append(superior, i)
		}
		if v.Speed > 0 {
			speeds = append(speeds, v.Speed)
			if best < 0 || v.Speed > servers[best].Speed {
				best = i
			}
			if worst < 0 || v.Speed < servers[worst].Speed {
				worst = i
			}
		}
	}
	variance := monitor.SpeedVariance(speeds)
	if !(variance > p.VarianceThreshold) || len(speeds) < 2 {
		return nil
	}
	supNames := make([]string, len(superior))
	for k, i := range superior {
		supNames[k] = servers[i].Node
	}
	issue := fmt.Sprintf("PS speed variance %s > %s (best %s %s/s, worst %s %s/s)",
		num(variance), num(p.VarianceThreshold),
		servers[best].Node, byteRate(servers[best].Speed), servers[worst].Node, byteRate(servers[worst].Speed))
	supText := fmt.Sprintf("superior set {%s}: %d of %d profiled servers", strings.Join(supNames, ", "), len(superior), profiled)
	common := map[string]float64{
		"speed_variance":     variance,
		"variance_threshold": p.VarianceThreshold,
		"superior":           float64(len(superior)),
		"profiled":           float64(profiled),
		"servers":            float64(len(servers)),
	}

	var acts []Action
	if len(j.Blocks) > 0 && len(superior) > 0 {
		if a, ok := p.reassign(s, j, servers, profiles, superior, rng, issue, supText, common); ok {
			acts = append(acts, a...)
		}
	}
	limit := p.ScaleThreshold * float64(profiled)
	if float64(len(superior)) < limit {
		ev := clone(common)
		ev["scale_threshold"] = p.ScaleThreshold
		acts = append(acts, Action{
			Kind:   KindAddServer,
			Policy: NamePSLD,
			Reason: fmt.Sprintf("%s; %s < %s × %d: scale out by one server (PSLD Alg. 1 lines 11–12)",
				issue, supText, num(p.ScaleThreshold), profiled),
			Evidence:  ev,
			Predicted: "one more server shares the load; the next REASSIGN spreads blocks over it",
			Key:       NamePSLD + "/" + string(KindAddServer),
		})
	}
	return acts
}

// reassign builds the REASSIGN proposal and the REMOVE_SERVER proposals
// that follow from it.
func (p PSLD) reassign(s monitor.Snapshot, j Job, servers []monitor.ServerStat, profiles []Profile, superior []int,
	rng *rand.Rand, issue, supText string, common map[string]float64) ([]Action, bool) {
	index := make(map[string]int, len(servers))
	for i, v := range servers {
		index[v.Node] = i
	}
	sizes := make([]int64, len(j.Blocks))
	before := make([]float64, len(servers))
	misplaced := 0 // blocks on servers that are not (or no longer) the job's
	for k, b := range j.Blocks {
		sizes[k] = b.Bytes
		if i, ok := index[b.Server]; ok {
			before[i] += float64(b.Bytes)
		} else {
			misplaced++
		}
	}
	assign := AssignPSLD(sizes, profiles, superior, p.Theta1OverTheta0, p.Epsilon, rng)
	after := make([]float64, len(servers))
	moved := 0
	for k, i := range assign {
		after[i] += float64(sizes[k])
		if j.Blocks[k].Server != servers[i].Node {
			moved++
		}
	}
	if moved == 0 {
		return nil, false
	}
	predBefore, slowBefore := slowest(servers, profiles, before)
	predAfter, slowAfter := slowest(servers, profiles, after)
	if misplaced == 0 && !(predAfter <= predBefore*(1-minGain(p.MinGain))) {
		return nil, false
	}
	ev := clone(common)
	ev["epsilon"] = p.Epsilon
	ev["theta1_over_theta0"] = p.Theta1OverTheta0
	ev["blocks"] = float64(len(sizes))
	ev["moved_blocks"] = float64(moved)
	ev["pred_max_before_s"] = predBefore
	ev["pred_max_after_s"] = predAfter
	var per []string
	for i, v := range servers {
		if v.Model == monitor.NoFit || after[i] == 0 {
			continue
		}
		ev["pred_s/"+v.Node] = profiles[i].Mean(after[i])
		per = append(per, fmt.Sprintf("%s %s", v.Node, secs(profiles[i].Mean(after[i]))))
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
	acts := []Action{{
		Kind:       KindReassign,
		Policy:     NamePSLD,
		Assignment: assign,
		Reason: fmt.Sprintf("%s; %s; ε-greedy assignment (ε = %s, θ1/θ0 = %s) moves %d of %d blocks: %s",
			issue, supText, num(p.Epsilon), num(p.Theta1OverTheta0), moved, len(sizes), gain),
		Evidence:     ev,
		Predicted:    "predicted push/pull time per server: " + strings.Join(per, ", "),
		PredictedBPT: time.Duration(predAfter * float64(time.Second)),
		Key:          NamePSLD + "/" + string(KindReassign),
	}}
	for i, v := range servers {
		if v.Model == monitor.NoFit || after[i] > 0 {
			continue
		}
		ev := clone(common)
		ev["bytes_before"] = before[i]
		ev["pred_mean_s"] = v.PredMean
		acts = append(acts, Action{
			Kind:   KindRemoveServer,
			Policy: NamePSLD,
			Target: v.Node,
			Reason: fmt.Sprintf("%s holds no block after the proposed REASSIGN (predicted %s at %s, not superior): "+
				"a server without parameters leaves the job (PSLD scale-in); apply after the REASSIGN",
				v.Node, secs(v.PredMean), byteSize(s.PredBytes)),
			Evidence:  ev,
			Predicted: "one server fewer, no block moves beyond the REASSIGN",
			Key:       NamePSLD + "/" + string(KindRemoveServer) + "/" + v.Node,
		})
	}
	return acts, true
}

// slowest returns the largest predicted time α·S_r + β over profiled
// servers holding bytes, and which server it is (−1 when none).
func slowest(servers []monitor.ServerStat, profiles []Profile, load []float64) (float64, int) {
	t, at := 0.0, -1
	for i, v := range servers {
		if v.Model == monitor.NoFit || load[i] == 0 {
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
