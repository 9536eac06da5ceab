package daemon

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/scheduler/election"
	"github.com/kelpie/kelpie/scheduler/pki"
	"github.com/kelpie/kelpie/scheduler/store"
	"github.com/kelpie/kelpie/scheduler/store/etcdtest"
)

// tlsFiles are a CA's certificate and one certificate it issued, as PEM
// files.
type tlsFiles struct {
	ca, cert, key string
	pool          *x509.CertPool
	pair          tls.Certificate
}

// issueTLS makes a CA named name in dir and a certificate from it for
// 127.0.0.1, usable as a server's and a client's.
func issueTLS(t *testing.T, dir, name string) tlsFiles {
	t.Helper()
	ca, err := pki.New(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.Issue(identity.Identity{Node: "scheduler", Role: "scheduler"}, time.Hour, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	f := tlsFiles{ca: filepath.Join(dir, name+"-ca.pem"), cert: filepath.Join(dir, name+".pem"), key: filepath.Join(dir, name+"-key.pem"),
		pool: x509.NewCertPool(), pair: c}
	f.pool.AddCert(ca.Cert)
	for p, b := range map[string][]byte{
		f.ca:   ca.TrustedPEM(),
		f.cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
		f.key:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestEtcdTLS: etcd serving TLS and demanding client certificates
// (--client-cert-auth), with a CA the test makes. A scheduler given
// etcds://, the CA and a client certificate elects and stores through it
// (its election key, its takeover in the audit log, the sealed CA); one
// given another CA, or no client certificate, exits at once with an error
// that says what is wrong instead of waiting to lead for ever.
func TestEtcdTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	dir := t.TempDir()
	good := issueTLS(t, dir, "etcd")
	wrong := issueTLS(t, dir, "other")
	c := etcdtest.StartWith(t, etcdtest.Options{Members: 1, TLS: &etcdtest.TLS{CertFile: good.cert, KeyFile: good.key, ClientCA: good.ca,
		ClientTLS: &tls.Config{RootCAs: good.pool, Certificates: []tls.Certificate{good.pair}, MinVersion: tls.VersionTLS12}}})
	if !strings.HasPrefix(c.URL(), "etcds://") {
		t.Fatalf("store URL %s; want etcds://", c.URL())
	}
	cli := c.Client(t)
	keyFile := filepath.Join(dir, "store.key")
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := writeTokens(t)
	tag := fmt.Sprintf("KELPIE_TEST_TAG=etcd-tls-%d", time.Now().UnixNano())
	defer func() {
		killTagged(tag)
		if left := tagged(tag); len(left) > 0 {
			t.Errorf("processes left: %v", left)
		}
	}()
	scheduler := func(prefix string, etcdFlags ...string) (*exec.Cmd, *lockedBuffer, chan struct{}, string) {
		grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
		out := &lockedBuffer{t: t}
		args := append([]string{"scheduler", "--grpc", grpcAddr, "--http", httpAddr, "--data-dir", filepath.Join(t.TempDir(), "d"),
			"--tokens", tokens, "--store", c.URL(), "--store-key-file", keyFile, "--etcd-prefix", prefix, "--lease-ttl", "3s",
			"--stop-jobs-on-exit=false"}, etcdFlags...)
		cmd := exec.Command(kelpieBin, args...)
		cmd.Env = append(os.Environ(), tag)
		cmd.Stderr = out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		return cmd, out, exited, grpcAddr
	}

	t.Run("client-cert", func(t *testing.T) {
		prefix := "/kelpie-tls/"
		cmd, out, exited, grpcAddr := scheduler(prefix, "--etcd-ca", good.ca, "--etcd-cert", good.cert, "--etcd-key", good.key)
		defer func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for {
			v, ok, err := election.Current(ctx, cli, prefix+"leader/")
			if err != nil {
				t.Fatal(err)
			}
			if ok && strings.Contains(v, "grpc="+grpcAddr+" ") {
				break
			}
			select {
			case <-exited:
				t.Fatalf("the scheduler exited before leading:\n%s", out.String())
			case <-ctx.Done():
				t.Fatalf("the scheduler does not lead through etcd over TLS:\n%s", out.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		// It writes through the same TLS client: its takeover in the
		// audit log and the node plane's CA, sealed.
		st, err := store.OpenEtcd(cli, store.EtcdOptions{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		var audit []store.AuditEntry
		for deadline := time.Now().Add(time.Minute); ; {
			if audit, err = st.ListAudit(time.Time{}, 0); err != nil {
				t.Fatal(err)
			}
			if len(audit) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(audit) == 0 || !strings.HasPrefix(audit[0].What, "lead") || !strings.Contains(audit[0].What, grpcAddr) {
			t.Fatalf("audit log over TLS: %+v; want this scheduler's takeover", audit)
		}
		resp, err := cli.Get(ctx, prefix+"secrets/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 0 {
			t.Errorf("no sealed secret under %ssecrets/", prefix)
		}
		t.Logf("leads and stores over etcds:// with a client certificate: %s; %d sealed secrets", audit[0].What, resp.Count)
	})

	refused := func(t *testing.T, want []string, etcdFlags ...string) {
		cmd, out, exited, _ := scheduler("/kelpie-tls-refused/", etcdFlags...)
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("the scheduler did not give up on etcd within 2 minutes:\n%s", out.String())
		}
		if cmd.ProcessState.ExitCode() == 0 {
			t.Errorf("exit status 0; want a failure")
		}
		log := out.String()
		for _, w := range want {
			if !strings.Contains(log, w) {
				t.Errorf("its error does not say %q:\n%s", w, log)
			}
		}
		if strings.Contains(log, "leading") {
			t.Errorf("it led:\n%s", log)
		}
	}
	t.Run("wrong-ca", func(t *testing.T) {
		refused(t, []string{"etcd", "certificate signed by unknown authority"},
			"--etcd-ca", wrong.ca, "--etcd-cert", good.cert, "--etcd-key", good.key)
	})
	t.Run("no-client-cert", func(t *testing.T) {
		refused(t, []string{"etcd", "certificate required"}, "--etcd-ca", good.ca)
	})
}
