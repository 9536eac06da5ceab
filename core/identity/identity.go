// Package identity is who is calling on kelpie's node plane: the identity a
// node certificate names (job, node, role), the TLS settings every gRPC
// client and server of a job uses with it, and the per-call authorization
// interceptors (authz.go) that compare what a request claims with the
// certificate of the caller.
//
// A certificate issued by a scheduler's CA (scheduler/pki) carries exactly
// one URI SAN and its role in the subject's organizational unit:
//
//	node       kelpie://JOB/NODE          role worker or server (NODE worker-3, server-0, ...)
//	scheduler  kelpie://_/scheduler       role scheduler
//	operator   kelpie://_/operator/NAME   role operator (grpcurl, scripts)
//
// "_" is no job name ([a-z0-9-]), so the forms cannot collide. A node's
// process finds its credentials in the file named by $KELPIE_CERT (PEM: the
// certificate, its private key, then the CA certificates it trusts), which
// the launcher writes readable by the node's user only; without it the node
// speaks plaintext (the runtime's own tests and benchmarks).
//
// Only the standard library's crypto/tls and crypto/x509 and grpc's
// credentials are used; peers are verified against the CA pool and by the
// identity in their certificate rather than by host name, so a node plane
// spread over hosts needs no DNS names in certificates.
package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
)

// EnvCert names the environment variable holding a node's credentials file.
const EnvCert = "KELPIE_CERT"

// Scheme is the URI scheme of kelpie identities.
const Scheme = "kelpie"

// noJob is the URI host of identities that belong to no job.
const noJob = "_"

// Roles.
const (
	RoleWorker    = "worker"
	RoleServer    = "server"
	RoleScheduler = "scheduler"
	RoleOperator  = "operator"
)

// Identity is who a certificate names.
type Identity struct {
	Job  string // empty for the scheduler and operators
	Node string // worker-3, server-0; "scheduler"; the operator's name
	Role string
	// Instance is the UID of the job instance a node's certificate was
	// issued for (its subject's serialNumber): a job resubmitted under the
	// same name is another instance, and the earlier one's certificates
	// are refused by it. Empty in certificates issued by hand (kelpie certs
	// issue without --instance), which name the job only.
	Instance string
}

// ForInstance is id bound to the job instance uid.
func (id Identity) ForInstance(uid string) Identity {
	id.Instance = uid
	return id
}

// SameInstance says whether id may act in the job instance of self: a node
// certificate naming an instance must name self's (when self has one).
func SameInstance(self, id Identity) error {
	if self.Instance != "" && id.Instance != "" && id.Instance != self.Instance {
		return fmt.Errorf("%s holds a certificate of an earlier instance of job %s (%s, not %s)", id, id.Job, id.Instance, self.Instance)
	}
	return nil
}

var (
	jobRE  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	nodeRE = regexp.MustCompile(`^(worker|server)-(0|[1-9][0-9]*)$`)
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	uidRE  = regexp.MustCompile(`^[a-z0-9]{1,64}$`)
)

// Node is the identity of a node of a job; role is taken from the name.
func Node(job, node string) Identity {
	role, _, _ := strings.Cut(node, "-")
	return Identity{Job: job, Node: node, Role: role}
}

// Scheduler is the scheduler's identity.
func Scheduler() Identity { return Identity{Node: RoleScheduler, Role: RoleScheduler} }

// Operator is the identity of a person or script holding a client certificate.
func Operator(name string) Identity { return Identity{Node: name, Role: RoleOperator} }

// Validate checks that id is one of the three forms.
func (id Identity) Validate() error {
	if id.Instance != "" && (!uidRE.MatchString(id.Instance) || (id.Role != RoleWorker && id.Role != RoleServer)) {
		return fmt.Errorf("identity: instance %q of %s (only a node's, [a-z0-9])", id.Instance, id.Role)
	}
	switch id.Role {
	case RoleWorker, RoleServer:
		if !jobRE.MatchString(id.Job) || len(id.Job) > 63 {
			return fmt.Errorf("identity: job %q is not a job name", id.Job)
		}
		m := nodeRE.FindStringSubmatch(id.Node)
		if m == nil || m[1] != id.Role {
			return fmt.Errorf("identity: node %q is not a %s name", id.Node, id.Role)
		}
	case RoleScheduler:
		if id.Job != "" || id.Node != RoleScheduler {
			return fmt.Errorf("identity: the scheduler has no job and is named scheduler (got %q/%q)", id.Job, id.Node)
		}
	case RoleOperator:
		if id.Job != "" || !nameRE.MatchString(id.Node) {
			return fmt.Errorf("identity: operator name %q (letters, digits, '.', '_', '-')", id.Node)
		}
	default:
		return fmt.Errorf("identity: unknown role %q", id.Role)
	}
	return nil
}

// URI is the identity's URI SAN.
func (id Identity) URI() *url.URL {
	switch id.Role {
	case RoleScheduler:
		return &url.URL{Scheme: Scheme, Host: noJob, Path: "/" + RoleScheduler}
	case RoleOperator:
		return &url.URL{Scheme: Scheme, Host: noJob, Path: "/" + RoleOperator + "/" + id.Node}
	}
	return &url.URL{Scheme: Scheme, Host: id.Job, Path: "/" + id.Node}
}

// String is the URI and role, for logs and audit records.
func (id Identity) String() string {
	if id.Role == "" {
		return "anonymous"
	}
	return id.URI().String() + " (" + id.Role + ")"
}

// FromCertificate reads the identity a certificate names.
func FromCertificate(c *x509.Certificate) (Identity, error) {
	var uris []*url.URL
	for _, u := range c.URIs {
		if u.Scheme == Scheme {
			uris = append(uris, u)
		}
	}
	if len(uris) != 1 {
		return Identity{}, fmt.Errorf("identity: certificate %q has %d kelpie URIs, want 1", c.Subject.CommonName, len(uris))
	}
	if len(c.Subject.OrganizationalUnit) != 1 {
		return Identity{}, fmt.Errorf("identity: certificate %q names %d roles, want 1", c.Subject.CommonName, len(c.Subject.OrganizationalUnit))
	}
	u := uris[0]
	var id Identity
	id.Role = c.Subject.OrganizationalUnit[0]
	id.Instance = c.Subject.SerialNumber
	path := strings.TrimPrefix(u.Path, "/")
	switch {
	case u.Host == noJob && id.Role == RoleScheduler && path == RoleScheduler:
		id.Node = RoleScheduler
	case u.Host == noJob && id.Role == RoleOperator && strings.HasPrefix(path, RoleOperator+"/"):
		id.Node = strings.TrimPrefix(path, RoleOperator+"/")
	case u.Host != noJob:
		id.Job, id.Node = u.Host, path
	default:
		return Identity{}, fmt.Errorf("identity: URI %s does not fit role %q", u, id.Role)
	}
	if err := id.Validate(); err != nil {
		return Identity{}, err
	}
	if want := id.URI().String(); want != u.String() {
		return Identity{}, fmt.Errorf("identity: URI %s is not canonical (%s)", u, want)
	}
	return id, nil
}

// Peer is the identity of the caller of a gRPC call: Unauthenticated when
// the connection has no verified client certificate.
func Peer(p *peer.Peer) (Identity, error) {
	if p == nil {
		return Identity{}, errNoPeer
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return Identity{}, errNoPeer
	}
	return FromCertificate(ti.State.VerifiedChains[0][0])
}

var errNoPeer = errors.New("identity: no verified client certificate")

// Credentials are a certificate with its key and the CA pool it trusts.
type Credentials struct {
	ID    Identity
	Cert  tls.Certificate
	Roots *x509.CertPool
	// JobSecret is the job's data-plane secret, which framed connections
	// prove at connect time (nil when the file has none).
	JobSecret []byte
}

// JobSecretPEM is the PEM block type of a job's data-plane secret in a
// credentials file.
const JobSecretPEM = "KELPIE JOB SECRET"

// ProcessJobSecret is the job's data-plane secret from $KELPIE_CERT, which
// this process's framed connections prove (framing.SharedSecret); nil
// without one, or when the file does not load (then the gRPC dial fails
// loudly instead).
func ProcessJobSecret() []byte {
	c, err := Process()
	if err != nil || c == nil {
		return nil
	}
	return c.JobSecret
}

// New builds credentials from a certificate (with key) and the CA
// certificates to trust.
func New(cert tls.Certificate, roots []*x509.Certificate) (*Credentials, error) {
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("identity: %w", err)
		}
		cert.Leaf = leaf
	}
	id, err := FromCertificate(leaf)
	if err != nil {
		return nil, err
	}
	if len(roots) == 0 {
		return nil, errors.New("identity: no CA certificate to trust")
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	return &Credentials{ID: id, Cert: cert, Roots: pool}, nil
}

// Parse reads a credentials file's content: the certificate first, then its
// PKCS#8 private key, then the CA certificates.
func Parse(pemBytes []byte) (*Credentials, error) {
	var certDER [][]byte
	var keyPEM []byte
	var roots []*x509.Certificate
	var secret []byte
	rest := pemBytes
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			if keyPEM == nil {
				certDER = append(certDER, b.Bytes)
				continue
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("identity: CA certificate: %w", err)
			}
			roots = append(roots, c)
		case "PRIVATE KEY", "EC PRIVATE KEY":
			keyPEM = pem.EncodeToMemory(b)
		case JobSecretPEM:
			secret = b.Bytes
		}
	}
	if len(certDER) == 0 || keyPEM == nil {
		return nil, errors.New("identity: credentials need a CERTIFICATE, then its PRIVATE KEY, then the CA CERTIFICATEs")
	}
	var certPEM []byte
	for _, d := range certDER {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: d})...)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	c, err := New(cert, roots)
	if err != nil {
		return nil, err
	}
	c.JobSecret = secret
	return c, nil
}

// Load reads a credentials file, refusing one that others may read.
func Load(path string) (*Credentials, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("identity: %s is readable by others (mode %v): it holds a private key; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

var process struct {
	once sync.Once
	c    *Credentials
	err  error
}

// Process is this process's credentials from $KELPIE_CERT, loaded once; nil
// (and no error) when the variable is unset.
func Process() (*Credentials, error) {
	process.once.Do(func() {
		if p := os.Getenv(EnvCert); p != "" {
			process.c, process.err = Load(p)
		}
	})
	return process.c, process.err
}

// verify checks a peer's chain against the roots and returns its identity.
func (c *Credentials) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) (Identity, error) {
	if len(chain) == 0 {
		return Identity{}, errNoPeer
	}
	inter := x509.NewCertPool()
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: c.Roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: time.Now()}); err != nil {
		return Identity{}, err
	}
	return FromCertificate(chain[0])
}

// ServerTLS is the TLS configuration of a gRPC server: TLS 1.3, and a
// client certificate required and verified against the CA in the
// handshake, so a peer without one never gets as far as a stream (nothing
// it sends is buffered). Guard.ServerOptionsFor reports the handshakes
// that fail.
func (c *Credentials) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.Roots,
		NextProtos:   []string{"h2"},
	}
}

// ClientTLS is the TLS configuration of a client. The server is verified
// against the CA and by identity, not host name: accept (nil: any kelpie
// identity) says which identities may serve it.
func (c *Credentials) ClientTLS(accept func(Identity) error) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Cert},
		// Verified below, by chain and identity: host names are no part of
		// a node's identity (addresses change with every launch).
		InsecureSkipVerify: true,
		NextProtos:         []string{"h2"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := c.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return fmt.Errorf("identity: server certificate: %w", err)
			}
			if accept != nil {
				return accept(id)
			}
			return nil
		},
	}
}

// FramedServerTLS is the TLS configuration of a parameter server's
// encrypted framed connections (cluster.data_plane_encryption: on): TLS
// 1.3, and a client certificate of a worker of the server's own job,
// verified against the CA. Which identities may connect is said here; the
// framed transport adds its own application protocol (ALPN) to the
// configurations it is given.
func (c *Credentials) FramedServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Cert},
		ClientAuth:   tls.RequireAnyClientCert, // verified below, by chain and identity
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := c.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
			if err != nil {
				return fmt.Errorf("identity: client certificate: %w", err)
			}
			if id.Role != RoleWorker || id.Job != c.ID.Job {
				return fmt.Errorf("identity: %s is not a worker of job %s", id, c.ID.Job)
			}
			return SameInstance(c.ID, id)
		},
	}
}

// FramedClientTLS is the TLS configuration of a worker's encrypted framed
// connections: a server of its own job.
func (c *Credentials) FramedClientTLS() *tls.Config {
	return c.ClientTLS(ServerOf(c.ID.Job))
}

// PeerTLS is the TLS configuration of an allreduce worker's encrypted
// connections to its peers (cluster.exchange ring or rat with
// data_plane_encryption: on), as the end that accepts (server) and the end
// that dials (client): TLS 1.3, node certificates both ways, each end
// verified against the CA and a worker of this node's own job. Which worker
// it must be is checked afterwards, with TLSPeer, against the index it
// claims.
func (c *Credentials) PeerTLS() (server, client *tls.Config) {
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.Cert},
		ClientAuth:   tls.RequireAnyClientCert, // verified below, by chain and identity
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := c.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
			if err != nil {
				return fmt.Errorf("identity: peer certificate: %w", err)
			}
			if err := SameInstance(c.ID, id); err != nil {
				return err
			}
			return WorkerOf(c.ID.Job)(id)
		},
	}
	return server, c.ClientTLS(WorkerOf(c.ID.Job))
}

// TLSPeer is the identity of the peer of a TLS session whose certificate
// was verified during the handshake (PeerTLS, FramedServerTLS, ClientTLS).
func TLSPeer(cs tls.ConnectionState) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, errNoPeer
	}
	return FromCertificate(cs.PeerCertificates[0])
}

// ServerOption is the grpc.Creds of a server with these credentials.
func (c *Credentials) ServerOption() grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(c.ServerTLS()))
}

// DialOption is the transport credentials of a client; with nil
// credentials, plaintext.
func (c *Credentials) DialOption(accept func(Identity) error) grpc.DialOption {
	if c == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(c.ClientTLS(accept)))
}

// IsScheduler accepts only the scheduler (for agents and roles dialling it).
func IsScheduler(id Identity) error {
	if id.Role != RoleScheduler {
		return fmt.Errorf("identity: %s is not the scheduler", id)
	}
	return nil
}

// ServerOf accepts a parameter server of job (for workers, servers and the
// scheduler dialling one; empty job: any job).
func ServerOf(job string) func(Identity) error {
	return func(id Identity) error {
		if id.Role != RoleServer || (job != "" && id.Job != job) {
			return fmt.Errorf("identity: %s is not a server of job %s", id, job)
		}
		return nil
	}
}

// WorkerOf accepts a worker of job (allreduce peers).
func WorkerOf(job string) func(Identity) error {
	return func(id Identity) error {
		if id.Role != RoleWorker || id.Job != job {
			return fmt.Errorf("identity: %s is not a worker of job %s", id, job)
		}
		return nil
	}
}

// ProcessDialOption is the dial option of a node process for a peer accept
// approves: TLS with $KELPIE_CERT, plaintext without. A file that does not
// load is an error to report, never a silent fall back to plaintext.
func ProcessDialOption(accept func(Identity) error) (grpc.DialOption, error) {
	c, err := Process()
	if err != nil {
		return nil, err
	}
	return c.DialOption(accept), nil
}

// PeerDialOption is the dial option of a node process for a parameter
// server of its own job: TLS with $KELPIE_CERT, plaintext without. When the
// file does not load, every dial fails with that error (never a silent fall
// back to plaintext).
func PeerDialOption() grpc.DialOption {
	c, err := Process()
	if err != nil {
		return grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return nil, err })
	}
	if c == nil {
		return c.DialOption(nil)
	}
	return c.DialOption(ServerOf(c.ID.Job))
}

// ProcessFramedTLS are this process's TLS configurations for an encrypted
// framed data plane (cluster.data_plane_encryption: on): as a server and as
// a worker. It fails without $KELPIE_CERT: encryption needs a node
// certificate, and is never silently dropped.
func ProcessFramedTLS() (server, client *tls.Config, err error) {
	c, err := Process()
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		return nil, nil, fmt.Errorf("identity: data_plane_encryption: on needs this node's certificate ($%s is not set)", EnvCert)
	}
	return c.FramedServerTLS(), c.FramedClientTLS(), nil
}

// ProcessPeerTLS are this process's TLS configurations for encrypted
// allreduce peer connections (PeerTLS). Like ProcessFramedTLS it fails
// without $KELPIE_CERT.
func ProcessPeerTLS() (server, client *tls.Config, err error) {
	c, err := Process()
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		return nil, nil, fmt.Errorf("identity: data_plane_encryption: on needs this node's certificate ($%s is not set)", EnvCert)
	}
	server, client = c.PeerTLS()
	return server, client, nil
}

// ProcessServerOptions are the credentials and guard of a node process's
// gRPC server, with the policy for its own identity (none without
// $KELPIE_CERT: a plaintext server). report receives refusals.
func ProcessServerOptions(policy func(self Identity) Policy, report func(Refusal)) ([]grpc.ServerOption, error) {
	c, err := Process()
	if err != nil || c == nil {
		return nil, err
	}
	return NewGuard(policy(c.ID), GuardOptions{Report: report}).ServerOptionsFor(c), nil
}
