// Package diverge names a training job's divergence: a non-finite loss or
// parameter value, where it was first seen (node and iteration) and what it
// was. Workers check their loss and servers the parameters they apply; both
// carry the finding as an Error, whose message survives a trip through a
// gRPC status or a parameter-server response (Parse reads it back), so the
// scheduler learns the node and iteration where the job diverged, not only
// the node that noticed it.
package diverge

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// What says which value was non-finite.
const (
	Loss       = "loss"       // a worker's training loss
	Parameters = "parameters" // a server's parameters after an update
	Gradient   = "gradient"   // a worker's gradient
)

// Error is a divergence.
type Error struct {
	Node      string  // where it was first seen: worker-1, server-0
	Iteration int64   // the iteration (a server: the version of the update)
	What      string  // Loss, Parameters or Gradient
	Value     float64 // the offending value (NaN, +Inf, -Inf)
	Detail    string  // e.g. "block 3, element 17"
}

const prefix = "diverged: "

// Error reads like "diverged: non-finite loss (NaN) at worker-1, iteration
// 12"; Parse reads it back.
func (e *Error) Error() string {
	s := fmt.Sprintf("%snon-finite %s (%s) at %s, iteration %d", prefix, e.What, FormatValue(e.Value), e.Node, e.Iteration)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// FormatValue writes a float as Go does, NaN and ±Inf included.
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Parse finds a divergence in an error message (which may wrap it), or
// returns nil.
func Parse(msg string) *Error {
	i := strings.Index(msg, prefix+"non-finite ")
	if i < 0 {
		return nil
	}
	rest := msg[i+len(prefix)+len("non-finite "):]
	// "<what> (<value>) at <node>, iteration <n>[ (<detail>)]"
	what, rest, ok := strings.Cut(rest, " (")
	if !ok {
		return nil
	}
	val, rest, ok := strings.Cut(rest, ") at ")
	if !ok {
		return nil
	}
	node, rest, ok := strings.Cut(rest, ", iteration ")
	if !ok || node == "" || strings.ContainsAny(node, " ,") {
		return nil
	}
	num := rest
	detail := ""
	if j := strings.IndexByte(rest, ' '); j >= 0 {
		num = rest[:j]
		if d, ok := strings.CutPrefix(rest[j:], " ("); ok {
			if k := strings.LastIndexByte(d, ')'); k >= 0 {
				detail = d[:k]
			}
		}
	}
	it, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return nil
	}
	v, err := strconv.ParseFloat(val, 64)
	if err != nil {
		return nil
	}
	return &Error{Node: node, Iteration: it, What: what, Value: v, Detail: detail}
}

// From finds a divergence in err's chain or, failing that, in its message
// (after a trip over the wire), or returns nil.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var d *Error
	if errors.As(err, &d) {
		return d
	}
	return Parse(err.Error())
}

// Finite is false for NaN and ±Inf.
func Finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// FirstNonFinite is the index of the first NaN or ±Inf in xs, or -1.
func FirstNonFinite(xs []float32) int {
	// x-x is 0 for every finite x and NaN for NaN and ±Inf, and a sum of
	// such terms is 0 exactly when all of them are: eight values are
	// checked with one branch (servers run this over every pushed block,
	// so it must cost little beside the update itself).
	i := 0
	for ; i+8 <= len(xs); i += 8 {
		v := xs[i : i+8 : i+8]
		s := (v[0] - v[0]) + (v[1] - v[1]) + (v[2] - v[2]) + (v[3] - v[3]) +
			(v[4] - v[4]) + (v[5] - v[5]) + (v[6] - v[6]) + (v[7] - v[7])
		if s != 0 {
			break
		}
	}
	for ; i < len(xs); i++ {
		if x := xs[i]; x-x != 0 {
			return i
		}
	}
	return -1
}
