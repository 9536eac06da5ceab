package console

import (
	"fmt"
	"sort"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// command is a Command read for authorization and the audit log.
type command struct {
	kind   string // the oneof field's name: submit_job, kill_job, approve, reject, trigger, set_policy, history
	verb   string // what a viewer may not do, e.g. "approve actions"
	job    string
	detail string
	// read says the command changes nothing: viewers may send it, and it
	// leaves no audit record.
	read bool
}

// describe names a command and checks it carries what its kind needs. The
// scheduler core judges everything else (that a job or action exists, that a
// policy name or mode is known).
func describe(c *consolepb.Command) (command, error) {
	if c == nil || c.GetKind() == nil {
		return command{kind: "unknown"}, errorf(codes.InvalidArgument,
			"console: command has no kind (submit_job, kill_job, approve, reject, trigger, set_policy, history, stacks or probe)")
	}
	var d command
	var missing []string
	need := func(field, val string) {
		if strings.TrimSpace(val) == "" {
			missing = append(missing, field)
		}
	}
	switch k := c.GetKind().(type) {
	case *consolepb.Command_SubmitJob:
		d = command{kind: "submit_job", verb: "submit jobs",
			detail: fmt.Sprintf("spec %d bytes", len(k.SubmitJob.GetSpecYaml()))}
		need("spec_yaml", k.SubmitJob.GetSpecYaml())
	case *consolepb.Command_KillJob:
		d = command{kind: "kill_job", verb: "kill jobs", job: k.KillJob.GetJob()}
		need("job", k.KillJob.GetJob())
	case *consolepb.Command_Approve:
		d = decide("approve", k.Approve)
		need("job", k.Approve.GetJob())
		need("action_id", k.Approve.GetActionId())
	case *consolepb.Command_Reject:
		d = decide("reject", k.Reject)
		need("job", k.Reject.GetJob())
		need("action_id", k.Reject.GetActionId())
	case *consolepb.Command_Trigger:
		a := k.Trigger.GetAction()
		d = command{kind: "trigger", verb: "trigger actions", job: k.Trigger.GetJob(),
			detail: fmt.Sprintf("kind=%s target=%s", a.GetKind(), a.GetTarget())}
		need("job", k.Trigger.GetJob())
		need("action.kind", a.GetKind())
	case *consolepb.Command_SetPolicy:
		p := k.SetPolicy
		d = command{kind: "set_policy", verb: "set policies", job: p.GetJob(),
			detail: fmt.Sprintf("policy=%s mode=%s params=%s", p.GetPolicy(), p.GetMode(), formatParams(p.GetParams()))}
		need("job", p.GetJob())
		need("policy", p.GetPolicy())
	case *consolepb.Command_History:
		h := k.History
		d = command{kind: "history", job: h.GetJob(), read: true, detail: fmt.Sprintf("from=%d limit=%d", h.GetFrom(), h.GetLimit())}
		need("job", h.GetJob())
		if h.GetFrom() < 0 || h.GetLimit() < 0 {
			return d, errorf(codes.InvalidArgument, "console: history: from %d and limit %d must not be negative", h.GetFrom(), h.GetLimit())
		}
	case *consolepb.Command_Stacks:
		// An operator action: it makes every role of the job dump its
		// stacks (and they may show what a viewer should not see).
		s := k.Stacks
		d = command{kind: "stacks", verb: "collect stacks", job: s.GetJob(), detail: fmt.Sprintf("timeout_s=%g", s.GetTimeoutS())}
		need("job", s.GetJob())
		if s.GetTimeoutS() < 0 {
			return d, errorf(codes.InvalidArgument, "console: stacks: timeout_s %g must not be negative", s.GetTimeoutS())
		}
	case *consolepb.Command_Probe:
		// An operator action: it makes every role of the job run a
		// compute kernel and round trips to the servers.
		p := k.Probe
		d = command{kind: "probe", verb: "probe nodes", job: p.GetJob(), detail: fmt.Sprintf("node=%s timeout_s=%g", p.GetNode(), p.GetTimeoutS())}
		need("job", p.GetJob())
		need("node", p.GetNode())
		if p.GetTimeoutS() < 0 {
			return d, errorf(codes.InvalidArgument, "console: probe: timeout_s %g must not be negative", p.GetTimeoutS())
		}
	default:
		return command{kind: "unknown"}, errorf(codes.InvalidArgument, "console: unknown command kind %T", k)
	}
	if len(missing) > 0 {
		return d, errorf(codes.InvalidArgument, "console: %s: missing %s", d.kind, strings.Join(missing, ", "))
	}
	return d, nil
}

func decide(kind string, a *consolepb.DecideAction) command {
	detail := "action_id=" + a.GetActionId()
	if a.GetReason() != "" {
		detail += fmt.Sprintf(" reason=%q", a.GetReason())
	}
	return command{kind: kind, verb: kind + " actions", job: a.GetJob(), detail: detail}
}

// formatParams prints a parameter map in a stable order.
func formatParams(p map[string]float64) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%g", k, p[k])
	}
	b.WriteByte('}')
	return b.String()
}

// outcome says in the audit log how an executed command ended.
func outcome(r *consolepb.CommandResult) string {
	if !r.GetOk() {
		return fmt.Sprintf("failed (%s): %s", codes.Code(r.GetCode()), r.GetError())
	}
	s := "ok"
	if r.GetActionId() != "" {
		s += " action_id=" + r.GetActionId()
	}
	if r.GetJob() != "" {
		s += " job=" + r.GetJob()
	}
	return s
}
