package daemon

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kelpie/kelpie/scheduler/pki"
)

// Files of the console's automatic TLS certificate in the data dir.
const (
	consoleCertFile = "console.crt"
	consoleKeyFile  = "console.key"
)

// consoleTLS is the HTTP port's TLS configuration and the SHA-256
// fingerprint of its certificate: from --tls-cert/--tls-key, or with
// TLSAuto a self-signed certificate kept in the data dir (so its
// fingerprint survives restarts). Nil without either.
func consoleTLS(cfg Config) (*tls.Config, string, error) {
	certPath, keyPath := cfg.TLSCert, cfg.TLSKey
	switch {
	case certPath != "" || keyPath != "":
		if certPath == "" || keyPath == "" {
			return nil, "", errors.New("scheduler: --tls-cert and --tls-key go together")
		}
	case cfg.TLSAuto:
		certPath, keyPath = filepath.Join(cfg.DataDir, consoleCertFile), filepath.Join(cfg.DataDir, consoleKeyFile)
		if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) {
			hosts := pki.LocalHosts()
			if h := listenHost(cfg.HTTP); h != "" {
				hosts = append(hosts, h)
			}
			c, k, err := pki.SelfSigned("kelpie console", 5*365*24*time.Hour, hosts...)
			if err != nil {
				return nil, "", err
			}
			if err := pki.WriteFile(keyPath, k, 0o600); err != nil {
				return nil, "", err
			}
			if err := pki.WriteFile(certPath, c, 0o644); err != nil {
				return nil, "", err
			}
		}
	default:
		return nil, "", nil
	}
	if fi, err := os.Stat(keyPath); err != nil {
		return nil, "", fmt.Errorf("scheduler: TLS key: %v", err)
	} else if fi.Mode().Perm()&0o077 != 0 {
		return nil, "", fmt.Errorf("scheduler: TLS key %s is readable by others (mode %#o); chmod 600 it", keyPath, fi.Mode().Perm())
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, "", fmt.Errorf("scheduler: TLS: %v", err)
	}
	sum := sha256.Sum256(cert.Certificate[0])
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, hex.EncodeToString(sum[:]), nil
}
