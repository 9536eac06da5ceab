// Package racks runs a job's nodes on a simulated multi-rack network
// (cluster.hosts netns): it builds the network from the spec with
// runtime/netns — one network namespace per host with its own address,
// hosts of a rack on a bridge, racks joined through shaped uplinks, and a
// gateway so that the scheduler, which stays in this process's namespace,
// reaches every host — and gives the scheduler a launcher program that
// starts each node's agent inside its host. It also carries out the
// stragglers of kind link: tc on a node's link or a rack's uplink at the
// job-relative times the spec gives.
//
// It lives with the CLI (kelpie run, kelpie experiments) because it wires
// the runtime's network harness to a scheduler; the scheduler itself knows
// nothing of namespaces (it runs the launcher program as its agent
// executable).
package racks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kelpie/kelpie/core/job"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/runtime/netns"
)

// Layout is where a spec's nodes run: its hosts by rack and each node's
// host.
type Layout struct {
	Config netns.Config
	Racks  []string          // rack labels, by rack index ("" for unlabelled hosts)
	Hosts  map[string]string // node -> host
}

// Plan lays out every node the job can have (its servers and workers,
// those scripted adds create, and up to its EPS maximums): each on the
// host its topology names, by default a host of its own; hosts grouped by
// their nodes' rack label (unlabelled hosts share one rack, the last).
func Plan(s *spec.Spec) (Layout, error) {
	l := Layout{Hosts: map[string]string{}}
	var nodes []string
	nodes = append(nodes, names(spec.ServerName, max(s.Cluster.Servers+adds(s, spec.ActionAddServer), s.Cluster.MaxServers))...)
	nodes = append(nodes, names(spec.WorkerName, max(s.Cluster.Workers+adds(s, spec.ActionAddWorker), s.Cluster.MaxWorkers))...)
	rackOf := map[string]string{} // host -> rack label
	for _, n := range nodes {
		h := s.HostOf(n)
		if !validHost(h) {
			return Layout{}, fmt.Errorf("racks: host %q of %s: hosts netns needs host names of letters, digits and '-'", h, n)
		}
		r := s.Cluster.Topology[n].Rack
		if s.Cluster.Topology[n].Pod != "" {
			r = s.Cluster.Topology[n].Pod + "-" + r
		}
		if prev, ok := rackOf[h]; ok && prev != r {
			return Layout{}, fmt.Errorf("racks: host %s holds nodes of racks %q and %q", h, prev, r)
		}
		rackOf[h] = r
		l.Hosts[n] = h
	}
	byRack := map[string][]string{}
	for h, r := range rackOf {
		byRack[r] = append(byRack[r], h)
	}
	for r := range byRack {
		l.Racks = append(l.Racks, r)
	}
	sort.Slice(l.Racks, func(a, b int) bool {
		ra, rb := l.Racks[a], l.Racks[b]
		if (ra == "") != (rb == "") {
			return rb == "" // the unlabelled rack last
		}
		return ra < rb
	})
	for _, r := range l.Racks {
		hs := byRack[r]
		sort.Slice(hs, func(a, b int) bool { return hostLess(hs[a], hs[b]) })
		l.Config.Racks = append(l.Config.Racks, hs)
	}
	if v := s.Cluster.Links.Host; v > 0 {
		l.Config.HostLink = netns.Rate(v)
	}
	if v := s.Cluster.Links.Uplink; v > 0 {
		l.Config.Uplink = netns.Rate(v)
	}
	l.Config.Delay = s.Cluster.Links.Delay
	l.Config.Gateway = true
	return l, nil
}

func adds(s *spec.Spec, action string) int {
	n := 0
	for _, st := range s.Script {
		if st.Action == action {
			n++
		}
	}
	return n
}

func names(name func(int) string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = name(i)
	}
	return out
}

// hostLess orders host names with their numbers compared as numbers
// (worker-2 before worker-10).
func hostLess(a, b string) bool {
	pa, na := splitNum(a)
	pb, nb := splitNum(b)
	if pa != pb {
		return pa < pb
	}
	if na != nb {
		return na < nb
	}
	return a < b
}

func splitNum(s string) (string, int) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n := 0
	for _, c := range s[i:] {
		n = n*10 + int(c-'0')
		if n > 1e9 {
			break
		}
	}
	return s[:i], n
}

func validHost(h string) bool {
	if h == "" || len(h) > 40 {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// Network is a job's network, up.
type Network struct {
	Cluster *netns.Cluster
	Layout  Layout
	// Exe is the launcher program to give the scheduler as its agent
	// executable: it starts `kelpie agent ...` inside the node's host.
	Exe string
	dir string
}

// Files in the network's directory.
const (
	clusterFile = "cluster.json"
	nodesFile   = "nodes.json"
	launcher    = "agent-in-host"
)

// Up builds the network for s in dir (a directory the caller owns and
// removes): the namespaces, the description the launcher reads, and the
// launcher itself, which runs kelpie (exe) in the host. Whatever crashed
// runs left is swept first. Close takes it down.
func Up(ctx context.Context, s *spec.Spec, dir, exe string) (*Network, error) {
	if err := netns.Available(); err != nil {
		return nil, fmt.Errorf("cluster.hosts netns: %v", err)
	}
	l, err := Plan(s)
	if err != nil {
		return nil, err
	}
	if err := netns.Sweep(); err != nil {
		slog.Warn("netns: sweeping what crashed runs left", "err", err)
	}
	c, err := netns.Up(ctx, netns.NewTag(), l.Config)
	if err != nil {
		return nil, err
	}
	n := &Network{Cluster: c, Layout: l, dir: dir}
	if err := n.write(exe); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Network) write(exe string) error {
	if err := n.Cluster.Save(filepath.Join(n.dir, clusterFile)); err != nil {
		return err
	}
	b, err := json.Marshal(n.Layout.Hosts)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.dir, nodesFile), b, 0o600); err != nil {
		return err
	}
	n.Exe = filepath.Join(n.dir, launcher)
	script := fmt.Sprintf("#!/bin/sh\n# Runs `kelpie agent ...` in the node's network namespace (kelpie run --hosts netns).\nexec %s %s --dir %s -- \"$@\"\n",
		shellQuote(exe), ExecCommand, shellQuote(n.dir))
	return os.WriteFile(n.Exe, []byte(script), 0o700)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Addr is the address the scheduler listens on for the hosts: the
// network's gateway.
func (n *Network) Addr() string { return n.Cluster.Gateway }

// Close takes the network down: every process still in a host is killed,
// every namespace and interface removed.
func (n *Network) Close() error { return n.Cluster.Down() }

// ExecCommand is the hidden kelpie subcommand the launcher runs.
const ExecCommand = "netns-exec"

// Exec is that subcommand: args are `agent ... --node NODE ...` as the
// scheduler gives them; it replaces this process by `exe args --listen
// ADDR:0` inside NODE's host (the agent hands --listen to a server role;
// a worker finds its address itself). It returns only on error.
func Exec(dir, exe string, args []string) error {
	c, err := netns.Load(filepath.Join(dir, clusterFile))
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, nodesFile))
	if err != nil {
		return err
	}
	var hosts map[string]string
	if err := json.Unmarshal(b, &hosts); err != nil {
		return fmt.Errorf("racks: %s: %v", nodesFile, err)
	}
	node := ""
	for i, a := range args {
		if a == "--node" && i+1 < len(args) {
			node = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--node="); ok {
			node = v
		}
	}
	host, ok := hosts[node]
	if !ok {
		return fmt.Errorf("racks: no host for node %q in this network (it has hosts for %d nodes)", node, len(hosts))
	}
	h, _ := c.Host(host)
	argv := append(append([]string{exe}, args...), "--listen", h.Addr+":0")
	return c.Exec(host, argv, os.Environ())
}

// Shape carries out the job's stragglers of kind link from start (the
// job's time zero) until ctx ends: at every time one turns on or off, the
// links it targets are set to their caps (or back to the network's own
// rates). Errors are logged, not fatal: an experiment whose shaping failed
// shows it in its numbers and its log.
func (n *Network) Shape(ctx context.Context, s *spec.Spec, start time.Time, log *slog.Logger) {
	all := job.Injections(s)
	// A rack is labelled "pod-rack" when the topology has pods.
	racksOf := func(region string) []int {
		var out []int
		for i, r := range n.Layout.Racks {
			if r == region || strings.HasSuffix(r, "-"+region) {
				out = append(out, i)
			}
		}
		return out
	}
	apply := func(at time.Duration) {
		for target, rate := range straggler.LinkRates(all, at) {
			tc := ""
			if rate > 0 {
				tc = netns.Rate(rate)
			}
			var err error
			if target.Region != "" {
				rs := racksOf(target.Region)
				if len(rs) == 0 {
					err = fmt.Errorf("no rack %q", target.Region)
				}
				for _, r := range rs {
					err = errors.Join(err, n.Cluster.SetUplinkRate(ctx, r, tc))
				}
			} else {
				err = n.Cluster.SetHostRate(ctx, n.Layout.Hosts[target.Node], tc)
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("link straggler", "node", target.Node, "region", target.Region, "rate", tc, "err", err)
			} else if err == nil {
				log.Info("link straggler", "node", target.Node, "region", target.Region, "rate", tc, "at", at)
			}
		}
	}
	at := time.Duration(-1)
	for {
		next, ok := straggler.NextLinkChange(all, at)
		if !ok {
			return
		}
		t := time.NewTimer(time.Until(start.Add(next)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		apply(next)
		at = next
	}
}
