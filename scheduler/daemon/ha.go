package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/election"
	"github.com/kelpie/kelpie/scheduler/pki"
	"github.com/kelpie/kelpie/scheduler/store"
)

// replica is a scheduler on a shared etcd store: its client, and the
// leadership it won before it opened the store (a standby waits in Start).
type replica struct {
	cli    *clientv3.Client
	leader *election.Leader
	me     string // its addresses, as published on its election key
}

// etcdProbeTimeout is how long a replica starting gives etcd to answer.
const etcdProbeTimeout = 15 * time.Second

// etcdTLS is the TLS configuration for etcd: its CA and this replica's
// client certificate, when given.
func etcdTLS(cfg Config) (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.EtcdCA != "" {
		pem, err := os.ReadFile(cfg.EtcdCA)
		if err != nil {
			return nil, fmt.Errorf("scheduler: --etcd-ca: %v", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("scheduler: --etcd-ca %s: no certificate", cfg.EtcdCA)
		}
	}
	if (cfg.EtcdCert == "") != (cfg.EtcdKey == "") {
		return nil, errors.New("scheduler: --etcd-cert and --etcd-key go together")
	}
	if cfg.EtcdCert != "" {
		c, err := tls.LoadX509KeyPair(cfg.EtcdCert, cfg.EtcdKey)
		if err != nil {
			return nil, fmt.Errorf("scheduler: etcd client certificate: %v", err)
		}
		t.Certificates = []tls.Certificate{c}
	}
	return t, nil
}

// openReplicated connects to etcd, waits until this replica leads (a
// standby waits here: it serves nothing meanwhile) and opens the store with
// every write fenced by that leadership. The CA and the job key come from
// etcd (sealed with --store-key-file) into the data dir, where the node
// plane reads them; the first leader ever puts its own there.
func openReplicated(cfg Config) (*store.Store, *replica, error) {
	endpoints, secure, err := store.ParseEtcdURL(cfg.Store)
	if err != nil {
		return nil, nil, err
	}
	if cfg.StoreKeyFile == "" {
		return nil, nil, errors.New("scheduler: --store etcd://… needs --store-key-file (the key the replicas seal the CA and job secrets with)")
	}
	key, err := store.LoadSecretKey(cfg.StoreKeyFile)
	if err != nil {
		return nil, nil, err
	}
	var tlsCfg *tls.Config
	if secure || cfg.EtcdCA != "" || cfg.EtcdCert != "" {
		if tlsCfg, err = etcdTLS(cfg); err != nil {
			return nil, nil, err
		}
	}
	cli, err := store.DialEtcd(endpoints, tlsCfg)
	if err != nil {
		return nil, nil, err
	}
	ctx := cfg.Context
	if ctx == nil {
		ctx = context.Background()
	}
	// An etcd that cannot be reached or refuses this replica's TLS is an
	// error now, with its reason, not a standby waiting for ever.
	if err := store.ProbeEtcd(ctx, cli, endpoints, tlsCfg, etcdProbeTimeout); err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("scheduler: %v", err)
	}
	cfg.Log.Info("standby: waiting to lead", "store", cfg.Store, "lease", cfg.LeaseTTL)
	leader, err := election.Campaign(ctx, cli, election.Options{Prefix: cfg.EtcdPrefix + "leader/", TTL: cfg.LeaseTTL,
		Value: "grpc=" + cfg.GRPC + " http=" + cfg.HTTP})
	if err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("scheduler: %v", err)
	}
	cfg.Log.Info("leading", "key", leader.Key(), "revision", leader.Rev())
	rep := &replica{cli: cli, leader: leader, me: "grpc=" + cfg.GRPC + " http=" + cfg.HTTP}
	lkey, lrev := leader.Key(), leader.Rev()
	refused := func(what string) {
		cfg.Log.Warn("store write refused: this replica no longer leads", "write", what, "key", lkey, "revision", lrev)
	}
	st, err := store.OpenEtcd(cli, store.EtcdOptions{Prefix: cfg.EtcdPrefix, Fence: leader.Fence, Refused: refused, SecretKey: key,
		AuditMaxBytes: auditRetention(cfg).AuditMaxBytes, AuditMaxAge: auditRetention(cfg).AuditMaxAge})
	if err == nil {
		err = syncSecrets(cfg, st.Secrets())
	}
	if err != nil {
		rep.close()
		return nil, nil, err
	}
	return st, rep, nil
}

// syncSecrets makes the data dir hold the replicas' shared CA (unless
// --ca-cert/--ca-key name one) and job key: those in etcd when there are,
// else this replica's own (created if need be), which it then puts there.
func syncSecrets(cfg Config, sec store.Secrets) error {
	names := []string{pki.JobKeyFile}
	if cfg.CACert == "" && cfg.CAKey == "" {
		names = append(names, pki.CertFile, pki.KeyFile)
	}
	shared := map[string][]byte{}
	for _, n := range names {
		v, ok, err := sec.GetSecret(n)
		if err != nil {
			return fmt.Errorf("scheduler: shared %s: %v", n, err)
		}
		if ok {
			shared[n] = v
		}
	}
	if len(shared) == len(names) {
		for n, v := range shared {
			if err := pki.WriteFile(filepath.Join(cfg.DataDir, n), v, 0o600); err != nil {
				return fmt.Errorf("scheduler: %s: %v", n, err)
			}
		}
		return nil
	}
	if len(shared) != 0 {
		return fmt.Errorf("scheduler: the store holds some of %s but not all: refusing to mix credentials", strings.Join(names, ", "))
	}
	if len(names) == 3 {
		if _, err := pki.LoadOrCreate(cfg.DataDir); err != nil {
			return fmt.Errorf("scheduler: CA: %v", err)
		}
	}
	if _, err := pki.LoadOrCreateJobKey(cfg.DataDir); err != nil {
		return fmt.Errorf("scheduler: %v", err)
	}
	for _, n := range names {
		v, err := os.ReadFile(filepath.Join(cfg.DataDir, n))
		if err != nil {
			return fmt.Errorf("scheduler: %v", err)
		}
		if err := sec.PutSecret(n, v); err != nil {
			return err
		}
	}
	return nil
}

// close resigns (a standby leads at once instead of after the lease) and
// disconnects.
func (r *replica) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = r.leader.Resign(ctx)
	cancel()
	r.cli.Close()
}

// Lost is closed when this scheduler, a replica on etcd, has lost its
// leadership: its writes are refused from then on, and it must stop (its
// supervisor starts it again as a standby). Nil (never closed) for a
// scheduler on bbolt.
func (d *Daemon) Lost() <-chan struct{} {
	if d.replica == nil {
		return nil
	}
	return d.replica.leader.Lost()
}

// auditLeadership records in the audit log that this replica took over
// (at start) or stepped down (lost its lease). A step-down is refused by
// the fence like every write of a replica that no longer leads — the
// refusal is logged — so the log holds the takeovers only, each naming the
// replica and its election revision.
func (d *Daemon) auditLeadership(command string) error {
	if d.replica == nil {
		return nil
	}
	return d.Manager.Audit(console.AuditEntry{Time: time.Now(), Who: "scheduler", Role: "scheduler", Command: command,
		Detail: fmt.Sprintf("replica %s (election revision %d)", d.replica.me, d.replica.leader.Rev()), Allowed: true})
}

// StepDown is what a replica that lost its leadership does before it
// closes: it tries to record the step-down, which the fence refuses (the
// error returned says so).
func (d *Daemon) StepDown() error { return d.auditLeadership("step-down") }
