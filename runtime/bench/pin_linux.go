package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// CPU affinity is per thread on Linux, and a Go process already runs several
// threads when main starts, so pinning one thread (sched_setaffinity(0, ...))
// pins little. pinProcess sets the mask of every thread listed in
// /proc/self/task, repeating until a pass finds nothing left to change
// (threads created meanwhile inherit the mask of the thread that cloned
// them, so the set converges). This is what taskset(1) gets by setting the
// mask before exec, without needing taskset.

// pinProcess pins every thread of this process to cpu and sets GOMAXPROCS
// to 1, as a process started under `taskset -c cpu` would have. The returned
// function restores the previous masks and GOMAXPROCS.
func pinProcess(cpu int) (restore func(), err error) {
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return nil, fmt.Errorf("bench: read cpu affinity: %v", err)
	}
	// No check of cpu against old: a server inherits the benchmark's mask
	// (CPU 0) and widens it to its own CPU here.
	var set unix.CPUSet
	set.Set(cpu)
	if err := setAllThreads(&set); err != nil {
		return nil, err
	}
	procs := runtime.GOMAXPROCS(1)
	return func() {
		_ = setAllThreads(&old)
		runtime.GOMAXPROCS(procs)
	}, nil
}

func setAllThreads(set *unix.CPUSet) error {
	for pass := 0; pass < 10; pass++ {
		tids, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("bench: list threads: %v", err)
		}
		changed := 0
		for _, t := range tids {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			var cur unix.CPUSet
			if unix.SchedGetaffinity(tid, &cur) == nil && cur == *set {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
				return fmt.Errorf("bench: set cpu affinity of thread %d: %v", tid, err)
			}
			changed++
		}
		if changed == 0 {
			return nil
		}
	}
	return nil
}

// canPin reports whether CPUs 0 and 1 are both available, the layout the
// benchmark pins to (itself on 0, servers on 1).
func canPin() bool {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return false
	}
	return set.IsSet(0) && set.IsSet(1)
}
