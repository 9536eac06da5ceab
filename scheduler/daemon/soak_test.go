package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/console/client"
)

// procSample is one process's footprint.
type procSample struct {
	rssKB, fds int
}

func sampleProc(pid int) (procSample, bool) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procSample{}, false
	}
	var s procSample
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			s.rssKB, _ = strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	s.fds = len(fds)
	return s, true
}

// kindOf says what a kelpie process is from its command line: "agent",
// "role" or "" (anything else).
func kindOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
	if len(args) > 1 && (args[1] == "agent" || args[1] == "role") {
		return args[1]
	}
	return ""
}

// soakRow is one sample of the soak.
type soakRow struct {
	at                  time.Duration
	sched               procSample
	goroutines          int
	agents, roles       int
	agentRSS, roleRSS   int // kB, summed
	agentFds, agentMaxF int
}

func (r soakRow) String() string {
	return fmt.Sprintf("%-7s %8.1f %5d %5d   %2d %8.1f %5d %5d   %2d %8.1f", r.at.Round(time.Second), float64(r.sched.rssKB)/1024,
		r.goroutines, r.sched.fds, r.agents, float64(r.agentRSS)/1024, r.agentFds, r.agentMaxF, r.roles, float64(r.roleRSS)/1024)
}

const soakHeader = "t        sched: RSS MB  gor   fds | agents: n  RSS MB  fds  max | roles: n  RSS MB"

// TestSoak runs `kelpie demo --headless --auto` (the demo job, again and
// again, with AntDT-ND and PSLD in auto mode) for KELPIE_SOAK (make soak:
// 30m) and samples every 30 s the scheduler's RSS, goroutines and open fds
// and its agents' and roles' RSS and fds. It fails if a demo job ends other
// than completed, or if anything grew from the first warm sample to the
// last beyond soakGrowth's bounds: the scheduler's goroutines or fds more
// than twice (plus slack), its RSS more than 1.5× plus 64 MiB, an agent's
// or a role's mean RSS more than twice plus 32 MiB: a leak.
func TestSoak(t *testing.T) {
	d := envDuration(t, "KELPIE_SOAK", 0)
	if d <= 0 {
		t.Skip("set KELPIE_SOAK (make soak) to run the soak")
	}
	tag := fmt.Sprintf("KELPIE_TEST_TAG=soak-%d", time.Now().UnixNano())
	defer killTagged(tag)
	httpAddr := freeAddr(t)
	demo := exec.Command(kelpieBin, "demo", "--headless", "--auto", "--data-dir", t.TempDir(), "--http", httpAddr)
	demo.Env = append(os.Environ(), tag)
	demo.Stderr = logWriter{t}
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = demo.Process.Signal(syscall.SIGTERM)
		_ = demo.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	w := &watcher{seen: map[string]map[string]bool{}, bpt: map[string]bool{}, change: make(chan struct{}, 1)}
	// The demo lets anyone watch.
	c, err := client.Dial(ctx, httpAddr, "", client.WithHandler(w.handle), client.WithSubscription([]string{"straggler-demo"}, 1, 10),
		client.WithBackoff(100*time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	sample := func(at time.Duration) soakRow {
		r := soakRow{at: at, goroutines: goroutines(t, httpAddr)}
		r.sched, _ = sampleProc(demo.Process.Pid)
		for _, pid := range tagged(tag) {
			p, ok := sampleProc(pid)
			switch kind := kindOf(pid); {
			case !ok:
			case kind == "agent":
				r.agents++
				r.agentRSS += p.rssKB
				r.agentFds += p.fds
				r.agentMaxF = max(r.agentMaxF, p.fds)
			case kind == "role":
				r.roles++
				r.roleRSS += p.rssKB
			}
		}
		return r
	}
	// outcomes counts the demo jobs' ends from the console's events.
	outcomes := func() map[string]int {
		w.mu.Lock()
		defer w.mu.Unlock()
		out := map[string]int{}
		for _, e := range w.events {
			if e.Kind != "job" || !strings.HasPrefix(e.Message, "job straggler-demo ") {
				continue
			}
			for _, end := range []string{"completed", "failed", "killed", "diverged"} {
				if strings.HasPrefix(strings.TrimPrefix(e.Message, "job straggler-demo "), end) {
					out[end]++
				}
			}
		}
		return out
	}
	start := time.Now()
	var rows []soakRow
	var warm *soakRow
	for {
		r := sample(time.Since(start))
		rows = append(rows, r)
		t.Logf("%s  %v", r, outcomes())
		if warm == nil && outcomes()["completed"] > 0 && r.agents > 0 {
			// Warm: a job has completed and another runs.
			warm = &rows[len(rows)-1]
		}
		if time.Since(start) >= d {
			break
		}
		select {
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	end := rows[len(rows)-1]
	var report strings.Builder
	fmt.Fprintf(&report, "soak of %v: demo jobs %v\n%s\n", d, outcomes(), soakHeader)
	fmt.Fprintf(&report, "%s  (start)\n", rows[0])
	if warm != nil {
		fmt.Fprintf(&report, "%s  (warm: after the first job)\n", *warm)
	}
	fmt.Fprintf(&report, "%s  (end)\n", end)
	t.Log(report.String())
	if o := outcomes(); o["completed"] == 0 || o["failed"]+o["killed"]+o["diverged"] > 0 {
		t.Errorf("demo jobs ended %v; want every one completed", o)
	}
	if warm == nil {
		t.Fatal("no demo job completed: nothing to compare")
	}
	for _, g := range soakGrowth(*warm, end) {
		t.Error(g)
	}
}

// The soak's bounds on growth from the warm sample to the last. The
// scheduler keeps every job's record and timeline (bounded frames), so its
// RSS may grow somewhat with the jobs it has seen, not without bound; the
// agents and roles are new processes for each demo job, so their RSS per
// process should not grow at all beyond the noise of where a job is.
const (
	soakSchedRSSFactor = 1.5      // the scheduler's RSS: at most 1.5× warm ...
	soakSchedRSSSlack  = 64 << 10 // ... plus 64 MiB (kB)
	soakNodeRSSFactor  = 2.0      // an agent's or a role's mean RSS: at most 2× warm ...
	soakNodeRSSSlack   = 32 << 10 // ... plus 32 MiB (kB)
)

// soakGrowth says how end exceeds the soak's bounds relative to warm: the
// scheduler's goroutines, fds and RSS, and the mean RSS of an agent and of
// a role.
func soakGrowth(warm, end soakRow) []string {
	var out []string
	if end.goroutines > 2*warm.goroutines+50 || end.sched.fds > 2*warm.sched.fds+20 {
		out = append(out, fmt.Sprintf("the scheduler grew: goroutines %d -> %d, fds %d -> %d", warm.goroutines, end.goroutines, warm.sched.fds, end.sched.fds))
	}
	if lim := int(soakSchedRSSFactor*float64(warm.sched.rssKB)) + soakSchedRSSSlack; end.sched.rssKB > lim {
		out = append(out, fmt.Sprintf("the scheduler's RSS grew from %d to %d kB (bound %.1f× warm + %d MiB = %d kB)",
			warm.sched.rssKB, end.sched.rssKB, soakSchedRSSFactor, soakSchedRSSSlack>>10, lim))
	}
	mean := func(sum, n int) int {
		if n == 0 {
			return 0
		}
		return sum / n
	}
	for _, p := range []struct {
		what      string
		warm, end int
	}{
		{"an agent's", mean(warm.agentRSS, warm.agents), mean(end.agentRSS, end.agents)},
		{"a role's", mean(warm.roleRSS, warm.roles), mean(end.roleRSS, end.roles)},
	} {
		if lim := int(soakNodeRSSFactor*float64(p.warm)) + soakNodeRSSSlack; p.warm > 0 && p.end > lim {
			out = append(out, fmt.Sprintf("%s mean RSS grew from %d to %d kB (bound %.0f× warm + %d MiB = %d kB)",
				p.what, p.warm, p.end, soakNodeRSSFactor, soakNodeRSSSlack>>10, lim))
		}
	}
	return out
}

// TestSoakGrowth: the soak's bounds let steady figures through and catch
// each kind of growth (the soak itself runs only under make soak).
func TestSoakGrowth(t *testing.T) {
	warm := soakRow{goroutines: 100, sched: procSample{rssKB: 100 << 10, fds: 40}, agents: 3, agentRSS: 3 * 20 << 10, roles: 3, roleRSS: 3 * 30 << 10}
	tests := []struct {
		name   string
		mutate func(*soakRow)
		fails  int
	}{
		{"steady", func(*soakRow) {}, 0},
		{"scheduler RSS within the bound", func(r *soakRow) { r.sched.rssKB = 200 << 10 }, 0},
		{"scheduler RSS beyond it", func(r *soakRow) { r.sched.rssKB = 250 << 10 }, 1},
		{"goroutines", func(r *soakRow) { r.goroutines = 300 }, 1},
		{"more agents, same RSS each", func(r *soakRow) { r.agents, r.agentRSS = 6, 6*20<<10 }, 0},
		{"agent RSS", func(r *soakRow) { r.agentRSS = 3 * 80 << 10 }, 1},
		{"role RSS", func(r *soakRow) { r.roleRSS = 3 * 100 << 10 }, 1},
		{"no roles at the end", func(r *soakRow) { r.roles, r.roleRSS = 0, 0 }, 0},
	}
	for _, tc := range tests {
		end := warm
		tc.mutate(&end)
		if got := soakGrowth(warm, end); len(got) != tc.fails {
			t.Errorf("%s: soakGrowth = %q; want %d failures", tc.name, got, tc.fails)
		}
	}
}
