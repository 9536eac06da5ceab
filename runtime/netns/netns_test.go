package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// leftovers lists what remains of tag: namespaces, and interfaces in this
// (root) namespace.
func leftovers(t *testing.T, tag string) []string {
	t.Helper()
	names, err := List(tag)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/sys/class/net")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tag) {
			names = append(names, "link "+e.Name())
		}
	}
	return names
}

func twoRacks() Config {
	return Config{Racks: [][]string{{"w0", "w1"}, {"w2", "w3"}}, Uplink: "50mbit"}
}

// TestClusterReachesAcrossRacks: hosts have their own addresses, reach
// each other inside and across racks, and Down removes everything,
// processes included; Up and Down are idempotent.
func TestClusterReachesAcrossRacks(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	tag := NewTag()
	defer Down(tag)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := Up(ctx, tag, twoRacks()); err != nil {
		t.Fatal(err)
	}
	c, err := Up(ctx, tag, twoRacks()) // again: rebuilt from scratch
	if err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if got := len(leftovers(t, tag)); got != 5 {
		t.Errorf("%d namespaces; want 4 hosts and the fabric", got)
	}
	// A listener on w3 (rack 1) and on w1 (rack 0), dialled from w0.
	for _, to := range []string{"w1", "w3"} {
		h, _ := c.Host(to)
		var l net.Listener
		if err := c.Do(to, func() (err error) {
			l, err = net.Listen("tcp", h.Addr+":7000")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() {
			conn, err := l.Accept()
			if err != nil {
				got <- err.Error()
				return
			}
			defer conn.Close()
			got <- conn.RemoteAddr().String()
		}()
		var conn net.Conn
		if err := c.Do("w0", func() (err error) {
			conn, err = net.DialTimeout("tcp", h.Addr+":7000", 10*time.Second)
			return err
		}); err != nil {
			t.Fatalf("w0 cannot reach %s at %s: %v", to, h.Addr, err)
		}
		w0, _ := c.Host("w0")
		if from := <-got; !strings.HasPrefix(from, w0.Addr+":") {
			t.Errorf("%s saw a connection from %s; want w0's %s", to, from, w0.Addr)
		}
		conn.Close()
		l.Close()
	}
	// Its own address, not loopback.
	cmd, _ := c.Command(ctx, "w2", "ip", "-4", "-o", "addr", "show", "eth0")
	out, err := cmd.Output()
	if h, _ := c.Host("w2"); err != nil || !strings.Contains(string(out), h.Addr+"/16") {
		t.Errorf("w2's eth0: %s (%v); want %s", out, err, h.Addr)
	}
	// The uplinks are shaped both ways.
	qd := exec.Command("ip", "netns", "exec", c.fabric(), "tc", "qdisc", "show")
	out, err = qd.Output()
	if err != nil || strings.Count(string(out), "tbf") != 4 {
		t.Errorf("fabric qdiscs (%v):\n%s\nwant a tbf on both ends of both uplinks", err, out)
	}
	sleeper, _ := c.Command(context.Background(), "w1", "sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	if err := c.Down(); err != nil {
		t.Fatal(err)
	}
	<-done // Down killed it
	if left := leftovers(t, tag); len(left) != 0 {
		t.Errorf("left after Down: %v", left)
	}
	if err := Down(tag); err != nil {
		t.Errorf("second Down: %v", err)
	}
}

// TestNothingLeftWhenATestFails runs a test that builds a cluster and
// fails midway (t.Fatal), and one that dies without cleaning up (os.Exit,
// as a killed run would): afterwards, with ForTest's cleanup and Sweep,
// nothing of either is left.
func TestNothingLeftWhenATestFails(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	if os.Getenv("KELPIE_NETNS_CHILD") != "" {
		t.Skip("the child runs TestChildFailsMidway only")
	}
	for _, mode := range []string{"fatal", "exit"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestChildFailsMidway$", "-test.count=1")
		cmd.Env = append(os.Environ(), "KELPIE_NETNS_CHILD="+mode)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s: the child test passed; it should fail midway:\n%s", mode, out)
		}
		tag := ""
		for _, line := range strings.Split(string(out), "\n") {
			if _, after, ok := strings.Cut(line, "cluster tag "); ok {
				tag = strings.TrimSpace(after)
			}
		}
		if tag == "" {
			t.Fatalf("%s: the child did not build its cluster:\n%s", mode, out)
		}
		if mode == "exit" {
			left := leftovers(t, tag)
			if len(left) == 0 {
				t.Errorf("exit: nothing left before Sweep; the child did not build?")
			}
			if !slices.Contains(left, "link "+tag+"g") {
				t.Errorf("exit: the gateway's interface is not among the leftovers %v", left)
			}
			if err := Sweep(); err != nil {
				t.Fatal(err)
			}
		}
		if left := leftovers(t, tag); len(left) != 0 {
			t.Errorf("%s: left behind: %v", mode, left)
		}
	}
}

// TestChildFailsMidway is run by TestNothingLeftWhenATestFails only.
func TestChildFailsMidway(t *testing.T) {
	mode := os.Getenv("KELPIE_NETNS_CHILD")
	if mode == "" {
		t.Skip("run by TestNothingLeftWhenATestFails")
	}
	cfg := twoRacks()
	cfg.Gateway = true // an interface in this namespace too
	c := ForTest(t, cfg)
	sleeper, _ := c.Command(context.Background(), "w3", "sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("cluster tag %s\n", c.Tag)
	if mode == "exit" {
		os.Stdout.Sync()
		os.Exit(3) // no cleanup runs
	}
	t.Fatal("failing midway on purpose")
}

func TestUpRefusesBadConfigs(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		tag string
		cfg Config
	}{
		{"other", twoRacks()},
		{NewTag(), Config{}},
		{NewTag(), Config{Racks: [][]string{{"a", "a"}}}},
		{NewTag(), Config{Racks: [][]string{{"a b"}}}},
		{NewTag(), Config{Racks: [][]string{{}}}},
	} {
		if _, err := Up(ctx, c.tag, c.cfg); err == nil {
			Down(c.tag)
			t.Errorf("Up(%q, %+v) = nil; want an error", c.tag, c.cfg)
		}
	}
}
