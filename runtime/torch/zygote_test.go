package torch

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/runtime/data"
)

// stopZygote kills the zygote answering for o and waits for it to end.
func stopZygote(t *testing.T, o startOptions) {
	t.Helper()
	pid := zygoteOf(o)
	if pid == 0 {
		return
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitGone(t, pid, "zygote")
}

func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // a hang guard
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the %s (pid %d) is still running", what, pid)
	}
}

// firstStep is the loss and gradient of the first step of the tiny model
// from its initial values, on samples 0..19.
func firstStep(t *testing.T, m *Model) (float64, []float32) {
	t.Helper()
	p, g := m.Shared()
	for i, d := range m.InitDense(1) {
		copy(p.Dense[i], d)
	}
	var b data.Batch
	batch(&b, 0, 20)
	loss := m.Grad(p, &b, g, 1)
	return loss, append([]float32(nil), g.Dense[0]...)
}

// TestWarmStart: with an owner, a child is forked by a zygote that outlives
// it; the next child of the same script is forked from it too, without the
// zygote loading anything again, and computes exactly what the first did
// (same module, same data sets) and what a cold child computes.
func TestWarmStart(t *testing.T) {
	needTorch(t)
	o := startOptions{Script: tiny(t), Seed: 1, Threads: 1, Owner: os.Getpid()}
	defer stopZygote(t, o)
	cfg := Config{Script: o.Script, Seed: 1, Threads: 1, Owner: o.Owner}
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	z := zygoteOf(o)
	if !first.Warm() || z == 0 {
		first.Close()
		t.Fatalf("first child warm %t, zygote %d: want a child forked by a zygote", first.Warm(), z)
	}
	l1, g1 := firstStep(t, first)
	pid1 := first.Pid()
	first.Close()
	waitGone(t, pid1, "first child")
	if !alive(z) {
		t.Fatal("the zygote ended with its first child")
	}
	second, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if !second.Warm() || zygoteOf(o) != z || second.Pid() == pid1 {
		t.Fatalf("second child: warm %t, zygote %d (was %d), pid %d (was %d): want a new fork of the same zygote",
			second.Warm(), zygoteOf(o), z, second.Pid(), pid1)
	}
	l2, g2 := firstStep(t, second)
	cold, err := New(Config{Script: o.Script, Seed: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Close()
	if cold.Warm() {
		t.Fatal("a child without an owner says it is warm")
	}
	l3, g3 := firstStep(t, cold)
	if math.IsNaN(l1) || l1 != l2 || l1 != l3 || !equal(g1, g2) || !equal(g1, g3) {
		t.Fatalf("first step: loss %v (first fork), %v (second fork), %v (cold): want the same step", l1, l2, l3)
	}
}

// TestWarmChildDiesWithWorker: kill -9 of a worker (here also the zygote's
// owner) ends the child the zygote forked for it, and the zygote.
func TestWarmChildDiesWithWorker(t *testing.T) {
	needTorch(t)
	cmd, sc := startHelperWorker(t, "KELPIE_TORCH_HELPER_WARM=1")
	var child, zygote int
	var warm bool
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "zygote %d warm %t", &zygote, &warm); err == nil {
			continue
		}
		if _, err := fmt.Sscanf(sc.Text(), "child %d", &child); err == nil {
			break
		}
		t.Log(sc.Text())
	}
	if child == 0 || zygote == 0 || !warm {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the helper worker started child %d from zygote %d (warm %t)", child, zygote, warm)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitGone(t, child, "forked Python child, after its worker's kill -9,")
	waitGone(t, zygote, "zygote, after its owner's kill -9,")
}

// TestZygoteRefusesStranger: a process that is neither the zygote's owner
// nor a child of it gets no child, and the zygote ends with its owner.
func TestZygoteRefusesStranger(t *testing.T) {
	needTorch(t)
	owner := exec.Command("sleep", "120")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { owner.Process.Kill(); owner.Wait() }()
	o := startOptions{Script: tiny(t), Seed: 1, Threads: 1, Owner: owner.Process.Pid}
	name := zygoteName(o)
	if err := startZygote(name, o); err != nil {
		t.Fatal(err)
	}
	z := zygoteOf(o)
	if z == 0 {
		t.Fatal("no zygote answers")
	}
	c, _, err := forkFrom(name, o)
	var w errWarm
	if err == nil || !errors.As(err, &w) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a stranger asked the zygote for a child: %v; want it refused", err)
	}
	owner.Process.Kill()
	owner.Wait()
	waitGone(t, z, "zygote, after its owner ended,")
}
