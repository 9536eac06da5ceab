package contend

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kelpie/kelpie/core/straggler"
)

// TestCPUContentionSharedCPU: a straggler node and a peer on one CPU (one
// host), both CPU-bound. The node's CPU share, measured from /proc, drops
// under kind cpu, and the peer gets none of what the node loses. A sleep
// model would hand it over: with the node stopped for the same window (what
// a node sleeping its stretch does to its CPU) the peer's share rises,
// which this measurement sees — so the peer's not rising under kind cpu is
// the competitors' doing, not a blind measurement. Node and peer run at
// nice -20 so the machine's other load barely dilutes their CPU (root
// only); the competitors then take the same weight each.
func TestCPUContentionSharedCPU(t *testing.T) {
	if testing.Short() || runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs and about 5 s")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: node and peer run at nice -20 so that other load on the machine does not hide the shares")
	}
	cpu := runtime.NumCPU() - 1
	node, peer := busy(t), busy(t)
	for _, pid := range []int{node.Process.Pid, peer.Process.Pid} {
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(pid, &set); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, pid, -20); err != nil {
			t.Fatal(err)
		}
	}
	const window = 1500 * time.Millisecond
	base := shares(t, window, node.Process.Pid, peer.Process.Pid)

	// The sleep model's effect: the node off the CPU, the peer takes it.
	if err := node.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	asleep := shares(t, window, node.Process.Pid, peer.Process.Pid)
	if err := node.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	inj := []straggler.Injection{{Node: "worker-0", Kind: straggler.CPU, Intensity: 0.8}}
	c, err := Start(Config{Pid: node.Process.Pid, Schedule: straggler.ForNode(inj, "worker-0"), Start: time.Now(), CPU: cpu, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for c.Plan().K == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	p := c.Plan()
	if p.K == 0 || p.Nice != -20 {
		t.Fatalf("plan %+v; want competitors at nice -20 beside a node at -20", p)
	}
	under := shares(t, window, node.Process.Pid, peer.Process.Pid)
	c.Stop()
	t.Logf("CPU share of cpu %d (from /proc): node %.2f, peer %.2f; node stopped: peer %.2f; kind cpu 0.8 (%d competitors at nice %d): node %.2f, peer %.2f",
		cpu, base[0], base[1], asleep[1], p.K, p.Nice, under[0], under[1])

	if asleep[1] < 1.3*base[1] {
		t.Fatalf("with the node stopped the peer's share went from %.2f to only %.2f: this machine cannot show a peer speeding up, so the check below means nothing", base[1], asleep[1])
	}
	if under[0] > 0.7*base[0] {
		t.Errorf("the node's share went from %.2f to %.2f under kind cpu 0.8; want at most 0.7× (the plan leaves it %.0f %% of the CPU)", base[0], under[0], 100*p.Share)
	}
	if under[1] > 1.1*base[1] {
		t.Errorf("the peer's share went from %.2f to %.2f under kind cpu: it took the CPU the straggler lost, as a sleep model would (node stopped: %.2f)", base[1], under[1], asleep[1])
	}
}
