// Package consoleapi holds what the console plane (scheduler/console) and
// the job manager share: the Backend the console serves from, who a command
// comes from (Principal, Role), an audit entry, and how an error becomes the
// CommandResult a client sees (Failure). It is a leaf: it imports no
// scheduler package and no WebSocket library, so the job core that
// implements Backend does not link the console's transport.
package consoleapi

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// Backend is what the console serves: the job manager implements it.
type Backend interface {
	// View returns the current views of the named jobs (all jobs when names
	// is empty: then nodes, heatmap, charts may be left out by the backend)
	// — immutable values the console may hold.
	View(names []string, heatmapColumns int) []*consolepb.JobView
	// EventsSince returns events with sequence > seq (oldest first, at most
	// limit) and the newest sequence number.
	EventsSince(seq uint64, limit int) ([]*consolepb.Event, uint64)
	// Execute runs an authorized command; the result says ok/error/code
	// (CommandResult.id is set by the console).
	Execute(ctx context.Context, who Principal, cmd *consolepb.Command) *consolepb.CommandResult
	// Audit records one command decision (allowed or refused) durably.
	Audit(e AuditEntry) error
}

// WindowBackend is a Backend that builds a window of its detail views
// itself, rather than the console trimming whole views: a 20,000-node
// job's whole view is some 20,000 node rows, heatmap rows and series a
// second, of which a console shows 50. WindowView returns, for each named
// job, what TrimView makes of View(names, heatmapColumns)'s view with w —
// the same values, published and shared like View's (an unchanged pointer
// is no change).
type WindowBackend interface {
	Backend
	WindowView(names []string, heatmapColumns int, w *consolepb.ViewWindow) []*consolepb.JobView
}

// AuditEntry is one command decision, or one refused connection
// (Command "connect", Who the token's fingerprint).
type AuditEntry struct {
	Time    time.Time
	Who     string
	Role    string
	Command string // submit_job, kill_job, approve, reject, trigger, set_policy, connect, unknown
	Job     string
	Detail  string // the command's parameters and, when executed, its outcome
	Allowed bool
	Reason  string // why it was refused
}

// Role is what a token may do: a viewer watches, an operator also commands.
type Role string

// The two roles of the console plane.
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
)

// Principal is who holds a token.
type Principal struct {
	Name string
	Role Role
}

// Classify returns the gRPC code and the message a client sees for err: the
// code of a gRPC status error (also wrapped; its message without "rpc
// error: code = ... desc ="), Canceled and DeadlineExceeded for the
// context's errors, Internal for anything else. The console classifies its
// own refusals first (scheduler/console/errors.go).
func Classify(err error) (codes.Code, string) {
	switch {
	case err == nil:
		return codes.OK, ""
	case errors.Is(err, context.Canceled):
		return codes.Canceled, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, err.Error()
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() == codes.OK { // a status error never carries OK; treat it as a bug
			return codes.Internal, st.Message()
		}
		return st.Code(), st.Message()
	}
	return codes.Internal, err.Error()
}

// Failure is the CommandResult for a command (frame id) that was refused or
// failed with err.
func Failure(id string, err error) *consolepb.CommandResult {
	code, msg := Classify(err)
	return &consolepb.CommandResult{Id: id, Ok: false, Error: msg, Code: int32(code)}
}
