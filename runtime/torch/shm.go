package torch

import (
	"fmt"
	"os"
	"syscall"
)

// segment is a shared-memory region: a file in /dev/shm, unlinked as soon
// as it exists (nothing is left behind whatever way the worker ends), that
// the child opens through /proc/<worker>/fd/<n> and maps too.
type segment struct {
	f   *os.File
	mem []byte
}

// shmDir is where segments are created: /dev/shm when there is one.
func shmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

func newSegment(size int) (*segment, error) {
	size = max(size, 8)
	f, err := os.CreateTemp(shmDir(), "kelpie-torch-*")
	if err != nil {
		return nil, fmt.Errorf("torch: shared memory: %v", err)
	}
	os.Remove(f.Name())
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("torch: shared memory of %d bytes: %v", size, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("torch: map shared memory: %v", err)
	}
	return &segment{f: f, mem: mem}, nil
}

// path is where the child opens the segment.
func (s *segment) path() string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), s.f.Fd()) }

func (s *segment) close() {
	if s == nil || s.mem == nil {
		return
	}
	syscall.Munmap(s.mem)
	s.f.Close()
	s.mem = nil
}
