package torch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// stacksFDEnv tells the child which of its descriptors to dump its frames
// to when it gets SIGUSR1 (py/child.py registers faulthandler on it).
const stacksFDEnv = "KELPIE_STACKS_FD"

// stacksWait bounds how long Stacks waits for the child's dump.
const stacksWait = 2 * time.Second

// stacksFile is an unlinked temporary file opened for appending: the
// child's writes land at its end, wherever the worker truncated it.
func stacksFile() (*os.File, error) {
	f, err := os.CreateTemp("", "kelpie-torch-stacks-*")
	if err != nil {
		return nil, err
	}
	name := f.Name()
	f.Close()
	g, err := os.OpenFile(name, os.O_RDWR|os.O_APPEND, 0o600)
	os.Remove(name)
	return g, err
}

// Stacks is the Python child's frames, every thread's (faulthandler), at
// most limit bytes under a "--- python child (pid N)" line: the worker's
// part of `kelpie job stacks` beyond its own goroutines. It signals the
// child and waits (at most 2 s) for the dump to stop growing; a child that
// is gone or does not dump is named in the error.
func (m *Model) Stacks(limit int) (string, error) {
	c := m.c
	if c == nil || c.stacks == nil {
		return "", errors.New("torch: the Python child has no stacks file")
	}
	select {
	case <-c.waited:
		return "", errors.New("torch: the Python child has exited")
	default:
	}
	if err := c.stacks.Truncate(0); err != nil {
		return "", fmt.Errorf("torch: stacks file: %v", err)
	}
	pid := c.pid()
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return "", fmt.Errorf("torch: signal the Python child (pid %d): %v", pid, err)
	}
	// faulthandler writes the dump from its signal handler in a few
	// writes: wait until the file has something and stops growing.
	deadline := time.Now().Add(stacksWait)
	var size int64 = -1
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		st, err := c.stacks.Stat()
		if err != nil {
			return "", fmt.Errorf("torch: stacks file: %v", err)
		}
		if st.Size() > 0 && st.Size() == size {
			break
		}
		size = st.Size()
	}
	head := fmt.Sprintf("--- python child (pid %d)\n", pid)
	if limit <= len(head) {
		return "", errors.New("torch: no room left for the Python child's frames")
	}
	buf := make([]byte, limit-len(head))
	n, err := c.stacks.ReadAt(buf, 0)
	if err != nil && err != io.EOF {
		return "", fmt.Errorf("torch: stacks file: %v", err)
	}
	if n == 0 {
		return "", fmt.Errorf("torch: the Python child (pid %d) wrote no frames within %s", pid, stacksWait)
	}
	return head + string(buf[:n]), nil
}
