package client

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// WithTLS connects over TLS (wss://) with cfg, whatever the address's
// scheme says (a HOST:PORT address or ws:// becomes wss://).
func WithTLS(cfg *tls.Config) Option {
	return func(c *config) {
		c.tls = cfg
		c.httpClient = &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: false}}
	}
}

// TLSConfig is the TLS configuration for a scheduler's console port:
// pinned to the certificate whose SHA-256 fingerprint is fingerprint (hex,
// colons allowed; what kelpie scheduler --tls-auto prints), or verified
// against the CA certificates in caFile, or against the system's roots when
// both are empty.
func TLSConfig(fingerprint, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("client: TLS CA: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client: %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if fingerprint == "" {
		return cfg, nil
	}
	want, err := hex.DecodeString(strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(fingerprint), "sha256:"), ":", ""))
	if err != nil || len(want) != sha256.Size {
		return nil, fmt.Errorf("client: TLS fingerprint %q: want 64 hex digits (SHA-256)", fingerprint)
	}
	// The pin replaces name and chain verification: the certificate is
	// self-signed and known by its fingerprint alone.
	cfg.InsecureSkipVerify = true
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("client: the scheduler sent no certificate")
		}
		got := sha256.Sum256(raw[0])
		if !strings.EqualFold(hex.EncodeToString(got[:]), hex.EncodeToString(want)) {
			return fmt.Errorf("client: the scheduler's certificate sha256:%x is not the pinned sha256:%x", got, want)
		}
		return nil
	}
	return cfg, nil
}
