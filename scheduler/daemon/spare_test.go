package daemon

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/launch"
	"github.com/kelpie/kelpie/scheduler/manager"
)

// spareSpec is a job whose worker-2 sleeps 20 ms every iteration (kind
// compute: its host's slowness) from the start and is restarted by the
// script at 2 s, with SPARE spare hosts.
const spareSpec = `
name: NAME
model: {kind: mlp, hidden: [32]}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 256, lr: 0.05, optimizer: momentum, momentum: 0.9}
cluster: {servers: 1, workers: 4, spare_hosts: SPARE}
sync: {model: bsp}
stragglers:
  - {node: worker-2, kind: compute, sleep: 20ms, intensity: 1, probability: 1, start: 0s}
script:
  - {at: 2s, action: restart, node: worker-2}
`

// TestSpareHostMove: with a spare host, a KILL_RESTART relaunches
// worker-2 there (a new agent, the old one's processes all gone) and the
// slowness of its first host stays behind: over the run its BPT is its
// peers'. Without one, the restart is in place and the slowness stays
// with it: its BPT is its peers' plus about the injected sleep. Compared
// within each run against the injected 20 ms, not against a time.
func TestSpareHostMove(t *testing.T) {
	if testing.Short() {
		t.Skip("two MNIST jobs")
	}
	d := startLogged(t)
	defer d.Close(true)
	const sleep = 20e-3 // the injected delay, seconds
	for _, c := range []struct {
		name   string
		spares int
	}{{"spare", 1}, {"inplace", 0}} {
		src := strings.NewReplacer("NAME", c.name, "SPARE", strconv.Itoa(c.spares)).Replace(spareSpec)
		checked := make(chan []string, 1) // what the check of the move found wrong
		res := runJob(t, d, src, func(name string) {
			if c.spares == 0 {
				checked <- nil
				return
			}
			checked <- checkMove(d, name)
		})
		for _, p := range <-checked {
			t.Errorf("%s: %s", c.name, p)
		}
		var restart *manager.ActionResult
		for i, a := range res.Actions {
			t.Logf("%s: %s %s %s host %q from %q: %s", c.name, a.Kind, a.Node, a.State, a.Host, a.FromHost, a.Reason)
			if a.Kind == "KILL_RESTART" && a.Node == "worker-2" {
				restart = &res.Actions[i]
			}
		}
		if restart == nil || restart.State != "applied" {
			t.Fatalf("%s: the scripted KILL_RESTART of worker-2 was not applied: %+v", c.name, restart)
		}
		wantHost, wantFrom := "spare-0", "worker-2"
		if c.spares == 0 {
			wantHost, wantFrom = "", ""
		}
		if restart.Host != wantHost || restart.FromHost != wantFrom {
			t.Errorf("%s: KILL_RESTART host %q from %q; want %q from %q", c.name, restart.Host, restart.FromHost, wantHost, wantFrom)
		}
		slow, fastest, slowest := 0.0, 0.0, 0.0
		for _, n := range res.Nodes {
			switch {
			case n.Role != "worker":
			case n.Name == "worker-2":
				slow = n.BPTMeanS
			default:
				if fastest == 0 || n.BPTMeanS < fastest {
					fastest = n.BPTMeanS
				}
				slowest = max(slowest, n.BPTMeanS)
			}
		}
		t.Logf("%s: worker-2's mean BPT %.1f ms, its peers' %.1f–%.1f ms, JCT %.1f s", c.name, slow*1e3, fastest*1e3, slowest*1e3, res.JCTSeconds)
		if !(slow > 0 && fastest > 0) {
			t.Fatalf("%s: BPTs not measured: %+v", c.name, res.Nodes)
		}
		if c.spares > 0 && slow > slowest+sleep/2 {
			t.Errorf("%s: worker-2's mean BPT %.1f ms is more than half the injected %.0f ms above its slowest peer's (%.1f ms): the injection followed it to the spare host",
				c.name, slow*1e3, sleep*1e3, slowest*1e3)
		}
		if c.spares == 0 && slow < slowest+sleep/2 {
			t.Errorf("%s: worker-2's mean BPT %.1f ms is less than half the injected %.0f ms above its slowest peer's (%.1f ms): a restart in place shed its host's injection",
				c.name, slow*1e3, sleep*1e3, slowest*1e3)
		}
	}
}

// checkMove waits for worker-2 of job name to train, notes its agent and
// everything under it, waits for the KILL_RESTART to apply and says what
// is wrong: an old process still running, worker-2 not shown on spare-0.
func checkMove(d *Daemon, name string) []string {
	var old []int
	last := "no view"
	deadline := time.Now().Add(2 * time.Minute)
	for ; len(old) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, v := range d.Manager.View([]string{name}, 1) {
			for _, n := range v.Nodes {
				if n.Name != "worker-2" {
					continue
				}
				last = fmt.Sprintf("host %q, pid %d, state %s, iteration %d", n.Host, n.Pid, n.State, n.Iteration)
				if n.Pid > 0 && n.Host == "worker-2" {
					if agent := parentOf(int(n.Pid)); agent > 0 {
						old = append([]int{agent}, launch.Descendants(agent)...)
					}
				}
			}
		}
	}
	if len(old) == 0 {
		return []string{"worker-2 never ran on host worker-2; last seen: " + last}
	}
	applied := false
	for ; !applied && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, v := range d.Manager.View([]string{name}, 1) {
			for _, a := range v.Actions {
				applied = applied || a.Kind == "KILL_RESTART" && a.Target == "worker-2" && a.State == "applied"
			}
		}
	}
	if !applied {
		return []string{"the KILL_RESTART of worker-2 never applied"}
	}
	var problems []string
	for _, pid := range old {
		if alive(pid) {
			problems = append(problems, fmt.Sprintf("process %d of worker-2's old agent %d still runs after the move", pid, old[0]))
		}
	}
	onSpare := false
	for ; !onSpare && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, v := range d.Manager.View([]string{name}, 1) {
			for _, n := range v.Nodes {
				onSpare = onSpare || n.Name == "worker-2" && n.Host == "spare-0" && n.Pid > 0
			}
		}
	}
	if !onSpare {
		problems = append(problems, "worker-2 never showed on host spare-0")
	}
	return problems
}

// parentOf is pid's parent (0 if it is gone).
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	pp, _ := strconv.Atoi(f[1])
	return pp
}

// alive says whether pid runs (a zombie does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestSpareHostServer: a server's KILL_RESTART (a new server takes its
// blocks) starts the new server on the spare host, and the job completes.
// (Where a host goes when none is free is hostPlan's, tested in
// scheduler/manager.)
func TestSpareHostServer(t *testing.T) {
	if testing.Short() {
		t.Skip("two MNIST jobs")
	}
	d := startLogged(t)
	defer d.Close(true)
	const src = `
name: NAME
model: {kind: mlp, hidden: [32]}
data: {kind: mnist, epochs: 2, seed: 1}
train: {global_batch: 256, lr: 0.05, optimizer: momentum, momentum: 0.9}
cluster: {servers: 2, workers: 2, block_bytes: 32768, spare_hosts: 1}
sync: {model: bsp}
stragglers:
  - {node: server-1, kind: compute, sleep: 5ms, intensity: 1, probability: 1, start: 0s}
script:
  - {at: 1s, action: restart, node: server-1}
`
	res := runJob(t, d, strings.Replace(src, "NAME", "srv", 1), nil)
	if res.ShardsDone != res.ShardsTotal {
		t.Errorf("shards %d/%d", res.ShardsDone, res.ShardsTotal)
	}
	got := map[string][2]string{}
	for _, a := range res.Actions {
		t.Logf("%s %s %s host %q from %q", a.Kind, a.Node, a.State, a.Host, a.FromHost)
		if a.Kind == "KILL_RESTART" && a.State == "applied" {
			got[a.Node] = [2]string{a.Host, a.FromHost}
		}
	}
	want := map[string][2]string{"server-1": {"spare-0", "server-1"}}
	for node, w := range want {
		if got[node] != w {
			t.Errorf("KILL_RESTART of %s: host %q from %q; want %q from %q", node, got[node][0], got[node][1], w[0], w[1])
		}
	}
}
