// Package pki is the scheduler's certificate authority. It lives in the
// scheduler's data directory (ca.crt, and ca.key readable by the scheduler's
// user only), created on first start or supplied by the operator, and issues
// the short-lived certificates of a job's nodes, the scheduler's own, and
// operators' client certificates (core/identity describes the names).
//
// Rotation keeps trust across the change: the new CA certificate is added
// to ca.crt in front of the old ones, and every certificate the old key
// issued stays valid until it expires; `kelpie certs rotate --drop-old`
// removes the old ones once they have.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/kelpie/kelpie/core/identity"
)

// Files in the data directory.
const (
	CertFile = "ca.crt"
	KeyFile  = "ca.key"
)

// Default lifetimes.
const (
	CALifetime   = 5 * 365 * 24 * time.Hour
	NodeLifetime = 72 * time.Hour // a node's certificate: the job's run, renewed at each launch
	skew         = 5 * time.Minute
)

// CA is a certificate authority: the certificate and key that issue, and
// every CA certificate trusted (the issuing one first).
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	Trusted []*x509.Certificate
	Now     func() time.Time
}

func (ca *CA) now() time.Time {
	if ca.Now != nil {
		return ca.Now()
	}
	return time.Now()
}

// LoadOrCreate opens the CA in dir, creating it on first use.
func LoadOrCreate(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CertFile), filepath.Join(dir, KeyFile)
	if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) {
		ca, err := New("kelpie CA", time.Now())
		if err != nil {
			return nil, err
		}
		if err := ca.Save(dir); err != nil {
			return nil, err
		}
		return ca, nil
	}
	return Load(certPath, keyPath)
}

// New makes a fresh CA.
func New(name string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"kelpie"}},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, Trusted: []*x509.Certificate{cert}}, nil
}

// Load reads a CA from a certificate file (the issuing certificate first,
// then any others to trust) and a key file that only its owner may read.
func Load(certPath, keyPath string) (*CA, error) {
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %v", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("pki: CA key %s is readable by others (mode %v); chmod 600 it", keyPath, fi.Mode().Perm())
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("pki: CA certificate: %v", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %v", err)
	}
	var trusted []*x509.Certificate
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pki: %s: %v", certPath, err)
		}
		trusted = append(trusted, c)
	}
	if len(trusted) == 0 {
		return nil, fmt.Errorf("pki: %s holds no certificate", certPath)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("pki: %s holds no PEM key", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %v", keyPath, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: %s: not a signing key", keyPath)
	}
	tk, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: trusted[0].Raw}), keyPEM)
	if err != nil || tk.PrivateKey == nil {
		return nil, fmt.Errorf("pki: the key in %s does not belong to the first certificate of %s", keyPath, certPath)
	}
	if !trusted[0].IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", certPath)
	}
	return &CA{Cert: trusted[0], Key: signer, Trusted: trusted}, nil
}

// Save writes ca.crt (0644) and ca.key (0600) into dir.
func (ca *CA) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, KeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, CertFile), ca.TrustedPEM(), 0o644)
}

// writeFile replaces path atomically with data at mode.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// TrustedPEM is every trusted CA certificate, the issuing one first.
func (ca *CA) TrustedPEM() []byte {
	var b bytes.Buffer
	for _, c := range ca.Trusted {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// Rotate makes a new issuing CA; the old certificates stay trusted unless
// dropOld.
func (ca *CA) Rotate(dropOld bool) (*CA, error) {
	n, err := New("kelpie CA", ca.now())
	if err != nil {
		return nil, err
	}
	if !dropOld {
		n.Trusted = append(n.Trusted, ca.Trusted...)
	}
	n.Now = ca.Now
	return n, nil
}

// Fingerprint is the SHA-256 of a certificate, in hex.
func Fingerprint(c *x509.Certificate) string {
	s := sha256.Sum256(c.Raw)
	return hex.EncodeToString(s[:])
}

// Issue makes a certificate for id, valid for ttl, usable as client and as
// server; hosts (IP addresses or DNS names) go in its SANs so that stock
// clients (grpcurl, curl) can verify it by address.
func (ca *CA) Issue(id identity.Identity, ttl time.Duration, hosts ...string) (tls.Certificate, error) {
	if err := id.Validate(); err != nil {
		return tls.Certificate{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.Node, OrganizationalUnit: []string{id.Role}, Organization: []string{"kelpie"}, SerialNumber: id.Instance},
		NotBefore:    now.Add(-skew),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:         []*url.URL{id.URI()},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Credentials issues a certificate for id and returns it as credentials
// that trust this CA.
func (ca *CA) Credentials(id identity.Identity, ttl time.Duration, hosts ...string) (*identity.Credentials, error) {
	c, err := ca.Issue(id, ttl, hosts...)
	if err != nil {
		return nil, err
	}
	return identity.New(c, ca.Trusted)
}

// Bundle is the credentials file of id (core/identity.Parse reads it):
// the certificate, its key, then the trusted CA certificates.
func (ca *CA) Bundle(id identity.Identity, ttl time.Duration, hosts ...string) ([]byte, error) {
	c, err := ca.Issue(id, ttl, hosts...)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]})
	_ = pem.Encode(&b, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	b.Write(ca.TrustedPEM())
	return b.Bytes(), nil
}

// WriteBundle writes id's credentials file at path, readable by this user
// only (0600, replacing any older one).
func (ca *CA) WriteBundle(path string, id identity.Identity, ttl time.Duration, hosts ...string) error {
	b, err := ca.Bundle(id, ttl, hosts...)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}

// LocalHosts are the SANs of certificates for processes on this machine.
func LocalHosts() []string {
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		hosts = append(hosts, h)
	}
	return hosts
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

// SelfSigned makes a self-signed server certificate for hosts (IP addresses
// or DNS names): the console's automatic TLS certificate, which clients pin
// by its fingerprint. It returns the certificate and PKCS#8 key as PEM.
func SelfSigned(name string, lifetime time.Duration, hosts ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"kelpie"}},
		NotBefore:    now.Add(-skew),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// WriteFile replaces path atomically with data at mode (0600 for keys).
func WriteFile(path string, data []byte, mode os.FileMode) error { return writeFile(path, data, mode) }

// JobKeyFile holds the key every job's data-plane secret is derived from.
const JobKeyFile = "jobs.key"

// LoadOrCreateJobKey reads the job key in dir (mode 0600), creating it on
// first use.
func LoadOrCreateJobKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, JobKeyFile)
	if fi, err := os.Stat(path); err == nil {
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("pki: %s is readable by others (mode %v); chmod 600 it", path, fi.Mode().Perm())
		}
		k, err := os.ReadFile(path)
		if err != nil || len(k) < 32 {
			return nil, fmt.Errorf("pki: %s: %v (%d bytes)", path, err, len(k))
		}
		return k, nil
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return k, writeFile(path, k, 0o600)
}

// JobSecret is job's data-plane secret: what its framed connections prove
// at connect time (runtime/framing.SharedSecret). It is derived, so a
// restarted scheduler gives a job's relaunched nodes the same one. With an
// instance (the job's UID) it is that instance's: a job resubmitted under
// the same name has another secret, and the earlier one's is refused.
func JobSecret(key []byte, job string, instance ...string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("kelpie data plane secret\x00" + job))
	for _, i := range instance {
		if i != "" {
			m.Write([]byte("\x00" + i))
		}
	}
	return m.Sum(nil)
}

// InstancePath is where the scheduler keeps the instance UID of the job
// whose nodes it issued credentials to last (under its data dir), so that
// kelpie certs issue binds a node issued by hand to the same instance.
func InstancePath(dataDir, job string) string {
	return filepath.Join(dataDir, "nodes", job, "instance")
}

// WriteNodeBundle writes a node's credentials file (WriteBundle) with its
// job's data-plane secret appended.
func (ca *CA) WriteNodeBundle(path string, id identity.Identity, ttl time.Duration, secret []byte, hosts ...string) error {
	b, err := ca.Bundle(id, ttl, hosts...)
	if err != nil {
		return err
	}
	b = append(b, pem.EncodeToMemory(&pem.Block{Type: identity.JobSecretPEM, Bytes: secret})...)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeFile(path, b, 0o600)
}
