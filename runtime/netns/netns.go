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
	"slices"
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
	// Gateway links this (the calling process's) namespace to the spine
	// with an address of the cluster's subnet (Cluster.Gateway), so that a
	// process here — a scheduler — reaches every host and is reached by
	// them. The subnet is then chosen among those no route of this
	// namespace uses. Its interface lives and dies with the fabric.
	Gateway bool
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
	// Subnet is the cluster's /16 ("10.77"); Gateway the address of this
	// namespace on it when Config.Gateway asked for one ("" otherwise).
	Subnet  string
	Gateway string
	cfg     Config
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
	subnet  = "10.77" // an isolated cluster's (no gateway)
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
	c := &Cluster{Tag: tag, cfg: cfg, Subnet: subnet}
	seen := map[string]bool{}
	for r, hosts := range cfg.Racks {
		if len(hosts) == 0 || len(hosts) > maxHost {
			return nil, fmt.Errorf("netns: rack %d has %d hosts; want 1 to %d", r, len(hosts), maxHost)
		}
		for _, h := range hosts {
			if !validName(h) || seen[h] {
				return nil, fmt.Errorf("netns: host name %q is empty, repeated or not letters, digits and '-'", h)
			}
			seen[h] = true
			c.Hosts = append(c.Hosts, Host{Name: h, Rack: r, NS: tag + "-" + h})
		}
	}
	if err := Down(tag); err != nil {
		return nil, err
	}
	if !cfg.Gateway {
		c.address()
		if err := c.build(ctx); err != nil {
			_ = Down(tag)
			return nil, err
		}
		return c, nil
	}
	// The subnet is picked and its route made under one lock, so that two
	// clusters with gateways never pick the same.
	unlock, err := lockSubnets()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if c.Subnet, err = freeSubnet(); err != nil {
		return nil, err
	}
	c.address()
	c.Gateway = c.Subnet + ".255.254"
	if err := c.build(ctx); err != nil {
		_ = Down(tag)
		return nil, err
	}
	return c, nil
}

// address gives each host its address in the subnet: rack r, host i of
// the rack at SUBNET.r.i+1.
func (c *Cluster) address() {
	n := map[int]int{}
	for i := range c.Hosts {
		h := &c.Hosts[i]
		n[h.Rack]++
		h.Addr = fmt.Sprintf("%s.%d.%d", c.Subnet, h.Rack, n[h.Rack])
	}
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
	if c.Gateway != "" {
		// This namespace's end is created here and the other end moved
		// into the fabric, so deleting the fabric deletes both.
		gw, peer := c.Tag+"g", c.Tag+"G"
		for _, s := range [][]string{
			{"link", "add", gw, "type", "veth", "peer", "name", peer},
			{"link", "set", peer, "netns", f},
			{"addr", "add", c.Gateway + "/16", "dev", gw},
			{"link", "set", gw, "up"},
		} {
			if err := run(s...); err != nil {
				return err
			}
		}
		for _, s := range [][]string{
			{"ip", "link", "set", peer, "master", spine},
			{"ip", "link", "set", peer, "up"},
		} {
			if err := inF(s...); err != nil {
				return err
			}
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
	return ipcmd(ctx, append(tc, tbf(rate)...)...)
}

// tbf is a token bucket's parameters for rate: a burst of 10 ms of it (at
// least 64 KiB: a smaller one cannot pass a full-sized segment at the
// kernel's timer granularity) and a queue of 100 ms.
func tbf(rate string) []string {
	burst := int64(64 << 10)
	if bits, err := ParseRate(rate); err == nil {
		burst = max(burst, int64(bits/8/100))
	}
	return []string{"tbf", "rate", rate, "burst", strconv.FormatInt(burst, 10), "latency", "100ms"}
}

// ParseRate reads a rate as tc writes it ("800mbit", "1gbit", "10mbps" —
// bps is bytes) into bits per second.
func ParseRate(rate string) (float64, error) {
	r := strings.ToLower(strings.TrimSpace(rate))
	i := 0
	for i < len(r) && strings.IndexByte("0123456789.", r[i]) >= 0 {
		i++
	}
	v, err := strconv.ParseFloat(r[:i], 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("netns: rate %q: want a number and a unit such as 100mbit", rate)
	}
	units := map[string]float64{"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
		"bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}
	u, ok := units[r[i:]]
	if !ok {
		return 0, fmt.Errorf("netns: rate %q: unknown unit %q", rate, r[i:])
	}
	return v * u, nil
}

// Rate writes bytes per second as a tc rate.
func Rate(bytesPerSec float64) string {
	return strconv.FormatInt(int64(bytesPerSec*8), 10) + "bit"
}

// SetHostRate caps host's own link at rate, each way ("" goes back to the
// cluster's HostLink).
func (c *Cluster) SetHostRate(ctx context.Context, host, rate string) error {
	h, ok := c.Host(host)
	if !ok {
		return fmt.Errorf("netns: cluster %s has no host %q", c.Tag, host)
	}
	i := slices.IndexFunc(c.Hosts, func(x Host) bool { return x.Name == host })
	if rate == "" {
		rate = c.cfg.HostLink
	}
	return errors.Join(
		c.setRate(ctx, h.NS, "eth0", rate, 0),
		c.setRate(ctx, c.fabric(), fmt.Sprintf("%sh%d", c.Tag, i), rate, 0))
}

// SetUplinkRate caps rack's uplink at rate, each way ("" goes back to the
// cluster's Uplink).
func (c *Cluster) SetUplinkRate(ctx context.Context, rack int, rate string) error {
	if rack < 0 || rack >= len(c.cfg.Racks) {
		return fmt.Errorf("netns: cluster %s has no rack %d", c.Tag, rack)
	}
	if rate == "" {
		rate = c.cfg.Uplink
	}
	return errors.Join(
		c.setRate(ctx, c.fabric(), fmt.Sprintf("%su%d", c.Tag, rack), rate, c.cfg.Delay),
		c.setRate(ctx, c.fabric(), fmt.Sprintf("%sd%d", c.Tag, rack), rate, c.cfg.Delay))
}

// setRate replaces dev's token bucket by one of rate, or removes it
// (rate ""), keeping a netem delay the device has.
func (c *Cluster) setRate(ctx context.Context, ns, dev, rate string, delay time.Duration) error {
	where := []string{"root"}
	if delay > 0 {
		where = []string{"parent", "1:1", "handle", "10:"}
	}
	base := []string{"netns", "exec", ns, "tc", "qdisc"}
	if rate == "" {
		err := ipcmd(ctx, append(append(base, "del", "dev", dev), where...)...)
		if err != nil && (strings.Contains(err.Error(), "No such file") || strings.Contains(err.Error(), "handle of zero")) {
			return nil // nothing to remove
		}
		return err
	}
	return ipcmd(ctx, append(append(append(base, "replace", "dev", dev), where...), tbf(rate)...)...)
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
	// A gateway's end in this namespace goes with the fabric, but only
	// once the kernel has cleaned the fabric up: remove it now.
	errs = append(errs, removeLink(tag+"g"))
	return errors.Join(errs...)
}

// removeLink deletes interface name of this namespace if it exists.
func removeLink(name string) error {
	if _, err := os.Stat("/sys/class/net/" + name); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ipcmd(ctx, "link", "del", name); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
		return err
	}
	return nil
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
	dead := func(tag string) bool {
		if checkTag(tag) != nil {
			return false
		}
		pid, err := strconv.ParseInt(tag[len(Prefix):len(tag)-1], 36, 64)
		if err != nil || pid == int64(os.Getpid()) {
			return false
		}
		_, err = os.Stat(fmt.Sprintf("/proc/%d", pid))
		return err != nil // its creator is gone
	}
	var errs []error
	for _, ns := range names {
		if tag, _, ok := strings.Cut(ns, "-"); ok && dead(tag) {
			errs = append(errs, remove(ns))
		}
	}
	// Gateways whose fabric is gone (or going).
	ents, _ := os.ReadDir("/sys/class/net")
	for _, e := range ents {
		if tag, ok := strings.CutSuffix(e.Name(), "g"); ok && strings.HasPrefix(tag, Prefix) && dead(tag) {
			errs = append(errs, removeLink(e.Name()))
		}
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
