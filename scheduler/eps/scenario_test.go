package eps

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/scenario"
	"github.com/kelpie/kelpie/scheduler/gate"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// TestScenarios replays testdata/*.txt. Each file is a list of commands;
// the lines starting with "> " after a command are its expected output.
//
//	new capacity=WwSs [eps=on|off] [interval=D] [early=N] [early_for=D] [reject_hold=D]
//	job NAME size=WwSs [phase=running|starting] [min=WwSs] [max=WwSs] [blocks=N] [mode=M] [it=N] [throughput=X] [settle=D] [fixed=workers|servers]
//	submit NAME at=D size=WwSs [min=WwSs] [max=WwSs] [mode=M]
//	set NAME [phase=running|over] [it=N] [throughput=X]
//	plan at=D
//	apply|fail|reject|approve ID at=D
//	jobs
//
// The harness plays the job manager and the gate: a launched job starts
// (phase starting; `set` makes it run), an issued step becomes an action
// #N, dispatched in auto mode or proposed in approve mode, and its agents
// answer only when a line says so. A size like 3w2s is 3 workers and 2
// servers. Run `go test -run TestScenarios -rewrite` to regenerate.
func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata/*.txt", func() scenario.Step {
		h := &harness{}
		return h.run
	})
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	p      *Planner
	snap   Snapshot
	jobs   map[string]*Job
	order  []string
	nextID int
}

func parseSize(s string) (Size, error) {
	var z Size
	if _, err := fmt.Sscanf(s, "%dw%ds", &z.Workers, &z.Servers); err != nil {
		return z, fmt.Errorf("size %q: want like 3w2s", s)
	}
	return z, nil
}

func (h *harness) run(cmd string) ([]string, error) {
	f := strings.Fields(cmd)
	verb := f[0]
	kv := map[string]string{}
	var pos []string
	for _, a := range f[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	if verb != "new" && h.p == nil {
		return nil, fmt.Errorf("no planner yet: start with new")
	}
	dur := func(k string) (time.Duration, error) {
		if kv[k] == "" {
			return 0, nil
		}
		return time.ParseDuration(kv[k])
	}
	at, err := dur("at")
	if err != nil {
		return nil, err
	}
	now := epoch.Add(at)
	switch verb {
	case "new":
		c, err := parseSize(kv["capacity"])
		if err != nil {
			return nil, err
		}
		hold, err := dur("reject_hold")
		if err != nil {
			return nil, err
		}
		h.p = New(hold)
		h.jobs = map[string]*Job{}
		h.snap = Snapshot{Capacity: policy.Capacity{Workers: c.Workers, Servers: c.Servers}, On: kv["eps"] != "off",
			Interval: 5 * time.Second, EarlyIterations: 100}
		if h.snap.Interval, err = dur("interval"); err != nil || h.snap.Interval == 0 {
			h.snap.Interval = 5 * time.Second
		}
		if kv["early"] != "" {
			if h.snap.EarlyIterations, err = strconv.ParseInt(kv["early"], 10, 64); err != nil {
				return nil, err
			}
		}
		if h.snap.EarlyFeedback, err = dur("early_for"); err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("capacity %s eps=%v interval=%s early=%d", capacityString(h.snap.Capacity), h.snap.On,
			h.snap.Interval, h.snap.EarlyIterations)}, nil
	case "job", "submit":
		if len(pos) != 1 {
			return nil, fmt.Errorf("%s wants a job name", verb)
		}
		j := &Job{Name: pos[0], Phase: Running, Submitted: now, Mode: gate.ModeAuto, Settle: 5 * time.Second}
		if j.Spec, err = parseSize(kv["size"]); err != nil {
			return nil, err
		}
		least := Size{1, 1}
		if kv["min"] != "" {
			if least, err = parseSize(kv["min"]); err != nil {
				return nil, err
			}
		}
		j.MinWorkers, j.MinServers = least.Workers, least.Servers
		j.MaxWorkers, j.MaxServers = 64, 0
		j.Blocks = 8
		if kv["max"] != "" {
			m, err := parseSize(kv["max"])
			if err != nil {
				return nil, err
			}
			j.MaxWorkers, j.MaxServers = m.Workers, m.Servers
		}
		if kv["mode"] != "" {
			j.Mode = gate.Mode(kv["mode"])
		}
		switch kv["fixed"] {
		case "workers":
			j.FixedWorkers = true
		case "servers":
			j.FixedServers = true
		}
		if kv["settle"] != "" {
			if j.Settle, err = dur("settle"); err != nil {
				return nil, err
			}
		}
		if err := h.set(j, kv, now); err != nil {
			return nil, err
		}
		if verb == "job" {
			h.jobs[j.Name] = j
			h.order = append(h.order, j.Name)
			return h.describe(j.Name), nil
		}
		j.Phase = Queued
		sizes := Sizes(j.Spec, least, h.snap.Capacity, h.snap.On)
		if len(sizes) == 0 {
			return []string{fmt.Sprintf("refused: %s needs at least %s; the capacity is %s", j.Name, least, capacityString(h.snap.Capacity))}, nil
		}
		h.jobs[j.Name] = j
		h.order = append(h.order, j.Name)
		h.p.Enqueue(j.Name, sizes)
		var ss []string
		for _, z := range sizes {
			ss = append(ss, fmt.Sprintf("%dw%ds", z.Workers, z.Servers))
		}
		return []string{fmt.Sprintf("queued %s sizes %s", j.Name, strings.Join(ss, ","))}, nil
	case "set":
		if len(pos) != 1 || h.jobs[pos[0]] == nil {
			return nil, fmt.Errorf("set wants a known job")
		}
		if err := h.set(h.jobs[pos[0]], kv, now); err != nil {
			return nil, err
		}
		return h.describe(pos[0]), nil
	case "plan":
		return h.plan(now), nil
	case "apply", "fail", "reject", "approve":
		if len(pos) != 1 {
			return nil, fmt.Errorf("%s wants an action id", verb)
		}
		for _, j := range h.jobs {
			for i := range j.Actions {
				a := &j.Actions[i]
				if a.ID != pos[0] {
					continue
				}
				from := a.State
				switch verb {
				case "apply":
					a.State = gate.Applied
				case "fail":
					a.State = gate.Failed
				case "reject":
					a.State = gate.Rejected
				case "approve":
					a.State = gate.Dispatched
				}
				a.Updated = now
				return []string{fmt.Sprintf("%s %s %s: %s -> %s", j.Name, a.ID, a.Kind, from, a.State)}, nil
			}
		}
		return []string{"error: no action " + pos[0]}, nil
	case "jobs":
		var out []string
		for _, name := range h.order {
			out = append(out, h.describe(name)...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown command %q", verb)
}

func (h *harness) set(j *Job, kv map[string]string, now time.Time) error {
	switch kv["phase"] {
	case "":
	case "running":
		if j.Phase != Running {
			j.Started = now
		}
		j.Phase = Running
	case "starting":
		j.Phase = Starting
	case "over":
		j.Phase = Over
	default:
		return fmt.Errorf("phase %q", kv["phase"])
	}
	if kv["it"] != "" {
		n, err := strconv.ParseInt(kv["it"], 10, 64)
		if err != nil {
			return err
		}
		j.Iteration = n
	}
	if kv["throughput"] != "" {
		x, err := strconv.ParseFloat(kv["throughput"], 64)
		if err != nil {
			return err
		}
		j.Throughput = x
	}
	return nil
}

var phases = map[Phase]string{Queued: "queued", Starting: "starting", Running: "running", Over: "over"}

func (h *harness) describe(name string) []string {
	j := h.jobs[name]
	z := h.p.Slots(j)
	s := fmt.Sprintf("%s %s holds %dw%ds", j.Name, phases[j.Phase], z.Workers, z.Servers)
	var steps []string
	for _, st := range h.p.Steps(name) {
		steps = append(steps, string(st.Kind))
	}
	if len(steps) > 0 {
		s += " steps " + strings.Join(steps, ",")
	}
	return []string{s}
}

// plan runs a pass and plays the manager's part in it.
func (h *harness) plan(now time.Time) []string {
	h.snap.Now = now
	h.snap.Jobs = nil
	for _, name := range h.order {
		h.snap.Jobs = append(h.snap.Jobs, *h.jobs[name])
	}
	p := h.p.Plan(h.snap)
	var out []string
	for _, w := range p.Withdraw {
		j := h.jobs[w.Job]
		for i := range j.Actions {
			if j.Actions[i].ID == w.ID {
				j.Actions[i].State, j.Actions[i].Updated = gate.Expired, now
			}
		}
		out = append(out, fmt.Sprintf("withdraw %s %s", w.Job, w.ID))
	}
	for _, d := range p.Decisions {
		out = append(out, fmt.Sprintf("%s: %s: %s", d.Job, d.What, d.Reason))
	}
	for _, l := range p.Launch {
		h.jobs[l.Job].Phase = Starting
		out = append(out, fmt.Sprintf("launch %s at %dw%ds", l.Job, l.Size.Workers, l.Size.Servers))
	}
	for _, st := range p.Issue {
		j := h.jobs[st.Job]
		var err error
		if j.Phase != Running {
			err = fmt.Errorf("job is %s", phases[j.Phase])
		}
		id := ""
		if err == nil {
			h.nextID++
			id = fmt.Sprintf("#%d", h.nextID)
			state := gate.Dispatched
			if j.Mode == gate.ModeApprove {
				state = gate.Proposed
			}
			j.Actions = append(j.Actions, ActionInfo{ID: id, Kind: st.Kind, Policy: policy.NameEPS, State: state, Updated: now})
			out = append(out, fmt.Sprintf("issue %s %s %s (%s): %s", st.Job, id, st.Kind, state, st.Reason))
		}
		for _, d := range h.p.Issued(st, id, err, false) {
			out = append(out, fmt.Sprintf("%s: %s: %s", d.Job, d.What, d.Reason))
		}
	}
	if len(out) == 0 {
		out = append(out, "nothing")
	}
	if q := h.p.Queue(); len(q) > 0 && !slices.Equal(q, nil) {
		out = append(out, "queue "+strings.Join(q, ","))
	}
	return out
}
