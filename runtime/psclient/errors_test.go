package psclient

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
)

// TestDialErrorsWrapTheirCause: a refused dial says so to errors.Is on
// either transport's framed path, and an unknown transport is refused.
func TestDialErrorsWrapTheirCause(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nobody listens there now
	_, err = DialWith(context.Background(), addr, Options{Transport: TransportTCP})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("framed dial of a closed port: %v; want an error wrapping ECONNREFUSED", err)
	}
	if _, err := DialWith(context.Background(), addr, Options{Transport: "carrier-pigeon"}); err == nil {
		t.Error("an unknown transport was accepted")
	}
}
