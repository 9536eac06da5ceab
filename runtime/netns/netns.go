// Package netns builds a small multi-rack network on one Linux machine for
// tests and experiments: every "host" is a network namespace with its own
// address, hosts of a rack hang off one bridge, and the racks' bridges join
// a spine bridge through one uplink each, shaped with tc (token bucket, both
// directions, as a full-duplex link is) — so a 4:1 oversubscribed cross-rack
// link is a rate. Processes run inside a host with Cluster.Command.
//
// Everything lives in namespaces the cluster creates: the hosts' and one
// "fabric" namespace that holds the bridges and uplinks, so deleting the
// namespaces removes every interface. Names start with a per-run tag that
// carries the creating process's ID ("kn<pid36>", plus a letter per
// cluster), so parallel runs never collide and Sweep can remove what a
// crashed run left behind. Up and Down are idempotent; Down kills the
// processes still running in the namespaces first. The package needs root
// and the ip and tc tools (iproute2); Available says whether they are here.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Prefix starts every namespace this package creates.
const Prefix = "kn"

// Config describes the network.
type Config struct {
	// Racks lists each rack's host names (letters, digits, '-').
	Racks [][]string
	// Uplink is each rack's link to the spine, as tc writes rates
	// ("100mbit"); "" leaves it unshaped.
	Uplink string
	// HostLink shapes every host's own link; "" leaves it unshaped.
	HostLink string
	// Delay adds a one-way latency to each uplink (tc netem, which needs
	// the kernel's sch_netem: not every machine has it), e.g. 1ms.
	Delay time.Duration
}

// Host is one namespace of the cluster.
type Host struct {
	Name string
	Rack int
	NS   string // network namespace name
	Addr string // IPv4 address, no mask
}

// Cluster is a network that Up built.
type Cluster struct {
	Tag   string
	Hosts []Host
	cfg   Config
}

var seq atomic.Int32

// NewTag returns a fresh tag for this process: kn<pid base 36><letter>.
func NewTag() string {
	n := seq.Add(1) - 1
	return fmt.Sprintf("%s%s%c", Prefix, strconv.FormatInt(int64(os.Getpid()), 36), 'a'+n%26)
}

// Available reports why the harness cannot run here (nil when it can):
// it needs root and the ip and tc commands.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root")
	}
	for _, c := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(c); err != nil {
			return fmt.Errorf("netns: %s not found: %v", c, err)
		}
	}
	return nil
}

const (
	subnet  = "10.77"
	maxHost = 250
	maxRack = 250
)

// Up builds the network under tag (NewTag): whatever an earlier run left
// under the same tag is removed first. On error everything built so far is
// removed again.
func Up(ctx context.Context, tag string, cfg Config) (*Cluster, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if err := checkTag(tag); err != nil {
		return nil, err
	}
	if len(cfg.Racks) == 0 || len(cfg.Racks) > maxRack {
		return nil, fmt.Errorf("netns: %d racks; want 1 to %d", len(cfg.Racks), maxRack)
	}
	c := &Cluster{Tag: tag, cfg: cfg}
	seen := map[string]bool{}
	for r, hosts := range cfg.Racks {
		if len(hosts) == 0 || len(hosts) > maxHost {
			return nil, fmt.Errorf("netns: rack %d has %d hosts; want 1 to %d", r, len(hosts), maxHost)
		}
		for i, h := range hosts {
			if !validName(h) || seen[h] {
				return nil, fmt.Errorf("netns: host name %q is empty, repeated or not letters, digits and '-'", h)
			}
			seen[h] = true
			c.Hosts = append(c.Hosts, Host{Name: h, Rack: r, NS: tag + "-" + h, Addr: fmt.Sprintf("%s.%d.%d", subnet, r, i+1)})
		}
	}
	if err := Down(tag); err != nil {
		return nil, err
	}
	if err := c.build(ctx); err != nil {
		_ = Down(tag)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) fabric() string { return c.Tag + "-fabric" }

// build runs the ip and tc commands. Interface names are at most 15
// bytes: the tag (≤ 9) and a short suffix.
func (c *Cluster) build(ctx context.Context) error {
	f := c.fabric()
	run := func(args ...string) error { return ipcmd(ctx, args...) }
	inF := func(args ...string) error { return ipcmd(ctx, append([]string{"netns", "exec", f}, args...)...) }
	if err := run("netns", "add", f); err != nil {
		return err
	}
	spine := c.Tag + "sp"
	steps := [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", spine, "type", "bridge"},
		{"ip", "link", "set", spine, "up"},
	}
	for _, s := range steps {
		if err := inF(s...); err != nil {
			return err
		}
	}
	for r := range c.cfg.Racks {
		br, up, down := fmt.Sprintf("%sb%d", c.Tag, r), fmt.Sprintf("%su%d", c.Tag, r), fmt.Sprintf("%sd%d", c.Tag, r)
		for _, s := range [][]string{
			{"ip", "link", "add", br, "type", "bridge"},
			{"ip", "link", "set", br, "up"},
			// The uplink: up sits on the rack's bridge, down on the spine.
			{"ip", "link", "add", up, "type", "veth", "peer", "name", down},
			{"ip", "link", "set", up, "master", br},
			{"ip", "link", "set", down, "master", spine},
			{"ip", "link", "set", up, "up"},
			{"ip", "link", "set", down, "up"},
		} {
			if err := inF(s...); err != nil {
				return err
			}
		}
		// Shaping each end's egress shapes each direction.
		for _, dev := range []string{up, down} {
			if err := c.shape(ctx, f, dev, c.cfg.Uplink, c.cfg.Delay); err != nil {
				return err
			}
		}
	}
	for i, h := range c.Hosts {
		if err := run("netns", "add", h.NS); err != nil {
			return err
		}
		// Created in the fabric namespace, one end moved into the host.
		port, nic := fmt.Sprintf("%sh%d", c.Tag, i), fmt.Sprintf("%sn%d", c.Tag, i)
		br := fmt.Sprintf("%sb%d", c.Tag, h.Rack)
		for _, s := range [][]string{
			{"ip", "link", "add", port, "type", "veth", "peer", "name", nic},
			{"ip", "link", "set", nic, "netns", h.NS},
			{"ip", "link", "set", port, "master", br},
			{"ip", "link", "set", port, "up"},
		} {
			if err := inF(s...); err != nil {
				return err
			}
		}
		inH := func(args ...string) error { return ipcmd(ctx, append([]string{"netns", "exec", h.NS}, args...)...) }
		for _, s := range [][]string{
			{"ip", "link", "set", "lo", "up"},
			{"ip", "link", "set", nic, "name", "eth0"},
			{"ip", "addr", "add", h.Addr + "/16", "dev", "eth0"},
			{"ip", "link", "set", "eth0", "up"},
		} {
			if err := inH(s...); err != nil {
				return err
			}
		}
		if err := c.shape(ctx, h.NS, "eth0", c.cfg.HostLink, 0); err != nil {
			return err
		}
		if err := c.shape(ctx, f, port, c.cfg.HostLink, 0); err != nil {
			return err
		}
	}
	return nil
}

// shape puts a token bucket of rate (and a netem delay) on dev's egress.
func (c *Cluster) shape(ctx context.Context, ns, dev, rate string, delay time.Duration) error {
	if rate == "" && delay == 0 {
		return nil
	}
	tc := []string{"netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root"}
	if delay > 0 {
		args := append(append([]string(nil), tc...), "handle", "1:", "netem", "delay", delay.String())
		if err := ipcmd(ctx, args...); err != nil {
			return err
		}
		tc = []string{"netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:"}
		if rate == "" {
			return nil
		}
	}
	return ipcmd(ctx, append(tc, "tbf", "rate", rate, "burst", "64kb", "latency", "100ms")...)
}

// Command returns a command that runs name inside host's namespace.
func (c *Cluster) Command(ctx context.Context, host, name string, args ...string) (*exec.Cmd, error) {
	for _, h := range c.Hosts {
		if h.Name == host {
			return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...), nil
		}
	}
	return nil, fmt.Errorf("netns: cluster %s has no host %q", c.Tag, host)
}

// Host returns the host called name.
func (c *Cluster) Host(name string) (Host, bool) {
	for _, h := range c.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// Down removes the cluster.
func (c *Cluster) Down() error { return Down(c.Tag) }

// Down removes every namespace under tag, after killing the processes
// still running in them. Removing nothing is not an error.
func Down(tag string) error {
	if err := checkTag(tag); err != nil {
		return err
	}
	names, err := List(tag)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range names {
		errs = append(errs, remove(ns))
	}
	return errors.Join(errs...)
}

// remove kills ns's processes and deletes it. A namespace with processes
// left would outlive its name, so their end is waited for (bounded).
func remove(ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for try := 0; ; try++ {
		out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
		if err != nil {
			break // gone, or no pids to read
		}
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if try >= 50 {
			return fmt.Errorf("netns: processes %v in %s do not end", pids, ns)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netns: processes %v in %s do not end", pids, ns)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := ipcmd(ctx, "netns", "delete", ns); err != nil && !missing(ns) {
		return err
	}
	return nil
}

// List returns the namespaces under tag (tag "" lists every namespace
// this package's naming could have made).
func List(tag string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("netns: ip netns list: %v", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := f[0]
		if tag == "" && strings.HasPrefix(name, Prefix) || tag != "" && strings.HasPrefix(name, tag+"-") {
			names = append(names, name)
		}
	}
	return names, nil
}

// Sweep removes what clusters of processes that no longer run left
// behind (a test killed mid-way), judged from the PID in their tags.
func Sweep() error {
	names, err := List("")
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range names {
		tag, _, ok := strings.Cut(ns, "-")
		if !ok || checkTag(tag) != nil {
			continue
		}
		pid, err := strconv.ParseInt(tag[len(Prefix):len(tag)-1], 36, 64)
		if err != nil || pid == int64(os.Getpid()) {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // its creator still runs
		}
		errs = append(errs, remove(ns))
	}
	return errors.Join(errs...)
}

func missing(ns string) bool {
	names, err := List("")
	if err != nil {
		return false
	}
	for _, n := range names {
		if n == ns {
			return false
		}
	}
	return true
}

func checkTag(tag string) error {
	if len(tag) < len(Prefix)+2 || len(tag) > 9 || !strings.HasPrefix(tag, Prefix) || !validName(tag) || strings.Contains(tag, "-") {
		return fmt.Errorf("netns: tag %q is not one of NewTag's", tag)
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// ipcmd runs ip with args (or, when args start with "netns exec NS", the
// command that follows inside NS) and returns its stderr in the error.
func ipcmd(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, "ip", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netns: ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// ForTest builds a cluster for a test and removes it when the test ends,
// failed or not (t.Cleanup); it first sweeps what crashed runs left. The
// test is skipped where the harness cannot run (not root, no iproute2).
func ForTest(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	if err := Sweep(); err != nil {
		t.Logf("netns: sweeping old clusters: %v", err)
	}
	tag := NewTag()
	t.Cleanup(func() {
		if err := Down(tag); err != nil {
			t.Errorf("netns: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Up(ctx, tag, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
