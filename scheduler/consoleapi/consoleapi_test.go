package consoleapi

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFailure: a command's error becomes the code and message a client
// sees: a gRPC status error's (also wrapped with %w), the context's, or
// Internal.
func TestFailure(t *testing.T) {
	for _, c := range []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{status.Error(codes.NotFound, "no job \"x\""), codes.NotFound, "no job \"x\""},
		{fmt.Errorf("trigger: %w", status.Error(codes.FailedPrecondition, "job x is killed")), codes.FailedPrecondition, "trigger: rpc error: code = FailedPrecondition desc = job x is killed"},
		{context.Canceled, codes.Canceled, "context canceled"},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "wait: context deadline exceeded"},
		{errors.New("boom"), codes.Internal, "boom"},
	} {
		r := Failure("7", c.err)
		if r.Ok || r.Id != "7" || codes.Code(r.Code) != c.code {
			t.Errorf("Failure(%v) = %v; want code %v", c.err, r, c.code)
		}
		if c.code != codes.FailedPrecondition && r.Error != c.msg {
			t.Errorf("Failure(%v).Error = %q; want %q", c.err, r.Error, c.msg)
		}
	}
}
