package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is one server process, known by its PID.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addr   string
	exited chan struct{} // closed once the process has been reaped
}

// Launcher says how to start a server process of the same binary: Exe with
// Args, then RunServer's flags, with Env added to the environment.
type Launcher struct {
	Exe  string
	Args []string
	Env  []string
}

// startChild starts a server process and waits (at most 15 s) for the
// address it listens on. extra are more RunServer flags.
func startChild(ctx context.Context, l Launcher, kind ServerKind, workers int, sizes []int, cpu int, profile string, extra []string, stderr io.Writer) (*child, error) {
	args := append(append([]string(nil), l.Args...),
		"--kind", string(kind), "--listen", "127.0.0.1:0", "--workers", strconv.Itoa(workers),
		"--sizes", formatSizes(sizes), "--cpu", strconv.Itoa(cpu))
	args = append(args, extra...)
	if profile != "" {
		args = append(args, "--cpuprofile", profile)
	}
	cmd := exec.Command(l.Exe, args...)
	cmd.Env = append(os.Environ(), l.Env...)
	cmd.Stderr = stderr
	setParentDeath(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: start %s server: %v", kind, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("bench: start %s server: %v", kind, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s server: %v", kind, err)
	}
	c := &child{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		// Keep draining so a chatty child never blocks on a full pipe;
		// this ends when the child exits.
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(c.exited)
	}()
	timer := time.NewTimer(15 * time.Second)
	defer timer.Stop()
	select {
	case l, ok := <-line:
		if ok && strings.HasPrefix(l, addrLine) {
			c.addr = strings.TrimPrefix(l, addrLine)
			return c, nil
		}
		c.stop()
		return nil, fmt.Errorf("bench: %s server pid %d did not report its address (said %q)", kind, cmd.Process.Pid, l)
	case <-timer.C:
		c.stop()
		return nil, fmt.Errorf("bench: %s server pid %d did not start within 15s", kind, cmd.Process.Pid)
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	}
}

// pid is the server process's id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// stop ends the process by its PID: stdin closed and SIGTERM, then SIGKILL
// after three seconds. It returns once the process has been reaped.
func (c *child) stop() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return
	case <-time.After(3 * time.Second):
	}
	_ = c.cmd.Process.Kill()
	<-c.exited
}
