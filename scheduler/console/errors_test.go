package console

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFailure(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
		msg  string
	}{
		{errorf(codes.PermissionDenied, "viewer v may not kill: operator role required"), codes.PermissionDenied,
			"viewer v may not kill: operator role required"},
		{fmt.Errorf("console: x: %w", errorf(codes.InvalidArgument, "bad")), codes.InvalidArgument, "console: x: bad"},
		{status.Error(codes.NotFound, "no job \"a\""), codes.NotFound, "no job \"a\""},
		{status.Errorf(codes.FailedPrecondition, "job %s is done", "b"), codes.FailedPrecondition, "job b is done"},
		{fmt.Errorf("wrapped: %w", status.Error(codes.AlreadyExists, "job c is running")), codes.AlreadyExists,
			"wrapped: rpc error: code = AlreadyExists desc = job c is running"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "context deadline exceeded"},
		{fmt.Errorf("send: %w", context.Canceled), codes.Canceled, "send: context canceled"},
		{errors.New("disk on fire"), codes.Internal, "disk on fire"},
	}
	for _, tt := range tests {
		r := Failure("7", tt.err)
		if r.GetOk() || r.GetId() != "7" || codes.Code(r.GetCode()) != tt.code || r.GetError() != tt.msg {
			t.Errorf("Failure(%v) = ok %v id %q code %v error %q; want a failure with id 7, code %v, error %q",
				tt.err, r.GetOk(), r.GetId(), codes.Code(r.GetCode()), r.GetError(), tt.code, tt.msg)
		}
		if got := Code(tt.err); got != tt.code {
			t.Errorf("Code(%v) = %v; want %v", tt.err, got, tt.code)
		}
	}
	if got := Code(nil); got != codes.OK {
		t.Errorf("Code(nil) = %v; want OK", got)
	}
}
