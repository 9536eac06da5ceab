package spec

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Where the nodes run (cluster.hosts).
const (
	// HostsLocal runs every node as a process on 127.0.0.1 (also when
	// cluster.hosts is left out: the field stays empty).
	HostsLocal = "local"
	// HostsNetns gives every host its own network namespace and address,
	// hosts of a rack on one bridge and racks joined by shaped uplinks
	// (runtime/netns): the papers' multi-rack setting on one machine.
	HostsNetns = "netns"
)

var hostsModes = []string{HostsLocal, HostsNetns}

// Links shapes the network of cluster.hosts netns: each direction of a
// link separately, as a full-duplex NIC is. Zero rates leave a link
// unshaped.
type Links struct {
	Host   float64       // every host's own link, bytes per second
	Uplink float64       // every rack's link to the spine, bytes per second
	Delay  time.Duration // one-way latency added to every uplink
}

var linksKeys = []string{"host", "uplink", "delay"}

func (l Links) fields() []string {
	var kv []string
	if l.Host != 0 {
		kv = append(kv, "host: "+FormatRate(l.Host))
	}
	if l.Uplink != 0 {
		kv = append(kv, "uplink: "+FormatRate(l.Uplink))
	}
	if l.Delay != 0 {
		kv = append(kv, "delay: "+fmtDuration(l.Delay))
	}
	return kv
}

// decodeNetwork reads cluster.hosts and cluster.links.
func (d *decoder) decodeNetwork(cl *mapping, c *Cluster) {
	d.str(cl, "hosts", &c.Hosts)
	links := d.sub(cl, "links", linksKeys)
	d.rate(links, "host", &c.Links.Host)
	d.rate(links, "uplink", &c.Links.Uplink)
	d.duration(links, "delay", &c.Links.Delay)
}

func (c *checker) validateNetwork() {
	cl := c.s.Cluster
	if c.d.given("cluster.hosts") {
		c.oneOf("cluster.hosts", cl.Hosts, hostsModes)
	}
	for _, k := range []struct {
		key string
		v   float64
	}{{"host", cl.Links.Host}, {"uplink", cl.Links.Uplink}} {
		if c.d.given("cluster.links." + k.key) {
			c.positive("cluster.links."+k.key, k.v)
		}
	}
	c.nonNegative("cluster.links.delay", cl.Links.Delay)
	if cl.SpareHosts < 0 {
		c.errorf("cluster.spare_hosts", "must be at least 0 (got %d)", cl.SpareHosts)
	} else if cl.SpareHosts > 0 {
		// The local launcher simulates the hosts, one per node; netns
		// hosts are namespaces of their own, placed by the topology.
		if cl.Hosts == HostsNetns {
			c.errorf("cluster.spare_hosts", "spare hosts are simulated by the local launcher: not with hosts netns")
		}
		for _, node := range sortedNodeNames(cl.Topology) {
			if cl.Topology[node].Host != "" {
				c.errorf("cluster.spare_hosts", "each node starts on a simulated host of its own: not with a topology host label (%s names host %s)", node, cl.Topology[node].Host)
				break
			}
		}
	}
}

// SpareHostName is the name of the i-th spare host (cluster.spare_hosts);
// the host a node starts on is named after the node (HostOf).
func SpareHostName(i int) string { return fmt.Sprintf("spare-%d", i) }

// SimulatedHost says whether host is one of the job's simulated hosts
// (cluster.spare_hosts > 0): a node's own, named after it, or a spare.
func (s *Spec) SimulatedHost(host string) bool {
	if s.Cluster.SpareHosts <= 0 {
		return false
	}
	if _, _, ok := parseNode(host); ok {
		return true
	}
	for i := range s.Cluster.SpareHosts {
		if host == SpareHostName(i) {
			return true
		}
	}
	return false
}

// validateLink checks a straggler of kind link: it shapes one node's link
// or one rack's uplink (region), so it names exactly one of them.
func (c *checker) validateLink(path string, st Straggler) {
	key := func(k string) string { return path + "." + k }
	switch {
	case st.Node != "" && st.Region != "":
		c.errorf(key("region"), "give node or region, not both")
	case st.Node != "":
		c.node(key("node"), st.Node, "", true)
	case st.Region != "":
		if !slices.Contains(c.s.Racks(), st.Region) {
			c.errorf(key("region"), "no rack %q in cluster.topology (racks: %v)", st.Region, c.s.Racks())
		}
	default:
		c.errorf(key("node"), "kind link needs node (a node's link) or region (a rack's uplink)")
	}
	if !c.d.given(key("rate")) {
		c.errorf(key("rate"), "required for kind link")
	} else {
		c.positive(key("rate"), st.Rate)
	}
}

// Racks lists the rack labels of cluster.topology, sorted.
func (s *Spec) Racks() []string {
	seen := map[string]bool{}
	for _, l := range s.Cluster.Topology {
		if l.Rack != "" {
			seen[l.Rack] = true
		}
	}
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// HostOf is the host node runs on: its topology host label, or a host of
// its own, named after it.
func (s *Spec) HostOf(node string) string {
	if h := s.Cluster.Topology[node].Host; h != "" {
		return h
	}
	return node
}

// NeedsNetns says why the spec cannot run on local hosts ("" when it
// can): a straggler of kind link shapes a network only hosts netns has.
func (s *Spec) NeedsNetns() string {
	for i, st := range s.Stragglers {
		if st.Kind == StragglerLink {
			return fmt.Sprintf("stragglers[%d] of kind link needs cluster.hosts netns (or kelpie run --hosts netns)", i)
		}
	}
	return ""
}
