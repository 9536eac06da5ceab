package spec

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNetworkKeys(t *testing.T) {
	src := `name: x
cluster:
  servers: 2
  workers: 2
  hosts: netns
  links: {host: 100MB/s, uplink: 25MB/s, delay: 1ms}
  topology:
    worker-0: {rack: r0, host: h0}
    server-0: {rack: r0, host: h0}
    worker-1: {rack: r1}
    server-1: {rack: r1}
stragglers:
  - {node: server-1, kind: link, rate: 5MiB/s, start: 2s}
  - {region: r1, kind: link, rate: 1MB/s, start: 0s, end: 10s}
`
	s, err := Parse("spec.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if s.Cluster.Hosts != HostsNetns || s.Cluster.Links != (Links{Host: 100e6, Uplink: 25e6, Delay: time.Millisecond}) {
		t.Errorf("hosts %q, links %+v", s.Cluster.Hosts, s.Cluster.Links)
	}
	if got := s.HostOf("server-0"); got != "h0" {
		t.Errorf("HostOf(server-0) = %q; want h0", got)
	}
	if got := s.HostOf("worker-1"); got != "worker-1" {
		t.Errorf("HostOf(worker-1) = %q; want its own host", got)
	}
	if got, want := s.Racks(), []string{"r0", "r1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Racks() = %v; want %v", got, want)
	}
	if s.Stragglers[1].Region != "r1" || s.Stragglers[1].Rate != 1e6 {
		t.Errorf("region straggler %+v", s.Stragglers[1])
	}
	if s.NeedsNetns() == "" {
		t.Error("a spec with a link straggler does not need netns")
	}
	// The canonical form reads back the same.
	back, err := Parse("back.yaml", s.YAML())
	if err != nil {
		t.Fatalf("%v\n%s", err, s.YAML())
	}
	for i := range back.Stragglers {
		back.Stragglers[i].Line = s.Stragglers[i].Line
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("YAML round trip differs:\n%s", s.YAML())
	}
}

func TestNetworkKeysBad(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"cluster: {hosts: vms}", "cluster.hosts: must be one of local, netns"},
		{"cluster: {links: {uplink: 0}}", "cluster.links.uplink: must be positive"},
		{"cluster: {links: {delay: -1s}}", "cluster.links.delay: must not be negative"},
		{"cluster: {links: {spine: 1MB/s}}", "cluster.links.spine: unknown key"},
		{"stragglers: [{kind: link, rate: 1MB/s}]", "stragglers[0].node: kind link needs node"},
		{"stragglers: [{node: worker-0, region: r0, kind: link, rate: 1MB/s}]", "give node or region, not both"},
		{"stragglers: [{region: r9, kind: link, rate: 1MB/s}]", `no rack "r9"`},
		{"stragglers: [{node: worker-0, kind: link}]", "stragglers[0].rate: required for kind link"},
		{"stragglers: [{region: r0, kind: pause, end: 1s}]", "stragglers[0].region: not used by kind pause"},
		{"cluster: {topology: {worker-0: {host: 'a b'}}}", "cluster.topology.worker-0.host: must be letters"},
	} {
		_, err := Parse("spec.yaml", []byte("name: x\n"+c.src+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", c.src, err, c.want)
		}
	}
}

func TestSpareHosts(t *testing.T) {
	for _, c := range []struct {
		src  string
		want int
	}{
		{"name: x\n", 0},
		{"name: x\ncluster: {workers: 4, spare_hosts: 1}\n", 1},
		{"name: x\ncluster:\n  workers: 2\n  spare_hosts: 3\n", 3},
	} {
		s, err := Parse("spec.yaml", []byte(c.src))
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.src, err)
		}
		if s.Cluster.SpareHosts != c.want {
			t.Errorf("Parse(%q).Cluster.SpareHosts = %d; want %d", c.src, s.Cluster.SpareHosts, c.want)
		}
		back, err := Parse("back.yaml", s.YAML())
		if err != nil {
			t.Fatalf("%v\n%s", err, s.YAML())
		}
		if back.Cluster.SpareHosts != c.want {
			t.Errorf("round trip of %q: spare_hosts %d; want %d\n%s", c.src, back.Cluster.SpareHosts, c.want, s.YAML())
		}
		if has := strings.Contains(string(s.YAML()), "spare_hosts"); has != (c.want != 0) {
			t.Errorf("YAML() of %q mentions spare_hosts: %v; want only when not 0\n%s", c.src, has, s.YAML())
		}
	}
	if got := SpareHostName(2); got != "spare-2" {
		t.Errorf("SpareHostName(2) = %q; want spare-2", got)
	}
}

func TestSpareHostsBad(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"cluster:\n  spare_hosts: -1", "spec.yaml:3: cluster.spare_hosts: must be at least 0 (got -1)"},
		{"cluster:\n  spare_hosts: two", "spec.yaml:3: cluster.spare_hosts: "},
		{"cluster:\n  spare_hosts: 1.5", "spec.yaml:3: cluster.spare_hosts: "},
		{"cluster:\n  spare_hosts: 100000", "spec.yaml:3: cluster.spare_hosts: must be at most 1024 (got 100000)"},
		{"cluster:\n  hosts: netns\n  spare_hosts: 1", "spec.yaml:4: cluster.spare_hosts: spare hosts are simulated by the local launcher: not with hosts netns"},
		{"cluster:\n  spare_hosts: 1\n  topology: {worker-0: {host: h0}}", "spec.yaml:3: cluster.spare_hosts: each node starts on a simulated host of its own: not with a topology host label (worker-0 names host h0)"},
		{"cluster:\n  spares: 1", "spec.yaml:3: cluster.spares: unknown key"},
	} {
		_, err := Parse("spec.yaml", []byte("name: x\n"+c.src+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", c.src, err, c.want)
		}
	}
}

func TestSimulatedHost(t *testing.T) {
	s, err := Parse("spec.yaml", []byte("name: x\ncluster: {workers: 2, spare_hosts: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	none, err := Parse("spec.yaml", []byte("name: x\ncluster: {workers: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host        string
		with, witho bool
	}{
		{"worker-1", true, false}, {"server-0", true, false}, {"spare-0", true, false}, {"spare-1", true, false},
		{"spare-2", false, false}, {"mybox", false, false}, {"", false, false},
	} {
		if got := s.SimulatedHost(c.host); got != c.with {
			t.Errorf("with spare_hosts 2: SimulatedHost(%q) = %v; want %v", c.host, got, c.with)
		}
		if got := none.SimulatedHost(c.host); got != c.witho {
			t.Errorf("without spare hosts: SimulatedHost(%q) = %v; want %v", c.host, got, c.witho)
		}
	}
}
