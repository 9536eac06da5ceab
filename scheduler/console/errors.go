package console

import (
	"context"
	"errors"
	"fmt"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"

	"github.com/kelpie/kelpie/proto/kelpiepb"
)

// This file is the one place where the console's errors become status codes:
// gRPC codes in CommandResult.code, WebSocket close statuses for streams that
// end.

// statusError is a refusal the client should see, with its code.
type statusError struct {
	code codes.Code
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// errorf makes a client-visible error with a gRPC code.
func errorf(code codes.Code, format string, args ...any) error {
	return &statusError{code: code, msg: fmt.Sprintf(format, args...)}
}

// codeOf maps an error to the gRPC code a client sees.
func codeOf(err error) codes.Code {
	var se *statusError
	switch {
	case err == nil:
		return codes.OK
	case errors.As(err, &se):
		return se.code
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	default:
		return codes.Internal
	}
}

// failure is the CommandResult for a frame that was refused or failed.
func failure(id string, err error) *kelpiepb.CommandResult {
	return &kelpiepb.CommandResult{Id: id, Ok: false, Error: err.Error(), Code: int32(codeOf(err))}
}

// How and why a stream ends. Reasons travel in the close frame, which holds
// at most 123 bytes of text: keep them short and fixed.
const (
	statusUnauthenticated = websocket.StatusPolicyViolation
	statusSlowClient      = websocket.StatusPolicyViolation
	statusShutdown        = websocket.StatusGoingAway
	statusInternal        = websocket.StatusInternalError

	reasonUnknownToken = "kelpie: unknown token"
	reasonNoToken      = "kelpie: authentication required: send hello{token} or Authorization: Bearer"
	reasonNoHello      = "kelpie: no hello before the deadline"
	reasonBadHello     = "kelpie: first frame must be a valid hello{token}"
	reasonQueueFull    = "kelpie: client too slow: send queue full, disconnected"
	reasonNotReading   = "kelpie: client not reading: a frame waited too long, disconnected"
	reasonShutdown     = "kelpie: scheduler shutting down"
	reasonEncode       = "kelpie: internal error encoding a frame"
)
