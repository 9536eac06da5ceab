package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/core/identity"
	"github.com/kelpie/kelpie/proto/agentpb"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/pki"
	"github.com/kelpie/kelpie/scheduler/textclean"
)

// nodePlane is the node plane's trust: the CA, the scheduler's own
// credentials (server for agents and roles, client for parameter servers),
// and the guard that authorizes every call. Nil in an insecure scheduler.
type nodePlane struct {
	ca      *pki.CA
	creds   *identity.Credentials
	guard   *identity.Guard
	refused *prometheus.CounterVec
	certDir string
	nodeTTL time.Duration
	jobKey  []byte // jobs' data-plane secrets derive from it (pki.JobSecret)
	audit   func(console.AuditEntry) error
	// instance is the UID of the job instance now running under a name
	// ("" for none): node certificates and secrets are bound to it.
	instance func(job string) string
	clk      clock.Clock // the time forwarded refusals are audited at

	// Refusals the nodes forward (nodeRefusal), limited per node: a node
	// rate-limits its own reports, but a compromised one need not.
	mu      sync.Mutex
	forward map[string]*nodeRefusals
}

// nodeRefusals is one node's forwarding budget.
type nodeRefusals struct {
	limit   *rate.Limiter
	dropped uint64 // refusals not audited since the last one that was
}

// newNodePlane opens (or creates) the CA and issues the scheduler's
// certificate. audit receives refusals (rate-limited by the guard).
func newNodePlane(cfg Config, audit func(console.AuditEntry) error) (*nodePlane, error) {
	var ca *pki.CA
	var err error
	switch {
	case cfg.CACert != "" || cfg.CAKey != "":
		if cfg.CACert == "" || cfg.CAKey == "" {
			return nil, fmt.Errorf("scheduler: --ca-cert and --ca-key go together")
		}
		ca, err = pki.Load(cfg.CACert, cfg.CAKey)
	default:
		ca, err = pki.LoadOrCreate(cfg.DataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler: CA: %v", err)
	}
	hosts := pki.LocalHosts()
	if h := listenHost(cfg.GRPC); h != "" {
		hosts = append(hosts, h)
	}
	creds, err := ca.Credentials(identity.Scheduler(), 365*24*time.Hour, hosts...)
	if err != nil {
		return nil, fmt.Errorf("scheduler: certificate: %v", err)
	}
	jobKey, err := pki.LoadOrCreateJobKey(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %v", err)
	}
	np := &nodePlane{ca: ca, jobKey: jobKey, creds: creds, certDir: filepath.Join(cfg.DataDir, "nodes"), nodeTTL: cfg.NodeCertTTL,
		audit: audit, forward: map[string]*nodeRefusals{}, clk: clock.Real(),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kelpie_node_plane_refused_total",
			Help: "Node-plane gRPC calls refused by authentication (Unauthenticated) or authorization (PermissionDenied)."},
			[]string{"code", "method"})}
	if np.nodeTTL <= 0 {
		np.nodeTTL = pki.NodeLifetime
	}
	np.guard = identity.NewGuard(np.policy, identity.GuardOptions{Report: func(r identity.Refusal) {
		detail := r.Method + " from " + r.Addr
		if r.Suppressed > 0 {
			detail += fmt.Sprintf(" (and %d refusals not recorded: rate limit)", r.Suppressed)
		}
		who, role := "no certificate", ""
		if r.ID.Role != "" {
			who, role = r.ID.String(), r.ID.Role
		}
		_ = audit(console.AuditEntry{Time: r.Time, Who: who, Role: role, Command: "node-plane", Job: r.ID.Job,
			Detail: detail, Allowed: false, Reason: r.Code.String() + ": " + r.Reason})
	}, Count: func(method string, code codes.Code) {
		np.refused.WithLabelValues(code.String(), method).Inc()
	}})
	return np, nil
}

// nodeRefusal audits and counts a call a node's own gRPC server refused (a
// parameter server's guard), forwarded by its agent: at most 5 a second
// (bursts of 20) from one node reach the audit log, the others are counted
// and the next record says how many.
func (np *nodePlane) nodeRefusal(job, node string, r *agentpb.NodeRefusal) {
	n := 1 + r.GetSuppressed()
	// The labels are the node's words: only known forms, so a node cannot
	// grow the metric's series without bound.
	code, method := r.GetCode(), r.GetMethod()
	if code != codes.Unauthenticated.String() && code != codes.PermissionDenied.String() {
		code = "other"
	}
	if method != identity.HandshakeMethod && !methodRE.MatchString(method) {
		method = "other"
	}
	np.refused.WithLabelValues(code, method).Add(float64(n))
	key := job + "/" + node
	np.mu.Lock()
	f := np.forward[key]
	if f == nil {
		if len(np.forward) >= 1<<12 {
			clear(np.forward) // bounded; at worst a node gets a fresh burst
		}
		f = &nodeRefusals{limit: rate.NewLimiter(5, 20)}
		np.forward[key] = f
	}
	allow := f.limit.Allow()
	dropped := f.dropped
	if allow {
		f.dropped = 0
	} else {
		f.dropped += n
	}
	np.mu.Unlock()
	if !allow {
		return
	}
	// The record is the reporting node's: its identity (its agent stream's
	// certificate) and the scheduler's clock. What the node says about the
	// caller — identity, address, time — is its claim, shown as such,
	// bounded and stripped of control characters: a node cannot attribute
	// a record to an operator or backdate it.
	reporter := identity.Node(job, node)
	caller := "no certificate"
	if c := r.GetCaller(); c != "" {
		caller = clean(c, 160)
	}
	detail := fmt.Sprintf("%s from %s at %s (as claimed by %s: caller %s", clean(r.GetMethod(), 128), clean(r.GetAddr(), 64), node, node, caller)
	if r.GetUnixNano() > 0 {
		detail += ", at " + time.Unix(0, r.GetUnixNano()).UTC().Format(time.RFC3339Nano)
	}
	detail += ")"
	if left := r.GetSuppressed() + dropped; left > 0 {
		detail += fmt.Sprintf(" (and %d refusals not recorded: rate limit)", left)
	}
	_ = np.audit(console.AuditEntry{Time: np.clk.Now(), Who: reporter.String(), Role: reporter.Role, Command: "node-plane", Job: job,
		Detail: detail, Allowed: false, Reason: clean(r.GetCode(), 32) + ": " + clean(r.GetReason(), 512)})
}

// methodRE is the form of a kelpie gRPC method name.
var methodRE = regexp.MustCompile(`^/(kelpie\.v1\.[A-Za-z]{1,32}|grpc\.[a-z.]{1,48}\.[A-Za-z]{1,32})/[A-Za-z]{1,32}$`)

// clean bounds a string a node sent to n bytes and drops its control
// characters (terminal escapes included) and bidirectional overrides.
func clean(s string, n int) string { return textclean.Clean(s, n) }

// policy is identity.SchedulerPolicy, and a node's certificate must name
// the instance of its job that runs now (not one submitted earlier under
// the same name, nor one that is gone).
func (np *nodePlane) policy(id identity.Identity, method string, msg proto.Message) error {
	if err := identity.SchedulerPolicy(id, method, msg); err != nil {
		return err
	}
	if msg != nil || id.Instance == "" || np.instance == nil || (id.Role != identity.RoleWorker && id.Role != identity.RoleServer) {
		return nil
	}
	if cur := np.instance(id.Job); cur != id.Instance {
		if cur == "" {
			return fmt.Errorf("%s holds a certificate of job %s, which is gone", id, id.Job)
		}
		return identity.SameInstance(identity.Node(id.Job, id.Node).ForInstance(cur), id)
	}
	return nil
}

// serverOptions are the node plane server's credentials and interceptors.
func (np *nodePlane) serverOptions() []grpc.ServerOption {
	if np == nil {
		return nil
	}
	return np.guard.ServerOptionsFor(np.creds)
}

// nodeCert writes the credentials file of one node of a job instance (its
// certificate names the instance uid, and its data-plane secret is the
// instance's), readable by this user only, in the node's own directory, and
// returns its path.
func (np *nodePlane) nodeCert(job, uid, node string) (string, error) {
	dir := filepath.Join(np.certDir, job, node)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "node.pem")
	id := identity.Node(job, node).ForInstance(uid)
	if uid != "" {
		// For kelpie certs issue: a node issued by hand joins this instance.
		if err := pki.WriteFile(pki.InstancePath(filepath.Dir(np.certDir), job), []byte(uid+"\n"), 0o600); err != nil {
			return "", err
		}
	}
	if err := np.ca.WriteNodeBundle(path, id, np.nodeTTL, pki.JobSecret(np.jobKey, job, uid), pki.LocalHosts()...); err != nil {
		return "", fmt.Errorf("certificate of %s/%s: %v", job, node, err)
	}
	return path, nil
}

func listenHost(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	if i <= 0 {
		return ""
	}
	h := strings.Trim(addr[:i], "[]")
	if h == "0.0.0.0" || h == "::" {
		return ""
	}
	return h
}
