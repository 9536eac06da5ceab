package netns

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGatewayExecAndShaping: a cluster with a gateway is reachable from
// this namespace and reaches it; a program Exec'd into a host runs on the
// host's address under the host's name with this process's PID; links are
// re-shaped while the cluster runs; Down leaves nothing, the gateway's
// interface included.
func TestGatewayExecAndShaping(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	if os.Getenv("KELPIE_NETNS_EXEC") != "" {
		t.Skip("the child runs TestExecChild only")
	}
	tag := NewTag()
	defer Down(tag)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := twoRacks()
	cfg.Gateway = true
	c, err := Up(ctx, tag, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway == "" || !strings.HasPrefix(c.Hosts[0].Addr, c.Subnet+".") || c.Subnet == subnet {
		t.Fatalf("gateway %q, subnet %q, host address %s", c.Gateway, c.Subnet, c.Hosts[0].Addr)
	}
	// This namespace listens on the gateway; w3 dials it.
	l, err := net.Listen("tcp", c.Gateway+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan string, 1)
	go func() {
		conn, err := l.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		conn.Close()
		got <- conn.RemoteAddr().String()
	}()
	var conn net.Conn
	if err := c.Do("w3", func() (err error) {
		conn, err = net.DialTimeout("tcp", l.Addr().String(), 10*time.Second)
		return err
	}); err != nil {
		t.Fatalf("w3 cannot reach the gateway: %v", err)
	}
	conn.Close()
	w3, _ := c.Host("w3")
	if from := <-got; !strings.HasPrefix(from, w3.Addr+":") {
		t.Errorf("the gateway saw %s; want w3 at %s", from, w3.Addr)
	}
	// And this namespace reaches a host.
	if out, err := exec.Command("ping", "-c", "1", "-W", "5", w3.Addr).CombinedOutput(); err != nil {
		if _, lookErr := exec.LookPath("ping"); lookErr == nil {
			t.Errorf("ping %s from the gateway's namespace: %v\n%s", w3.Addr, err, out)
		}
	}

	// Exec: a child test process replaces itself by a shell inside w2.
	desc := filepath.Join(t.TempDir(), "cluster.json")
	if err := c.Save(desc); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestExecChild$", "-test.count=1")
	child.Env = append(os.Environ(), "KELPIE_NETNS_EXEC="+desc)
	out, err := child.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	w2, _ := c.Host("w2")
	f := strings.Fields(string(out))
	if len(f) < 2 || f[0] != "w2" || !strings.Contains(string(out), w2.Addr+"/16") {
		t.Errorf("in w2 the program saw host name and addresses %q; want w2 and %s", out, w2.Addr)
	}
	if host, _ := os.Hostname(); host == "w2" {
		t.Error("Exec renamed this host")
	}

	// Shaping while running: w1's link capped, then back to unshaped;
	// rack 1's uplink back to the cluster's rate after a change.
	qdiscs := func(ns string) string {
		out, _ := exec.Command("ip", "netns", "exec", ns, "tc", "qdisc", "show").Output()
		return string(out)
	}
	w1, _ := c.Host("w1")
	if err := c.SetHostRate(ctx, "w1", Rate(5e6)); err != nil {
		t.Fatal(err)
	}
	if q := qdiscs(w1.NS); !strings.Contains(q, "tbf") || !strings.Contains(q, "40Mbit") {
		t.Errorf("w1 after a 5 MB/s cap:\n%s", q)
	}
	if err := c.SetHostRate(ctx, "w1", ""); err != nil {
		t.Fatal(err)
	}
	if q := qdiscs(w1.NS); strings.Contains(q, "tbf") {
		t.Errorf("w1 still shaped after the cap ended:\n%s", q)
	}
	if err := c.SetUplinkRate(ctx, 1, Rate(1e6)); err != nil {
		t.Fatal(err)
	}
	if q := qdiscs(c.fabric()); !strings.Contains(q, "8Mbit") {
		t.Errorf("uplink 1 after a 1 MB/s cap:\n%s", q)
	}
	if err := c.SetUplinkRate(ctx, 1, ""); err != nil {
		t.Fatal(err)
	}
	if q := qdiscs(c.fabric()); strings.Count(q, "50Mbit") != 4 {
		t.Errorf("uplinks after the cap ended (want all four ends at 50Mbit):\n%s", q)
	}

	if err := c.Down(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, tag); len(left) != 0 {
		t.Errorf("left after Down: %v", left)
	}
	if out, _ := exec.Command("ip", "-4", "route").Output(); strings.Contains(string(out), c.Subnet+".") {
		t.Errorf("a route to %s is left:\n%s", c.Subnet, out)
	}
}

// TestExecChild is run by TestGatewayExecAndShaping only.
func TestExecChild(t *testing.T) {
	desc := os.Getenv("KELPIE_NETNS_EXEC")
	if desc == "" {
		t.Skip("run by TestGatewayExecAndShaping")
	}
	c, err := Load(desc)
	if err != nil {
		t.Fatal(err)
	}
	t.Fatal(c.Exec("w2", []string{"sh", "-c", "hostname; ip -4 -o addr show eth0"}, os.Environ()))
}

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
	}{{"800mbit", 800e6}, {"1gbit", 1e9}, {"10mbps", 80e6}, {"12345bit", 12345}, {Rate(25e6), 200e6}} {
		if got, err := ParseRate(c.in); err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "fast", "10 furlongs", "-1mbit"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) = nil error", bad)
		}
	}
}
