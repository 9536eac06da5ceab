package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// netLab puts each node of a job in its own network namespace (and UTS
// namespace, so that a worker sees its server on another host and stays on
// TCP instead of the server's Unix socket), joined by veth pairs to a
// bridge in the test's namespace whose address the scheduler listens on.
// Faults then cut or degrade one node's links with iptables inside the
// node's namespace — nothing outside the lab is touched — and fill the
// scheduler's data dir, a small tmpfs the lab mounts.
//
// The scheduler runs the lab's wrapper as its agent program
// (--agent-exe): it finds the node's namespace from `agent --node NODE` and
// execs `kelpie agent ... --listen ADDR:0` in it, so PIDs are the agents'.
type netLab struct {
	t       *testing.T
	tag     string // prefix of every name the lab creates
	bridge  string
	gateway string // the bridge's address: the scheduler's
	nodes   map[string]labNode
	wrapper string
	dataDir string // the tmpfs, when mounted
}

type labNode struct {
	ns, addr, hostIf string
}

// labTools are the commands the lab needs besides root.
var labTools = []string{"ip", "iptables", "tc", "unshare", "hostname", "mount", "umount"}

// labUnavailable says why the lab cannot run here ("" when it can).
func labUnavailable() string {
	if os.Geteuid() != 0 {
		return "not root"
	}
	for _, c := range labTools {
		if _, err := exec.LookPath(c); err != nil {
			return c + " not found (apt-get install iptables iproute2)"
		}
	}
	return ""
}

const labPrefix = "kf"

// labSweep removes what crashed runs of the lab left: namespaces and
// bridges named kf<pid base 36>... whose process is gone.
func labSweep() {
	alive := func(name string) bool {
		rest := strings.TrimPrefix(name, labPrefix)
		end := strings.IndexAny(rest, "-b")
		if end <= 0 {
			return true
		}
		pid, err := strconv.ParseInt(rest[:end], 36, 64)
		return err != nil || syscall.Kill(int(pid), 0) == nil
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasPrefix(f[0], labPrefix) && strings.Contains(f[0], "-") && !alive(f[0]) {
			killNetns(f[0])
			_ = exec.Command("ip", "netns", "delete", f[0]).Run()
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			name := strings.TrimSuffix(f[1], ":")
			if strings.HasPrefix(name, labPrefix) && strings.HasSuffix(name, "br") && !alive(name) {
				_ = exec.Command("ip", "link", "delete", name).Run()
			}
		}
	}
}

func killNetns(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, p := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// freeSubnet picks a 10.79.N.0/24 no route of this machine uses.
func freeSubnet() (string, error) {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return "", err
	}
	start := os.Getpid() % 250
	for i := range 250 {
		n := fmt.Sprintf("10.79.%d.", (start+i)%250+1)
		if !bytes.Contains(out, []byte(n)) {
			return n, nil
		}
	}
	return "", errors.New("no free 10.79.N.0/24")
}

// newNetLab builds the lab for nodes, with the scheduler's data dir a tmpfs
// of dataMB mounted at dataDir (none when dataMB is 0). Everything is removed at the test's end.
func newNetLab(t *testing.T, nodes []string, dataDir string, dataMB int) *netLab {
	t.Helper()
	labSweep()
	subnet, err := freeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	tag := labPrefix + strconv.FormatInt(int64(os.Getpid()), 36)
	l := &netLab{t: t, tag: tag, bridge: tag + "br", gateway: subnet + "254", nodes: map[string]labNode{}}
	t.Cleanup(l.down)
	l.must("ip", "link", "add", l.bridge, "type", "bridge")
	l.must("ip", "addr", "add", l.gateway+"/24", "dev", l.bridge)
	l.must("ip", "link", "set", l.bridge, "up")
	for i, name := range nodes {
		n := labNode{ns: fmt.Sprintf("%s-%s", tag, name), addr: fmt.Sprintf("%s%d", subnet, i+1), hostIf: fmt.Sprintf("%sh%d", tag, i)}
		l.nodes[name] = n
		peer := fmt.Sprintf("%sn%d", tag, i)
		l.must("ip", "netns", "add", n.ns)
		l.must("ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", peer)
		l.must("ip", "link", "set", peer, "netns", n.ns)
		l.must("ip", "link", "set", n.hostIf, "master", l.bridge)
		l.must("ip", "link", "set", n.hostIf, "up")
		for _, c := range [][]string{
			{"ip", "link", "set", "lo", "up"},
			{"ip", "link", "set", peer, "name", "eth0"},
			{"ip", "addr", "add", n.addr + "/24", "dev", "eth0"},
			{"ip", "link", "set", "eth0", "up"},
		} {
			l.in(name, c...)
		}
	}
	if dataMB > 0 {
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		l.must("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0755", dataMB), "kelpie-faults", dataDir)
		l.dataDir = dataDir
	}
	l.wrapper = l.writeWrapper()
	return l
}

// writeWrapper writes the agent program the scheduler runs.
func (l *netLab) writeWrapper() string {
	var cases strings.Builder
	for name, n := range l.nodes {
		fmt.Fprintf(&cases, "%s) ns=%s; addr=%s;;\n", name, n.ns, n.addr)
	}
	script := fmt.Sprintf(`#!/bin/sh
# The fault lab's agent program: kelpie agent in its node's namespaces.
node= prev=
for a in "$@"; do [ "$prev" = --node ] && node=$a; prev=$a; done
case "$node" in
%s*) echo "netlab: no namespace for node '$node'" >&2; exit 1;;
esac
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$1"; shift; exec "$@"' sh "$ns" %s "$@" --listen "$addr:0"
`, cases.String(), kelpieBin)
	p := filepath.Join(l.t.TempDir(), "lab-agent")
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		l.t.Fatal(err)
	}
	return p
}

func (l *netLab) run(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (l *netLab) must(args ...string) {
	l.t.Helper()
	if err := l.run(args...); err != nil {
		l.t.Fatal(err)
	}
}

// in runs a command in node's namespace.
func (l *netLab) in(node string, args ...string) {
	l.t.Helper()
	l.must(append([]string{"ip", "netns", "exec", l.nodes[node].ns}, args...)...)
}

// cut drops every packet between node and the peer addresses, both ways
// (iptables in the node's namespace), with probability p (1: a partition).
func (l *netLab) cut(node string, p float64, peers ...string) {
	l.t.Helper()
	for _, peer := range peers {
		for _, dir := range [][]string{{"INPUT", "-s"}, {"OUTPUT", "-d"}} {
			args := []string{"iptables", "-w", "-A", dir[0], dir[1], peer}
			if p < 1 {
				args = append(args, "-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(p, 'f', 2, 64))
			}
			l.in(node, append(args, "-j", "DROP")...)
		}
	}
}

// heal removes node's drops and link shaping.
func (l *netLab) heal(node string) {
	l.t.Helper()
	l.in(node, "iptables", "-w", "-F")
	_ = l.run("ip", "netns", "exec", l.nodes[node].ns, "tc", "qdisc", "del", "dev", "eth0", "root")
}

// slow shapes node's egress to rate (a token bucket: this kernel has no
// netem, a slow link's queueing stands in for delay).
func (l *netLab) slow(node, rate string) {
	l.t.Helper()
	l.in(node, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "32kb", "latency", "400ms")
}

// fill takes every free byte of the data dir's file system and returns a
// function that gives them back.
func (l *netLab) fill() (func(), error) {
	p := filepath.Join(l.dataDir, "ballast")
	f, err := os.Create(p)
	if err != nil {
		return func() {}, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			os.Remove(p)
			return func() {}, err
		}
	}
	// The last partial megabyte, byte by byte is too slow: a smaller
	// buffer down to a page.
	for n := len(buf) / 2; n >= 4096; n /= 2 {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	return func() { os.Remove(p) }, nil
}

func (l *netLab) down() {
	if l.dataDir != "" {
		_ = exec.Command("umount", "-l", l.dataDir).Run()
	}
	for _, n := range l.nodes {
		killNetns(n.ns)
		_ = exec.Command("ip", "netns", "delete", n.ns).Run()
	}
	_ = exec.Command("ip", "link", "delete", l.bridge).Run()
}

// labDaemon starts a daemon whose nodes run in the network lab: two
// servers and two workers, each in a namespace of its own.
func labDaemon(t *testing.T) (*netLab, *Daemon) {
	t.Helper()
	nodes := []string{"server-0", "server-1", "worker-0", "worker-1"}
	dir := filepath.Join(t.TempDir(), "data")
	lab := newNetLab(t, nodes, dir, 256)
	d, err := Start(Config{GRPC: lab.gateway + ":0", HTTP: "127.0.0.1:0", DataDir: dir, Exe: lab.wrapper,
		NodeLog: logWriter{t}, Log: slog.New(slog.NewTextHandler(logWriter{t}, nil)), Tick: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return lab, d
}
