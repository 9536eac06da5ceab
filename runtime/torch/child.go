package torch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TensorInfo is one parameter tensor as the child reports it.
type TensorInfo struct {
	Name   string `json:"name"`
	Rows   int    `json:"rows"`
	Cols   int    `json:"cols"`
	Sparse bool   `json:"sparse"`
}

// hello is the child's first message: the module's tensors and the sizes
// of the script's data sets.
type hello struct {
	Tensors []TensorInfo `json:"tensors"`
	Train   int          `json:"train"`
	Test    int          `json:"test"`
	Error   string       `json:"error"`
	// Batched says that the child indexes the training set with a whole
	// batch at once: a batch needs no preparing ahead.
	Batched bool `json:"batched"`
	// Warm says that a zygote forked the child (zygote.go), and Zygote
	// which.
	Warm   bool `json:"warm"`
	Zygote int  `json:"zygote"`
}

// reply is the child's answer to one request.
type reply struct {
	Error   string    `json:"error"`
	N       int       `json:"n"`
	Loss    jsonFloat `json:"loss"`
	Metric  jsonFloat `json:"metric"`
	Seconds float64   `json:"seconds"`
	// A step's: of Seconds, the time spent collating its batch (0 when a
	// prep had collated it); the time spent in preps since the previous
	// step; when the child read the request and wrote this reply (Unix
	// nanoseconds: the two pipes' latency, with the worker's clock).
	Data float64 `json:"data"`
	Prep float64 `json:"prep"`
	In   int64   `json:"t_in"`
	Out  int64   `json:"t_out"`
}

// jsonFloat is a number that may be non-finite: Python's json writes NaN
// and ±Infinity bare, which read quotes (a diverged step must reach the
// worker as a number).
type jsonFloat float64

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := strconv.ParseFloat(s, 64) // "NaN", "Infinity", "-Infinity"
		*f = jsonFloat(v)
		return err
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*f = jsonFloat(v)
	return err
}

var nonFinite = regexp.MustCompile(`(:\s*)(NaN|-?Infinity)\b`)

// child is one running python3 process and its two pipes: started here
// (cmd), or forked by a zygote (forked, its pid, and pidfd; see zygote.go).
type child struct {
	script string
	cmd    *exec.Cmd
	forked int
	pidfd  int
	in     *os.File // the child's fd 3: requests
	out    *bufio.Reader
	outF   *os.File // the child's fd 4: replies
	tail   *tailWriter
	stacks *os.File // where the child dumps its frames on SIGUSR1 (serve mode; stacks.go)
	waited chan struct{}
	mu     sync.Mutex
	line   []byte // the request being written, on mu
}

// startOptions say how to start the child.
type startOptions struct {
	Mode    string // probe | serve
	Script  string
	Seed    int64
	Threads int
	Stderr  io.Writer // where the child's output goes (besides the kept tail)
	// Owner, when not 0, is the process whose life bounds a zygote kept
	// for this child's restarts (a warm start: zygote.go).
	Owner int
}

// start launches the child. It dies with the worker: the kernel sends it
// SIGKILL when the worker's thread that started it ends (PR_SET_PDEATHSIG),
// and its request pipe reaches EOF when the worker is gone.
func start(o startOptions) (*child, *hello, error) {
	if _, err := os.Stat(o.Script); err != nil {
		return nil, nil, fmt.Errorf("torch script %s: %v", o.Script, err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, err
	}
	stderr := o.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	tail := &tailWriter{max: 8 << 10}
	args := []string{"-u", "-c", childSource, o.Mode, o.Script, strconv.FormatInt(o.Seed, 10), strconv.Itoa(max(o.Threads, 1))}
	cmd := exec.Command(Python(), args...)
	cmd.Env = childEnv(max(o.Threads, 1))
	cmd.Stdout = io.MultiWriter(stderr, tail)
	cmd.Stderr = io.MultiWriter(stderr, tail)
	cmd.ExtraFiles = []*os.File{inR, outW} // fds 3 and 4
	var stacks *os.File
	if o.Mode == "serve" {
		if stacks, err = stacksFile(); err == nil {
			cmd.ExtraFiles = append(cmd.ExtraFiles, stacks) // fd 5
			cmd.Env = append(cmd.Env, stacksFDEnv+"=5")
		} else {
			fmt.Fprintf(stderr, "torch: no stacks file for the child (kelpie job stacks will not show its frames): %v\n", err)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		if stacks != nil {
			stacks.Close()
		}
		return nil, nil, fmt.Errorf("torch: start %s: %v (install Debian's python3, python3-torch and python3-numpy, or set %s)", Python(), err, PythonEnv)
	}
	inR.Close()
	outW.Close()
	// Replies are read by a blocking read(2) on the pipe, not through Go's
	// poller: the child's reply then wakes the very thread that waits for
	// it, where the poller would wake its own thread first (one more
	// wake-up per step, milliseconds on a loaded machine). Fd puts the
	// descriptor in blocking mode.
	c := &child{script: o.Script, cmd: cmd, in: inW, outF: outR, out: bufio.NewReader(blockingReader(outR.Fd())), tail: tail, stacks: stacks, waited: make(chan struct{})}
	go func() { cmd.Wait(); close(c.waited) }()
	return c.greeted()
}

// greeted reads the child's hello; a child that fails to greet is closed.
func (c *child) greeted() (*child, *hello, error) {
	var h hello
	if err := c.read(&h); err != nil {
		c.Close()
		return nil, nil, err
	}
	if h.Error != "" {
		c.Close()
		return nil, nil, errors.New(h.Error)
	}
	return c, &h, nil
}

// childEnv is the worker's environment plus the MNIST directory, and the
// child's thread count for the BLAS and OpenMP pools (which would otherwise
// start a thread per core in every worker's child).
func childEnv(threads int) []string {
	env := os.Environ()
	for _, k := range []string{"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"} {
		if os.Getenv(k) == "" {
			env = append(env, k+"="+strconv.Itoa(threads))
		}
	}
	if os.Getenv(MNISTEnv) == "" {
		if dir, err := findMNIST(); err == nil {
			env = append(env, MNISTEnv+"="+dir)
		}
	}
	return env
}

// read reads one message. When the child has died instead, the error says
// why: a missing module names its Debian package; otherwise the end of its
// output.
func (c *child) read(v any) error {
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		select {
		case <-c.waited:
		case <-time.After(2 * time.Second):
		}
		return c.died()
	}
	if bytes.Contains(line, []byte("NaN")) || bytes.Contains(line, []byte("Infinity")) {
		line = nonFinite.ReplaceAll(line, []byte(`$1"$2"`))
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("torch child: bad message %q: %v", line, err)
	}
	return nil
}

var missingModule = regexp.MustCompile(`kelpie-torch: missing-module (\S+)`)

// died explains the child's exit.
func (c *child) died() error {
	out := c.tail.String()
	if m := missingModule.FindStringSubmatch(out); m != nil {
		pkg := Packages[m[1]]
		if pkg == "" {
			pkg = "the package that provides it"
		}
		return fmt.Errorf("torch: %s has no Python module %s: install Debian's %s (apt-get install %s), or set %s to a python3 that has it",
			Python(), m[1], pkg, pkg, PythonEnv)
	}
	state := "ended"
	if c.cmd != nil && c.cmd.ProcessState != nil {
		state = c.cmd.ProcessState.String()
	}
	return fmt.Errorf("torch child for %s %s; its last output:\n%s", c.script, state, lastLines(out, 20))
}

// call sends one request (a JSON object without its newline) and reads its
// reply.
func (c *child) call(req any, resp *reply) error {
	b, ok := req.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(req); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.write(b); err != nil {
		return err
	}
	if err := c.read(resp); err != nil {
		return err
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	return nil
}

// send sends a request that has no reply (prep).
func (c *child) send(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.write(b)
}

// write writes b and its newline in one write (one message, one wake-up of
// the child).
func (c *child) write(b []byte) error {
	c.line = append(append(c.line[:0], b...), '\n')
	if _, err := c.in.Write(c.line); err != nil {
		return c.died()
	}
	return nil
}

// Close asks the child to exit and waits for it (briefly: then kills it).
func (c *child) Close() error {
	if c == nil {
		return nil
	}
	c.in.Close() // EOF: the child leaves its loop
	select {
	case <-c.waited:
	case <-time.After(3 * time.Second):
		c.kill()
		<-c.waited
	}
	c.outF.Close()
	if c.forked != 0 {
		unix.Close(c.pidfd)
	}
	if c.stacks != nil {
		c.stacks.Close()
	}
	return nil
}

// kill kills the child (a forked one through its pidfd: its pid may not
// be reused for another process meanwhile).
func (c *child) kill() {
	if c.forked != 0 {
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGKILL, nil, 0)
		return
	}
	_ = c.cmd.Process.Kill()
}

// pid is the child's process id.
func (c *child) pid() int {
	if c.forked != 0 {
		return c.forked
	}
	return c.cmd.Process.Pid
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func lastLines(s string, n int) string {
	end := len(s)
	for end > 0 && s[end-1] == '\n' {
		end--
	}
	i := end
	for k := 0; k < n && i > 0; k++ {
		i--
		for i > 0 && s[i-1] != '\n' {
			i--
		}
	}
	return s[i:end]
}

// blockingReader reads a descriptor in blocking mode with read(2).
type blockingReader uintptr

func (r blockingReader) Read(p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(r), p)
		if err == syscall.EINTR {
			continue
		}
		if n == 0 && err == nil {
			return 0, io.EOF
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}
