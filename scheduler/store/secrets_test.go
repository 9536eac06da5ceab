package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/scheduler/store/etcdtest"
)

// TestSecretsSealedAtRest: a secret comes back through a store with the
// same key, is not in etcd in the clear, does not open with another key or
// under another name, and a bbolt store has no secret keeping.
func TestSecretsSealedAtRest(t *testing.T) {
	c := etcdtest.Start(t, 1)
	cli := c.Client(t)
	key := bytes.Repeat([]byte{7}, SecretKeySize)
	s, err := OpenEtcd(cli, EtcdOptions{SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("-----BEGIN PRIVATE KEY----- very secret")
	must(t, s.Secrets().PutSecret("ca.key", secret))
	if got, ok, err := s.Secrets().GetSecret("ca.key"); err != nil || !ok || !bytes.Equal(got, secret) {
		t.Fatalf("GetSecret = %q, %v, %v", got, ok, err)
	}
	if _, ok, err := s.Secrets().GetSecret("none"); ok || err != nil {
		t.Errorf("GetSecret(absent) = %v, %v", ok, err)
	}
	resp, err := cli.Get(context.Background(), DefaultEtcdPrefix+"secrets/ca.key")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("raw read: %v", err)
	}
	raw := resp.Kvs[0].Value
	if bytes.Contains(raw, []byte("secret")) || bytes.Contains(raw, []byte("PRIVATE")) {
		t.Errorf("the secret is stored in the clear: %q", raw)
	}

	other, err := OpenEtcd(cli, EtcdOptions{SecretKey: bytes.Repeat([]byte{8}, SecretKeySize)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.Secrets().GetSecret("ca.key"); !errors.Is(err, ErrSealed) {
		t.Errorf("GetSecret with another key = %v; want ErrSealed", err)
	}
	_, err = cli.Put(context.Background(), DefaultEtcdPrefix+"secrets/jobs.key", string(raw)) // moved
	must(t, err)
	if _, _, err := s.Secrets().GetSecret("jobs.key"); !errors.Is(err, ErrSealed) {
		t.Errorf("a sealed value moved under another name opened: %v", err)
	}
	if noKey, _ := OpenEtcd(cli, EtcdOptions{}); noKey.Secrets() != nil {
		t.Error("an etcd store without a key offers secrets")
	}
	if b, _ := openTemp(t); b.Secrets() != nil {
		t.Error("a bbolt store offers secrets")
	}
}

func TestLoadSecretKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		must(t, os.WriteFile(p, []byte(data), mode))
		return p
	}
	raw := strings.Repeat("k", SecretKeySize)
	if k, err := LoadSecretKey(write("raw", raw, 0o600)); err != nil || string(k) != raw {
		t.Errorf("raw key = %q, %v", k, err)
	}
	if k, err := LoadSecretKey(write("hex", strings.Repeat("ab", SecretKeySize)+"\n", 0o600)); err != nil || len(k) != SecretKeySize || k[0] != 0xab {
		t.Errorf("hex key = %x, %v", k, err)
	}
	if _, err := LoadSecretKey(write("open", raw, 0o644)); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Errorf("a world-readable key = %v; want refused", err)
	}
	if _, err := LoadSecretKey(write("short", "abc", 0o600)); err == nil {
		t.Error("a short key was accepted")
	}
}
