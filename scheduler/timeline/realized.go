package timeline

import (
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kelpie/kelpie/proto/timelinepb"
)

// Applied is an applied action to judge.
type Applied struct {
	// Targets are the nodes whose BPT the action meant to change; empty:
	// every worker (a job-wide action).
	Targets []string
	// At is when it was applied.
	At time.Time
	// Dispatched is when it was sent to its nodes; the before-window ends
	// there (zero: at At). Between the two some nodes may already run it (a
	// batch change applies at a target iteration, acknowledged by the last
	// worker to reach it), so frames after Dispatched are not "before".
	Dispatched time.Time
	// Window is the length of the before and after windows: the window the
	// proposing policy read (L_trans for a batch change, L_per for a
	// restart).
	Window time.Duration
	// Transition is skipped after At before the after-window opens (at
	// least one frame; longer for a restart, whose node must come back).
	Transition time.Duration
	// The policy's prediction: the job's throughput (samples/s) and the
	// targets' BPT; zero where it made none.
	PredictedThroughput float64
	PredictedBPT        time.Duration
	// BPTBefore is the targets' BPT (seconds) as the proposing policy
	// measured it, used when no frame before the action holds one (an
	// action early in a job, whose first frames carry no BPT yet): without
	// it a restart predicted to cut the BPT could not be judged at all.
	BPTBefore float64
}

// MissFraction is the share of the predicted gain an action must deliver
// not to be a miss.
const MissFraction = 0.5

// Realize measures a's effect from frames (oldest first). It returns nil
// while the after-window is not over yet, unless final (the job has ended:
// what there is is measured), and nil when there is nothing to compare
// (no frame before the action, or none after it).
func Realize(frames []*Frame, a Applied, now time.Time, final bool) *timelinepb.Realized {
	if a.Window <= 0 {
		return nil
	}
	cut := a.At
	if !a.Dispatched.IsZero() && a.Dispatched.Before(cut) {
		cut = a.Dispatched
	}
	before := window(frames, Later(cut.Add(-a.Window), FirstTrained(frames)), cut)
	if len(before) == 0 {
		return nil
	}
	// The after-window opens with the first frame, past the transition,
	// in which every target reported again (a restarted node's first
	// buckets have no report).
	open := a.At.Add(a.Transition)
	var start time.Time
	for _, f := range frames {
		if s := f.Start(); !s.Before(open) && reported(f, a.Targets) {
			start = s
			break
		}
	}
	if start.IsZero() {
		return nil // nobody has reported since: nothing to compare yet
	}
	end := start.Add(a.Window)
	if last := frames[len(frames)-1]; last.Time().Before(end) && !final {
		return nil
	}
	after := window(frames, start, end)
	if len(after) == 0 {
		return nil
	}
	r := &timelinepb.Realized{
		WindowS:             a.Window.Seconds(),
		BptBeforeS:          bptBefore(before, a),
		BptAfterS:           meanBPT(after, a.Targets),
		ThroughputBefore:    meanThroughput(before),
		ThroughputAfter:     meanThroughput(after),
		PredictedThroughput: a.PredictedThroughput,
		PredictedBptS:       a.PredictedBPT.Seconds(),
		Measured:            timestamppb.New(now),
	}
	if len(a.Targets) > 1 {
		r.BptBeforeByNode, r.BptAfterByNode = map[string]float64{}, map[string]float64{}
		for _, t := range a.Targets {
			if b, f := meanBPT(before, []string{t}), meanBPT(after, []string{t}); !math.IsNaN(b) && !math.IsNaN(f) {
				r.BptBeforeByNode[t], r.BptAfterByNode[t] = b, f
			}
		}
	}
	judge(r)
	return r
}

// bptBefore is the targets' mean BPT over the before-window, else the
// one the policy measured (a.BPTBefore), else NaN.
func bptBefore(before []*Frame, a Applied) float64 {
	if b := meanBPT(before, a.Targets); !math.IsNaN(b) || !(a.BPTBefore > 0) {
		return b
	}
	return a.BPTBefore
}

// window returns the frames that lie within (from, to]: those ending after
// from and starting before to.
func window(frames []*Frame, from, to time.Time) []*Frame {
	var out []*Frame
	for _, f := range frames {
		if f.Time().After(from) && f.Start().Before(to) {
			out = append(out, f)
		}
	}
	return out
}

// reported says whether every target (every worker, when there are none)
// has a value in f.
func reported(f *Frame, targets []string) bool {
	seen := 0
	for i := range f.NodeCount() {
		if !watched(f, i, targets) {
			continue
		}
		if _, ok := f.NodeValue(i); !ok {
			return false
		}
		seen++
	}
	return seen > 0 && (len(targets) == 0 || seen == len(targets))
}

// watched says whether f's i-th node is a target (a worker, when there
// are none).
func watched(f *Frame, i int, targets []string) bool {
	if len(targets) == 0 {
		return f.NodeRole(i) == "worker"
	}
	return slices.Contains(targets, f.NodeName(i))
}

// meanBPT is the span-weighted mean of the watched nodes' values (their
// mean BPT per frame, averaged over the nodes); NaN when none reported.
func meanBPT(frames []*Frame, targets []string) float64 {
	var sum, w float64
	for _, f := range frames {
		var s float64
		var n int
		for i := range f.NodeCount() {
			if x, ok := f.NodeValue(i); ok && watched(f, i, targets) {
				s += x
				n++
			}
		}
		if n > 0 {
			sum += s / float64(n) * f.SpanSeconds()
			w += f.SpanSeconds()
		}
	}
	if w == 0 {
		return math.NaN()
	}
	return sum / w
}

// meanThroughput is the span-weighted mean of the samples the job trained
// per second over the frames (the Monitor's throughput for frames recorded
// without it).
// FirstTrained is the start of the first frame in which the job trained
// (zero when none has): what comes before it is the job's start-up (its
// processes starting, a torch child importing torch), not a measure of how
// fast it trains. A window that opens earlier opens there instead, or the
// start-up's zero would be averaged into a throughput "before" an action
// taken a second into training.
func FirstTrained(frames []*Frame) time.Time {
	for _, f := range frames {
		if throughputOf(f) > 0 {
			return f.Start()
		}
	}
	return time.Time{}
}

// Later is the later of a and b.
func Later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// MeanThroughput is the job's throughput over the frames within (from,
// to], weighted by their spans (zero without any): the window a policy's
// prediction starts from, as Realize measures "before".
func MeanThroughput(frames []*Frame, from, to time.Time) float64 {
	return meanThroughput(window(frames, from, to))
}

// throughputOf is a frame's samples per second (Throughput for a frame
// recorded without SamplesPerS).
func throughputOf(f *Frame) float64 {
	if x := f.SamplesPerS(); x != 0 {
		return x
	}
	return f.Throughput()
}

func meanThroughput(frames []*Frame) float64 {
	var sum, w float64
	for _, f := range frames {
		sum += throughputOf(f) * f.SpanSeconds()
		w += f.SpanSeconds()
	}
	if w == 0 {
		return 0
	}
	return sum / w
}

// judge fills the prediction error, the miss and the verdict: an action
// misses when it delivered less than MissFraction of the gain it
// predicted — in throughput when the policy predicted one, else in the
// targets' BPT.
func judge(r *timelinepb.Realized) {
	tb, ta, tp := r.GetThroughputBefore(), r.GetThroughputAfter(), r.GetPredictedThroughput()
	bb, ba, bp := r.GetBptBeforeS(), r.GetBptAfterS(), r.GetPredictedBptS()
	switch {
	case tp > 0 && tb > 0:
		r.PredictionError = (ta - tp) / tp
		need := tb + MissFraction*(tp-tb)
		r.Miss = ta < need
		r.Verdict = fmt.Sprintf("predicted %s → %s/s · realized %s/s %s", rate(tb), rate(tp), rate(ta), mark(r.Miss))
	case bp > 0 && bb > 0 && !math.IsNaN(ba):
		r.PredictionError = (ba - bp) / bp
		need := bb - MissFraction*(bb-bp)
		r.Miss = ba > need
		r.Verdict = fmt.Sprintf("predicted BPT %s → %s · realized %s %s", dur(bb), dur(bp), dur(ba), mark(r.Miss))
	default:
		r.Verdict = fmt.Sprintf("no prediction · throughput %s → %s/s", rate(tb), rate(ta))
	}
}

func mark(miss bool) string {
	if miss {
		return "✗"
	}
	return "✓"
}

// rate formats samples per second the way the console does (17.4k).
func rate(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x >= 10_000:
		return fmt.Sprintf("%.1fk", x/1000)
	case x >= 1000:
		return fmt.Sprintf("%.2fk", x/1000)
	default:
		return fmt.Sprintf("%.0f", x)
	}
}

// dur formats seconds.
func dur(s float64) string {
	if math.IsNaN(s) {
		return "–"
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}
