// Package launch starts the processes of a job's nodes. The local launcher
// runs them as child processes of this one on 127.0.0.1, each in its own
// process group, stopped by its PID (SIGTERM, then SIGKILL after a grace
// period). Attached children die with their parent (Pdeathsig) and write
// into the parent's log; detached ones (the scheduler's agents) outlive a
// crashed scheduler, so that a restarted one can adopt them, and write to
// their own log files. With a record file, every process group started is
// recorded (node, PID, start time), so that a restarted scheduler can stop
// the groups of a job it killed even if their agents never reconnect.
package launch

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kelpie/kelpie/scheduler/clock"
)

// Proc is one launched node process.
type Proc struct {
	Name string
	Cmd  *exec.Cmd

	exited chan struct{}
	err    error       // the exit status, valid once exited is closed
	clk    clock.Clock // its launcher's
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit error (nil for exit status 0), once Exited.
func (p *Proc) Err() error { return p.err }

// Pid is the process ID.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Stop asks the process to end (SIGTERM) and kills it (SIGKILL) if it is
// still running after grace. It returns once the process has exited.
func (p *Proc) Stop(grace time.Duration) {
	if !p.terminate() {
		return
	}
	select {
	case <-p.exited:
	case <-clock.OrReal(p.clk).After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.exited
	}
}

// terminate sends SIGTERM unless the process has exited; false if it has.
func (p *Proc) terminate() bool {
	select {
	case <-p.exited:
		return false
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	return true
}

// Kill sends SIGKILL (used to test failure handling).
func (p *Proc) Kill() error { return p.Cmd.Process.Kill() }

// KillGroup kills the process with everything it started: SIGKILL to its
// process group (the launcher made it a group leader) and to each of its
// descendants that left the group (found in /proc just before), so that
// nothing of it stays behind. It returns once the process has exited, or
// an error if it has not within grace.
func (p *Proc) KillGroup(grace time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	pid := p.Pid()
	kids := Descendants(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	select {
	case <-p.exited:
		return nil
	case <-clock.OrReal(p.clk).After(grace):
		return fmt.Errorf("launch: %s (pid %d) still running %v after SIGKILL", p.Name, pid, grace)
	}
}

// Descendants lists the processes pid started, and theirs, as /proc shows
// them now.
func Descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], c)
		}
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// Local launches node processes on this machine.
type Local struct {
	Exe    string    // the binary; default: this executable
	Log    io.Writer // attached children's stderr and stdout, each line prefixed with the node name; default os.Stderr
	Detach bool      // children survive this process (new session, no Pdeathsig)
	LogDir string    // detached children write NAME.log here, mode 0600 in a 0700 directory (default: kelpie-logs-UID in os.TempDir())
	// RecordFile, when set, is where the launcher records each process
	// group it starts (record.go), so that the groups can be stopped by a
	// later process too (StopRecorded): a restarted scheduler.
	RecordFile string
	// Clock times the grace periods of stops (nil: the wall clock).
	Clock  clock.Clock
	mu     sync.Mutex
	logMu  sync.Mutex
	procs  []*Proc
	stopMu sync.Mutex
}

// Start runs `Exe args...` as node name.
func (l *Local) Start(name string, args ...string) (*Proc, error) {
	exe := l.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("launch: find own executable: %w", err)
		}
	}
	out := l.Log
	if out == nil {
		out = os.Stderr
	}
	cmd := exec.Command(exe, args...)
	if l.Detach {
		return l.startDetached(name, cmd)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("launch %s: %w", name, err)
	}
	l.record(name, cmd.Process.Pid)
	p := &Proc{Name: name, Cmd: cmd, exited: make(chan struct{}), clk: l.Clock}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			l.logMu.Lock()
			fmt.Fprintf(out, "%-10s| %s\n", name, sc.Text())
			l.logMu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		p.err = cmd.Wait()
		pw.Close()
		<-copied
		close(p.exited)
	}()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

func (l *Local) startDetached(name string, cmd *exec.Cmd) (*Proc, error) {
	dir := l.LogDir
	if dir == "" {
		// A directory of this user's own: the temp dir is everyone's.
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("kelpie-logs-%d", os.Getuid()))
	}
	f, err := OpenPrivate(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("launch %s: %w", name, err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launch %s: %w", name, err)
	}
	l.record(name, cmd.Process.Pid)
	p := &Proc{Name: name, Cmd: cmd, exited: make(chan struct{}), clk: l.Clock}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// record notes a started process group in the record file. A failure is
// only logged: the process runs, a restarted scheduler just cannot stop it
// by itself (its agent's orphan timeout still does).
func (l *Local) record(name string, pid int) {
	if l.RecordFile == "" {
		return
	}
	if err := appendRecord(l.RecordFile, name, pid); err != nil {
		fmt.Fprintf(os.Stderr, "launch: record %s (pid %d): %v\n", name, pid, err)
	}
}

// Procs lists every process started so far.
func (l *Local) Procs() []*Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Proc(nil), l.procs...)
}

// SignalAll sends SIGTERM to every process the launcher started that has
// not exited, and waits for none (SignalRecorded's counterpart; StopAll
// then waits for them).
func (l *Local) SignalAll() {
	for _, p := range l.Procs() {
		p.terminate()
	}
}

// StopAll stops every process still running, in parallel.
func (l *Local) StopAll(grace time.Duration) {
	l.stopMu.Lock()
	defer l.stopMu.Unlock()
	var wg sync.WaitGroup
	for _, p := range l.Procs() {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(grace) }()
	}
	wg.Wait()
}

// OpenPrivate opens a node's log (or record) file for appending, readable
// by this user only: mode 0600 in a 0700 directory. A node log holds what
// its role printed (addresses, paths, refusals, errors), which other local
// users have no business reading; a file or directory left more open by an
// earlier version is closed down.
func OpenPrivate(path string) (*os.File, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
