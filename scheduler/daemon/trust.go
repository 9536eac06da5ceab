package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/runtime/identity"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/console"
	"github.com/kelpie/kelpie/scheduler/pki"
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
	clk     clock.Clock // the time a forwarded refusal that carries none is audited at

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
	np.guard = identity.NewGuard(identity.SchedulerPolicy, identity.GuardOptions{Report: func(r identity.Refusal) {
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
func (np *nodePlane) nodeRefusal(job, node string, r *kelpiepb.NodeRefusal) {
	n := 1 + r.GetSuppressed()
	np.refused.WithLabelValues(r.GetCode(), r.GetMethod()).Add(float64(n))
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
	who, role := "no certificate", ""
	if r.GetCaller() != "" {
		who = r.GetCaller()
		if i := strings.LastIndex(who, " ("); i >= 0 {
			role = strings.TrimSuffix(who[i+2:], ")")
		}
	}
	detail := fmt.Sprintf("%s from %s at %s", r.GetMethod(), r.GetAddr(), node)
	if left := r.GetSuppressed() + dropped; left > 0 {
		detail += fmt.Sprintf(" (and %d refusals not recorded: rate limit)", left)
	}
	at := time.Unix(0, r.GetUnixNano())
	if r.GetUnixNano() <= 0 {
		at = np.clk.Now()
	}
	_ = np.audit(console.AuditEntry{Time: at, Who: who, Role: role, Command: "node-plane", Job: job,
		Detail: detail, Allowed: false, Reason: r.GetCode() + ": " + r.GetReason()})
}

// serverOptions are the node plane server's credentials and interceptors.
func (np *nodePlane) serverOptions() []grpc.ServerOption {
	if np == nil {
		return nil
	}
	return np.guard.ServerOptionsFor(np.creds)
}

// nodeCert writes the credentials file of one node of a job, readable by
// this user only, in the node's own directory, and returns its path.
func (np *nodePlane) nodeCert(job, node string) (string, error) {
	dir := filepath.Join(np.certDir, job, node)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "node.pem")
	if err := np.ca.WriteNodeBundle(path, identity.Node(job, node), np.nodeTTL, pki.JobSecret(np.jobKey, job), pki.LocalHosts()...); err != nil {
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
