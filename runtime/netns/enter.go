package netns

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

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

// Exec replaces this process by argv (argv[0] looked up in PATH) running
// inside host: in its network namespace and in a UTS namespace of its own
// named after the host, so that programs telling hosts apart by host name
// (a server's Unix socket is used only by clients on its host) see
// another host. The process keeps its PID, so whoever started it can
// still signal it. Exec returns only on error.
func (c *Cluster) Exec(host string, argv, env []string) error {
	h, ok := c.Host(host)
	if !ok {
		return fmt.Errorf("netns: cluster %s has no host %q", c.Tag, host)
	}
	if len(argv) == 0 {
		return fmt.Errorf("netns: nothing to run in %s", host)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("netns: %v", err)
	}
	// The thread that calls execve is the one whose namespaces the new
	// program gets; it never goes back.
	runtime.LockOSThread()
	target, err := unix.Open("/run/netns/"+h.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netns: open %s: %v", h.NS, err)
	}
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("netns: enter %s: %v", h.NS, err)
	}
	unix.Close(target)
	if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
		return fmt.Errorf("netns: new UTS namespace for %s: %v", host, err)
	}
	if err := unix.Sethostname([]byte(host)); err != nil {
		return fmt.Errorf("netns: host name %s: %v", host, err)
	}
	return syscall.Exec(path, argv, env)
}

// description is what Save writes: enough to act on the cluster from
// another process.
type description struct {
	Tag     string `json:"tag"`
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway"`
	Hosts   []Host `json:"hosts"`
	Config  Config `json:"config"`
}

// Save writes the cluster's description to path (mode 0600).
func (c *Cluster) Save(path string) error {
	b, err := json.Marshal(description{Tag: c.Tag, Subnet: c.Subnet, Gateway: c.Gateway, Hosts: c.Hosts, Config: c.cfg})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Load reads a cluster that Save described; the cluster itself is not
// checked (it may have been taken down since).
func Load(path string) (*Cluster, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("netns: %v", err)
	}
	var d description
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("netns: %s: %v", path, err)
	}
	if err := checkTag(d.Tag); err != nil {
		return nil, err
	}
	return &Cluster{Tag: d.Tag, Subnet: d.Subnet, Gateway: d.Gateway, Hosts: d.Hosts, cfg: d.Config}, nil
}
