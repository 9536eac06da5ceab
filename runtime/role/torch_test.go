package role

import (
	"errors"
	"testing"
)

// TestTorchErrors: a torch model's failed step ends the worker with its
// error; any other panic stays a panic.
func TestTorchErrors(t *testing.T) {
	err := torchErrors(func() error { panic("torch: tiny.py: forward failed") })
	if err == nil || err.Error() != "torch: tiny.py: forward failed" {
		t.Fatalf("got %v", err)
	}
	want := errors.New("plain")
	if err := torchErrors(func() error { return want }); err != want {
		t.Fatalf("got %v, want %v", err, want)
	}
	defer func() {
		if r := recover(); r != "index out of range" {
			t.Fatalf("recovered %v, want the original panic", r)
		}
	}()
	_ = torchErrors(func() error { panic("index out of range") })
	t.Fatal("a non-torch panic was swallowed")
}
