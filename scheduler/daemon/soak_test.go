package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/scheduler/launch"
)

// soakSpec is one job of the soak: policies in auto mode against a
// transient straggler, short enough that jobs come and go.
const soakSpec = `
name: NAME
model: {kind: mlp, hidden: [64]}
data: {kind: mnist, epochs: 1, seed: 1}
train: {global_batch: 128, lr: 0.05}
cluster: {servers: 2, workers: 3}
policies:
  antdt-nd: {mode: auto, lambda: 1.5, window_transient: 2s, window_persistent: 6s}
  psld: {mode: auto}
stragglers:
  - {node: worker-2, kind: compute, sleep: 30ms, intensity: 1, period: 20s, on: 8s}
`

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

// TestSoak runs jobs with policies in auto mode back to back on one
// scheduler for KELPIE_SOAK (make soak: 30m) and samples the scheduler's
// RSS, goroutines and open fds and the agents' RSS and fds every 30 s. It
// fails if a job does not complete or the scheduler's goroutines or fds
// grow beyond twice their first figures (plus slack): a leak.
func TestSoak(t *testing.T) {
	d := envDuration(t, "KELPIE_SOAK", 0)
	if d <= 0 {
		t.Skip("set KELPIE_SOAK (make soak) to run the soak")
	}
	tag := fmt.Sprintf("KELPIE_TEST_TAG=soak-%d", time.Now().UnixNano())
	defer killTagged(tag)
	s := newScheduler(t, tag)
	s.start()
	defer s.stop()
	ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Minute)
	defer cancel()
	var report bytes.Buffer
	fmt.Fprintf(&report, "%-8s %-12s %10s %6s %5s  %s\n", "t", "job", "sched RSS", "gor", "fds", "agents (RSS MB/fds)")
	sample := func(job string, at time.Duration) (procSample, int) {
		sp, _ := sampleProc(s.cmd.Process.Pid)
		g := goroutines(t, s.httpAddr)
		var agents []string
		recs, _ := launch.ReadRecords(filepath.Join(s.dir, "logs", job, "procs.jsonl"))
		for _, r := range recs {
			if a, ok := sampleProc(r.Pid); ok {
				agents = append(agents, fmt.Sprintf("%s %.1f/%d", r.Node, float64(a.rssKB)/1024, a.fds))
			}
		}
		fmt.Fprintf(&report, "%-8s %-12s %8.1fMB %6d %5d  %s\n", at.Round(time.Second), job, float64(sp.rssKB)/1024, g, sp.fds, strings.Join(agents, ", "))
		return sp, g
	}
	start := time.Now()
	var first procSample
	firstG, jobs := -1, 0
	next := time.Now() // the next sample, every 30 s across jobs
	for time.Since(start) < d {
		name := fmt.Sprintf("soak-%d", jobs)
		c, w := s.console(ctx, name)
		s.submit(ctx, c, strings.Replace(soakSpec, "NAME", name, 1))
		_ = c.Subscribe(ctx, []string{name})
		for {
			w.mu.Lock()
			j := w.job
			w.mu.Unlock()
			if j != nil && j.State != "running" && j.State != "starting" && j.State != "" {
				if j.State != "completed" {
					t.Fatalf("soak job %s ended %s: %s", name, j.State, j.Error)
				}
				break
			}
			if time.Now().After(next) {
				sp, g := sample(name, time.Since(start))
				if firstG < 0 && jobs > 0 {
					// Warm: after the first job, during another.
					first, firstG = sp, g
				}
				next = time.Now().Add(30 * time.Second)
			}
			select {
			case <-w.change:
			case <-time.After(time.Second):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		c.Close()
		jobs++
	}
	end, g := sample("(idle)", time.Since(start))
	t.Logf("soak of %v, %d jobs:\n%s", d, jobs, report.String())
	if firstG >= 0 && (g > 2*firstG+50 || end.fds > 2*first.fds+20) {
		t.Errorf("scheduler grew: goroutines %d -> %d, fds %d -> %d", firstG, g, first.fds, end.fds)
	}
}
