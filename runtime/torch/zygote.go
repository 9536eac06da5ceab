package torch

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A warm start. Starting a child costs seconds of CPU before its first step
// (importing torch, running the script's train_set() and test_set(),
// building the module), which a KILL_RESTART of a torch worker used to pay
// again every time. With an owner (the node's agent, which outlives its
// role's restarts), the first child is started as a zygote instead: a
// python3 that loads the script once and then forks a serving child for
// each worker that asks on an abstract Unix socket. A restarted worker's
// child is then a fork, ready in milliseconds, with the same module and
// data sets (built with the same seed, as a cold child would build them).
//
// Lifetimes: the zygote is in a process group of its own (the agent's kill
// of its role spares it) and ends when its owner ends (it waits on the
// owner's pidfd); each forked child ends when its worker ends (it waits on
// the worker's pidfd, since its parent is the zygote, not the worker: the
// parent-death signal of a cold child cannot tie them). Only the owner and
// its children may ask the zygote for a child (SO_PEERCRED, decided on the
// caller, not on what it sends).

// zygoteName is the abstract socket of the zygote of owner for this child:
// a script, seed, thread count, interpreter, environment or child source
// that differs gets a zygote of its own (the old one ends with its owner).
func zygoteName(o startOptions) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%d\x00", Python(), o.Script, o.Seed, o.Threads)
	if st, err := os.Stat(o.Script); err == nil {
		fmt.Fprintf(h, "%d\x00%d\x00", st.Size(), st.ModTime().UnixNano())
	}
	h.Write([]byte(childSource))
	env := slices.Clone(os.Environ())
	slices.Sort(env)
	for _, e := range env {
		h.Write([]byte(e))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("kelpie-torch/%d/%x", o.Owner, h.Sum64())
}

// stderrOf is where a child's output goes.
func stderrOf(o startOptions) io.Writer {
	if o.Stderr == nil {
		return os.Stderr
	}
	return o.Stderr
}

// errNoZygote says that no zygote answers on the name.
var errNoZygote = errors.New("no zygote")

// startWarm returns a child forked by the owner's zygote for this script,
// starting the zygote first when none answers. A script error is returned
// as from a cold start; any other failure of the warm path is returned
// wrapped in errWarm, for the caller to fall back to a cold start.
func startWarm(o startOptions) (*child, *hello, error) {
	name := zygoteName(o)
	c, h, err := forkFrom(name, o)
	if !errors.Is(err, errNoZygote) {
		return c, h, err
	}
	if err := startZygote(name, o); err != nil {
		return nil, nil, err
	}
	return forkFrom(name, o)
}

// errWarm marks a failure of the warm path itself (not of the script).
type errWarm struct{ err error }

func (e errWarm) Error() string { return "torch: warm start: " + e.err.Error() }
func (e errWarm) Unwrap() error { return e.err }

// startZygote starts the zygote and waits until it listens (or says what
// is wrong with the script).
func startZygote(name string, o startOptions) error {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return errWarm{err}
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		readyR.Close()
		readyW.Close()
		return errWarm{err}
	}
	tail := &tailWriter{max: 8 << 10}
	args := []string{"-u", "-c", childSource, "zygote", o.Script, strconv.FormatInt(o.Seed, 10), strconv.Itoa(max(o.Threads, 1)),
		name, strconv.Itoa(o.Owner)}
	cmd := exec.Command(Python(), args...)
	cmd.Env = childEnv(max(o.Threads, 1))
	cmd.Stdout = io.MultiWriter(stderrOf(o), tail)
	cmd.Stderr = cmd.Stdout
	cmd.ExtraFiles = []*os.File{null, readyW} // fds 3 and 4
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	null.Close()
	readyW.Close()
	if err != nil {
		readyR.Close()
		return errWarm{err}
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }() // reaped if it ends while this worker lives
	z := &child{script: o.Script, cmd: cmd, outF: readyR, out: bufio.NewReader(readyR), tail: tail, waited: waited}
	var h hello
	err = z.read(&h)
	readyR.Close()
	if err != nil {
		return err
	}
	if h.Error != "" {
		return errors.New(h.Error)
	}
	return nil
}

// forkFrom asks the zygote on name for a child (errNoZygote when none
// answers).
func forkFrom(name string, o startOptions) (*child, *hello, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: "@" + name, Net: "unix"})
	if err != nil {
		return nil, nil, errNoZygote
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var pipes []*os.File // the child's ends, then ours
	closeAll := func() {
		for _, f := range pipes {
			f.Close()
		}
	}
	for range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, nil, errWarm{err}
		}
		pipes = append(pipes, r, w)
	}
	// pipes: 0,1 requests (child reads 0); 2,3 replies (child writes 3);
	// 4,5 output (child writes 5).
	inR, inW, outR, outW, logR, logW := pipes[0], pipes[1], pipes[2], pipes[3], pipes[4], pipes[5]
	fds := []int{int(inR.Fd()), int(outW.Fd()), int(logW.Fd())}
	stacks, err := stacksFile()
	if err == nil {
		fds = append(fds, int(stacks.Fd())) // the fork's fd 5
	} else {
		fmt.Fprintf(stderrOf(o), "torch: no stacks file for the child (kelpie job stacks will not show its frames): %v\n", err)
	}
	_, _, err = conn.WriteMsgUnix([]byte("{}"), unix.UnixRights(fds...), nil)
	inR.Close()
	outW.Close()
	logW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		logR.Close()
		if stacks != nil {
			stacks.Close()
		}
		return nil, nil, errWarm{err}
	}
	var ans struct {
		Pid int `json:"pid"`
	}
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &ans)
	}
	closeOurs := func() {
		inW.Close()
		outR.Close()
		if stacks != nil {
			stacks.Close()
		}
	}
	if err != nil || ans.Pid <= 0 {
		closeOurs()
		logR.Close()
		return nil, nil, errWarm{fmt.Errorf("the zygote %s did not fork a child: %v", name, err)}
	}
	tail := &tailWriter{max: 8 << 10}
	go func() { _, _ = io.Copy(io.MultiWriter(stderrOf(o), tail), logR); logR.Close() }()
	pidfd, err := unix.PidfdOpen(ans.Pid, 0)
	if err != nil {
		closeOurs()
		return nil, nil, errWarm{fmt.Errorf("pidfd of child %d: %v", ans.Pid, err)}
	}
	// Where the kernel restricts ptrace to descendants (Yama), the child
	// maps this worker's shared memory through /proc/<worker>/fd only if
	// the worker names it its ptracer: it is the zygote's child, not ours.
	_ = unix.Prctl(unix.PR_SET_PTRACER, uintptr(ans.Pid), 0, 0, 0)
	c := &child{script: o.Script, forked: ans.Pid, pidfd: pidfd, in: inW, outF: outR,
		out: bufio.NewReader(blockingReader(outR.Fd())), tail: tail, stacks: stacks, waited: make(chan struct{})}
	go func() {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err != unix.EINTR {
				break
			}
		}
		close(c.waited)
	}()
	return c.greeted()
}

// zygoteOf is the pid of the zygote answering for o, or 0 (tests).
func zygoteOf(o startOptions) int {
	o.Script, _ = filepath.Abs(o.Script)
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: "@" + zygoteName(o), Net: "unix"})
	if err != nil {
		return 0
	}
	defer conn.Close()
	cred, err := unix.GetsockoptUcred(connFd(conn), unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return 0
	}
	return int(cred.Pid)
}

func connFd(c *net.UnixConn) int {
	fd := -1
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(f uintptr) { fd = int(f) })
	}
	return fd
}
