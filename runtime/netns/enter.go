package netns

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn with the calling goroutine inside host's network namespace:
// sockets fn opens (a listener, a connection) stay in that namespace after
// Do returns, so a test can put a server on one host and dial it from
// another. fn must not start goroutines that expect to be in the namespace.
func (c *Cluster) Do(host string, fn func() error) error {
	h, ok := c.Host(host)
	if !ok {
		return fmt.Errorf("netns: cluster %s has no host %q", c.Tag, host)
	}
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: %v", err)
	}
	defer unix.Close(orig)
	target, err := unix.Open("/run/netns/"+h.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: open %s: %v", h.NS, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: enter %s: %v", h.NS, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// The thread cannot go back: leave it locked so that it dies with
		// this goroutine instead of serving others in the wrong namespace.
		return fmt.Errorf("netns: leave %s: %v", h.NS, err)
	}
	runtime.UnlockOSThread()
	return ferr
}
