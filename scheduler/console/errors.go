package console

import (
	"context"
	"errors"
	"fmt"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// This file is the one place where errors become what a console client sees
// (etcd's v3rpc/util.go plays this part for its gRPC API): gRPC codes and
// messages in CommandResult, WebSocket close statuses for streams that end.
// The console's own refusals are made with errorf; the scheduler's (the
// Backend's) are gRPC status errors, which Failure maps the same way, so the
// manager builds its CommandResult through Failure too.

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

// Code maps an error to the gRPC code a client sees: the code of a console
// refusal or of a gRPC status error (also wrapped), Canceled and
// DeadlineExceeded for the context's errors, Internal for anything else.
func Code(err error) codes.Code {
	code, _ := classify(err)
	return code
}

// classify returns the code and the message a client sees for err.
func classify(err error) (codes.Code, string) {
	var se *statusError
	switch {
	case err == nil:
		return codes.OK, ""
	case errors.As(err, &se):
		return se.code, err.Error()
	case errors.Is(err, context.Canceled):
		return codes.Canceled, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, err.Error()
	}
	if st, ok := status.FromError(err); ok {
		if st.Code() == codes.OK { // a status error never carries OK; treat it as a bug
			return codes.Internal, st.Message()
		}
		return st.Code(), st.Message() // the message without "rpc error: code = ... desc ="
	}
	return codes.Internal, err.Error()
}

// Failure is the CommandResult for a command (frame id) that was refused or
// failed with err.
func Failure(id string, err error) *consolepb.CommandResult {
	code, msg := classify(err)
	return &consolepb.CommandResult{Id: id, Ok: false, Error: msg, Code: int32(code)}
}

// How and why a stream ends. Reasons travel in the close frame, which holds
// at most 123 bytes of text: keep them short and fixed.
const (
	statusUnauthenticated = websocket.StatusPolicyViolation
	statusSlowClient      = websocket.StatusPolicyViolation
	statusShutdown        = websocket.StatusGoingAway
	statusInternal        = websocket.StatusInternalError

	reasonUnknownToken   = "kelpie: unknown token"
	reasonNoToken        = "kelpie: authentication required: send hello{token} or Authorization: Bearer"
	reasonNoHello        = "kelpie: no hello before the deadline"
	reasonBadHello       = "kelpie: first frame must be a valid hello{token}"
	reasonEvicted        = "kelpie: too many streams waiting for a hello: the oldest is closed"
	reasonTooManyStreams = "kelpie: too many streams open for this user"
	reasonQueueFull      = "kelpie: client too slow: send queue full, disconnected"
	reasonNotReading     = "kelpie: client not reading: a frame waited too long, disconnected"
	reasonShutdown       = "kelpie: scheduler shutting down"
	reasonEncode         = "kelpie: internal error encoding a frame"
)
