// Package contend carries out kind cpu stragglers for real: it pins a
// node's process to one CPU and starts competitor processes on that CPU,
// busy loops that take the share of it the spec's intensity asks for, while
// the injection is active (stopped with SIGSTOP outside its active windows,
// killed with the node).
//
// The share comes from the kernel's fair scheduler: tasks runnable on one
// CPU share it in proportion to their weights (nice values). With k
// competitors of weight w beside a node of weight w0, the node keeps
// w0/(w0 + k·w). Competitors can be given a lower nice value (a larger
// weight) only by root; otherwise they run at the node's nice and the share
// is set by their number (at most MaxCompetitors). Plan picks k and the
// nice value closest to the share asked for.
//
// Everything else that runs on that CPU (other nodes of a job on one
// machine, the kernel) competes with the competitors too, as everything on
// a contended host does; nodes not pinned move to the other CPUs. No
// cgroup is used: a CPU quota (cgroup cpu.max) would cap the node but hand
// the CPU it frees to its peers, where a competitor takes it, which is what
// a straggler on a shared host is.
package contend

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kelpie/kelpie/core/straggler"
)

// MaxCompetitors bounds the competitor processes of one node.
const MaxCompetitors = 8

// weights is the kernel's sched_prio_to_weight: the weight of nice -20..19.
var weights = [40]float64{
	88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916,
	9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277,
	1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
	110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
}

func weight(nice int) float64 { return weights[nice+20] }

// Plan is how to leave a node a share of its CPU: K competitors at Nice,
// beside the node at its own nice.
type Plan struct {
	K    int
	Nice int
	// Share is what the node keeps with this plan (the kernel's weights).
	Share float64
}

// PlanFor picks the competitors that leave a node at nice nodeNice the
// share closest to want (in (0, 1]), with competitors' nice values no lower
// than minNice (root: -20; others: nodeNice, as an unprivileged process
// may only raise a nice value). want 1 needs none.
func PlanFor(want float64, nodeNice, minNice int) Plan {
	if want >= 1 {
		return Plan{Share: 1}
	}
	w0 := weight(nodeNice)
	best := Plan{Share: 1}
	bestErr := math.Inf(1)
	for k := 1; k <= MaxCompetitors; k++ {
		for n := max(minNice, -20); n <= 19; n++ {
			share := w0 / (w0 + float64(k)*weight(n))
			// Relative error on the share kept: 0.5 % asked, 1 % kept is
			// as far off as 50 % asked, 100 % kept.
			if e := math.Abs(math.Log(share / want)); e < bestErr-1e-12 {
				best, bestErr = Plan{K: k, Nice: n, Share: share}, e
			}
		}
		if bestErr <= planTolerance {
			return best // the fewest competitors that come close enough
		}
	}
	return best
}

// planTolerance is how far (relative) a plan's share may be from the one
// asked for when fewer competitors can get there: 10 %.
const planTolerance = 0.1

// Config is one node's contention.
type Config struct {
	Pid int // the node's process (all its threads are pinned)
	// Also are more processes of the node pinned with it (a torch
	// worker's Python child, which it did not start as its descendant
	// after the pinning, or which a zygote forked): the node's compute
	// runs there too.
	Also     []int
	Schedule straggler.Schedule // its injections; only kind cpu is carried out here
	Start    time.Time          // the job's time zero, for the schedule
	// CPU is the CPU to pin to; -1: the last one.
	CPU int
	// Logf, if set, reports what is done.
	Logf func(format string, a ...any)
}

// Contender is a node's running contention.
type Contender struct {
	cfg   Config
	cpu   int
	nice  int         // the node's nice
	min   int         // the lowest nice competitors may have
	procs []*exec.Cmd // on mu: appended by run, read by Pids
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	plan  Plan // in force now (K 0: none running)
}

// Start pins cfg.Pid (and cfg.Also) to one CPU and follows cfg.Schedule's cpu injections
// with competitors until Stop. A schedule without them does nothing (and
// pins nothing): Start returns a Contender whose Stop does nothing.
func Start(cfg Config) (*Contender, error) {
	c := &Contender{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	if !cfg.Schedule.Contends() {
		close(c.done)
		return c, nil
	}
	c.cpu = cfg.CPU
	if c.cpu < 0 {
		c.cpu = runtime.NumCPU() - 1
	}
	for _, pid := range append([]int{cfg.Pid}, cfg.Also...) {
		if err := pin(pid, c.cpu); err != nil {
			return nil, fmt.Errorf("contend: pin %d to cpu %d: %v", pid, c.cpu, err)
		}
	}
	prio, err := unix.Getpriority(unix.PRIO_PROCESS, cfg.Pid)
	if err != nil {
		return nil, fmt.Errorf("contend: nice of %d: %v", cfg.Pid, err)
	}
	c.nice = 20 - prio // the raw syscall returns 20 - nice
	c.min = c.nice
	if os.Geteuid() == 0 {
		c.min = -20
	}
	go c.run()
	return c, nil
}

// CPU is the CPU the node and its competitors are pinned to.
func (c *Contender) CPU() int { return c.cpu }

// Plan is the contention in force now.
func (c *Contender) Plan() Plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.plan
}

// Stop kills the competitors and waits for them.
func (c *Contender) Stop() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// tick is how often the schedule is followed.
const tick = 20 * time.Millisecond

func (c *Contender) run() {
	defer close(c.done)
	defer c.killAll()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		c.follow(time.Since(c.cfg.Start))
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
	}
}

// follow puts in force the plan for the contention at t.
func (c *Contender) follow(t time.Duration) {
	share := 1 - c.cfg.Schedule.Contention(t, 0.999)
	p := PlanFor(share, c.nice, c.min)
	c.mu.Lock()
	same := p == c.plan
	c.mu.Unlock()
	if same {
		return
	}
	for len(c.procs) < p.K {
		cmd, err := spinner(c.cpu)
		if err != nil {
			c.logf("contend: competitor: %v", err)
			return
		}
		c.mu.Lock()
		c.procs = append(c.procs, cmd)
		c.mu.Unlock()
	}
	for i, cmd := range c.procs {
		if i < p.K {
			_ = unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, p.Nice)
			_ = cmd.Process.Signal(syscall.SIGCONT)
		} else {
			_ = cmd.Process.Signal(syscall.SIGSTOP)
		}
	}
	c.mu.Lock()
	c.plan = p
	c.mu.Unlock()
	c.logf("contend: cpu %d: %d competitors at nice %d, the node keeps %.1f %% of it (asked %.1f %%)", c.cpu, p.K, p.Nice, 100*p.Share, 100*share)
}

func (c *Contender) killAll() {
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for _, cmd := range procs {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Pids are the competitors' process ids.
func (c *Contender) Pids() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for _, cmd := range c.procs {
		out = append(out, cmd.Process.Pid)
	}
	return out
}

func (c *Contender) logf(format string, a ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, a...)
	}
}

// spinner starts one competitor pinned to cpu: a shell's busy loop, killed
// with its parent (PR_SET_PDEATHSIG) if the node dies without Stop.
func spinner(cpu int) (*exec.Cmd, error) {
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := pin(cmd.Process.Pid, cpu); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return cmd, nil
}

// pin sets the CPU affinity of every thread of pid to cpu (threads it
// creates later inherit it from their creator).
func pin(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return err
		}
	}
	return nil
}
