// Package etcdtest runs real etcd clusters for tests: members on
// 127.0.0.1 ports in a temporary directory, stopped (and waited for) at the
// test's end. The etcd binary is the one `make k8s-bin` caches with the
// Kubernetes test control plane (see scheduler/kube/kubetest): a test
// without it is skipped, naming the make target.
package etcdtest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// K8sVersion is the Kubernetes release whose cached binaries hold etcd
// (the Makefile's K8S_VERSION).
const K8sVersion = "1.36.3"

// Binary is the etcd binary's path: $KELPIE_K8S_BIN/etcd, else the user
// cache's kelpie/k8s-v<K8sVersion>/etcd (where make k8s-bin puts it).
func Binary() string {
	dir := os.Getenv("KELPIE_K8S_BIN")
	if dir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(base, "kelpie", "k8s-v"+K8sVersion)
	}
	return filepath.Join(dir, "etcd")
}

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:PORT
	PeerURL   string
	cmd       *exec.Cmd
	log       *bytes.Buffer
	waited    chan struct{}
	stopped   bool
	dataDir   string
}

// Cluster is a running etcd cluster.
type Cluster struct {
	Members []*Member
	tls     *tls.Config // the test's client TLS (Options.TLS), nil on plain HTTP
}

// Options configure StartWith.
type Options struct {
	Members int    // 3 if zero
	Host    string // the address members listen on; 127.0.0.1 if empty
	// TLS, when set, serves clients HTTPS with CertFile/KeyFile and, with
	// ClientCA, demands a client certificate signed by it
	// (--client-cert-auth). Client then uses ClientTLS.
	TLS *TLS
	// Extra arguments go to every member.
	Extra []string
}

// TLS is the members' client-facing TLS.
type TLS struct {
	CertFile, KeyFile string
	ClientCA          string      // --trusted-ca-file with --client-cert-auth; "" for none
	ClientTLS         *tls.Config // what Cluster.Client dials with
}

// Endpoints are the members' client addresses (HOST:PORT).
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = strings.TrimPrefix(strings.TrimPrefix(m.ClientURL, "http://"), "https://")
	}
	return out
}

// URL is the cluster as kelpie scheduler --store takes it: etcds:// when
// it serves TLS.
func (c *Cluster) URL() string {
	scheme := "etcd://"
	if c.tls != nil {
		scheme = "etcds://"
	}
	return scheme + strings.Join(c.Endpoints(), ",")
}

// Client is a client of the cluster, closed at the test's end.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	eps := make([]string, len(c.Members))
	for i, m := range c.Members {
		eps[i] = m.ClientURL
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: c.tls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// freePorts reserves n ports on host (released before they are used:
// another process could take one in between, which fails the start).
func freePorts(t testing.TB, host string, n int) []int {
	t.Helper()
	var ls []net.Listener
	var out []int
	for range n {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// Start starts an n-member cluster on 127.0.0.1 and waits until it
// answers. Extra arguments go to every member.
func Start(t testing.TB, n int, extra ...string) *Cluster {
	t.Helper()
	return StartWith(t, Options{Members: n, Extra: extra})
}

// StartWith starts a cluster as o says and waits until it answers.
func StartWith(t testing.TB, o Options) *Cluster {
	t.Helper()
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no etcd binary at %s: run `make k8s-bin` (it builds etcd with the Kubernetes test control plane)", bin)
	}
	n, host := o.Members, o.Host
	if n <= 0 {
		n = 3
	}
	if host == "" {
		host = "127.0.0.1"
	}
	client := "http"
	var tlsArgs []string
	c := &Cluster{}
	if o.TLS != nil {
		client = "https"
		c.tls = o.TLS.ClientTLS
		tlsArgs = []string{"--cert-file", o.TLS.CertFile, "--key-file", o.TLS.KeyFile}
		if o.TLS.ClientCA != "" {
			tlsArgs = append(tlsArgs, "--trusted-ca-file", o.TLS.ClientCA, "--client-cert-auth")
		}
	}
	dir := t.TempDir()
	ports := freePorts(t, host, 2*n)
	var initial []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i), ClientURL: fmt.Sprintf("%s://%s:%d", client, host, ports[2*i]),
			PeerURL: fmt.Sprintf("http://%s:%d", host, ports[2*i+1]), dataDir: filepath.Join(dir, fmt.Sprintf("m%d", i))}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.PeerURL)
	}
	t.Cleanup(c.Stop)
	for _, m := range c.Members {
		args := append([]string{"--name", m.Name, "--data-dir", m.dataDir,
			"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "kelpie-test", "--log-level", "warn",
			"--heartbeat-interval", "100", "--election-timeout", "1000"}, append(tlsArgs, o.Extra...)...)
		m.cmd = exec.Command(bin, args...)
		m.log = &bytes.Buffer{}
		m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
		m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := m.cmd.Start(); err != nil {
			t.Fatalf("etcd %s: %v", m.Name, err)
		}
		m.waited = make(chan struct{})
		go func(m *Member) { _ = m.cmd.Wait(); close(m.waited) }(m)
	}
	cli := c.Client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Put(ctx, "/etcdtest/ready", "1")
		cancel()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd cluster not ready after 30s: %v\n%s", err, c.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Logs are the members' outputs.
func (c *Cluster) Logs() string {
	var b strings.Builder
	for _, m := range c.Members {
		fmt.Fprintf(&b, "--- etcd %s\n%s", m.Name, m.log.String())
	}
	return b.String()
}

// Stop kills every member and waits for it.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		if m.cmd == nil || m.cmd.Process == nil || m.stopped {
			continue
		}
		m.stopped = true
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.waited:
		case <-time.After(10 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.waited
		}
	}
}
