package torch

import (
	"os"
	"strings"
	"testing"
)

// TestChildStacks: a worker's Python child answers a stacks request with
// every thread's frames (faulthandler, on SIGUSR1), under a "--- python
// child (pid N)" line, within the bound; the child goes on serving after
// the dump (it is not killed by the signal), and a second dump replaces
// the first; a child forked by a zygote (warm) as a cold one.
func TestChildStacks(t *testing.T) {
	needTorch(t)
	for _, owner := range []int{0, os.Getpid()} {
		t.Run(map[bool]string{true: "warm", false: "cold"}[owner != 0], func(t *testing.T) {
			if owner != 0 {
				defer stopZygote(t, startOptions{Script: tiny(t), Seed: 1, Threads: 1, Owner: owner})
			}
			childStacks(t, Config{Script: tiny(t), Seed: 1, Threads: 1, Owner: owner})
		})
	}
}

func childStacks(t *testing.T, cfg Config) {
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Warm() != (cfg.Owner != 0) {
		t.Fatalf("warm %t with owner %d", m.Warm(), cfg.Owner)
	}
	for i := range 2 {
		text, err := m.Stacks(1 << 20)
		if err != nil {
			t.Fatalf("dump %d: %v", i, err)
		}
		if !strings.HasPrefix(text, "--- python child (pid ") || !strings.Contains(text, "most recent call first") ||
			!strings.Contains(text, "in serve") {
			t.Fatalf("dump %d: no Python frames in %q", i, text)
		}
		if n := strings.Count(text, "--- python child"); n != 1 {
			t.Errorf("dump %d has %d headers; want 1 (the file is emptied before each)", i, n)
		}
	}
	short, err := m.Stacks(64)
	if err != nil || len(short) > 64 {
		t.Errorf("bounded to 64 bytes: %d bytes, %v", len(short), err)
	}
	// Still serving: the signal did not end it (a request round trip
	// through it panics if the child is gone).
	if init := m.InitDense(1); len(init) != len(m.Tensors()) {
		t.Errorf("initial values of %d tensors after the dumps; want %d", len(init), len(m.Tensors()))
	}
	select {
	case <-m.c.waited:
		t.Errorf("the child exited after the dumps")
	default:
	}
}
