package gate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/scenario"
)

// TestScenarios replays testdata/*.txt. Each file is a list of commands;
// the lines starting with "> " after a command are its expected output:
// the effects the gate produced and what the harness did with them.
//
//	new [proposal_ttl=D] [ack_ttl=D] [workers=a,b,...] [sagas=KIND,...]
//	propose at=D id=ID policy=P kind=K [target=N] [key=KEY] [mode=auto|approve|off] [cooldown=D]
//	trigger at=D id=ID kind=K [target=N] [who=W]
//	decide at=D id=ID approve|reject [who=W] [note=rest of line]
//	ack at=D id=ID node=N [it=I] [err=rest of line]
//	finish at=D id=ID [it=I] [err=rest of line]
//	fail at=D id=ID [note=rest of line]
//	lost at=D node=N
//	tick at=D
//	withdraw at=D policy=P [keep=KEY,...] [note=rest of line]
//	actions
//
// The harness plays the manager's edge: on a Dispatch effect it reports the
// action dispatched and awaits the acks of its target, or of every worker
// when it has none; a kind named in sagas= is a change the caller
// carries out in steps and ends with finish. Agents ack only when a line says so: a missing ack is
// an agent that stays silent. Times are offsets from the scenario's start.
// Run `go test -run TestScenarios -rewrite` to regenerate the expectations
// after a deliberate change, then read the diff.
func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata/*.txt", func() scenario.Step {
		h := &harness{}
		return h.run
	})
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	g       *Gate
	workers []string
	sagas   map[string]bool // kinds the caller carries out in several steps, finished by finish
}

// args reads key=value fields; note= and err= take the rest of the line.
func args(cmd string) (string, map[string]string, []string) {
	f := strings.Fields(cmd)
	kv := map[string]string{}
	var flags []string
	for i := 1; i < len(f); i++ {
		k, v, ok := strings.Cut(f[i], "=")
		if !ok {
			flags = append(flags, f[i])
			continue
		}
		if k == "note" || k == "err" {
			kv[k] = strings.Join(append([]string{v}, f[i+1:]...), " ")
			break
		}
		kv[k] = v
	}
	return f[0], kv, flags
}

func (h *harness) run(cmd string) ([]string, error) {
	verb, kv, flags := args(cmd)
	if verb != "new" && h.g == nil {
		return nil, fmt.Errorf("no gate yet: start with new")
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
	var it int64
	if kv["it"] != "" {
		if _, err := fmt.Sscan(kv["it"], &it); err != nil {
			return nil, fmt.Errorf("it=%s: %v", kv["it"], err)
		}
	}
	var res error
	switch verb {
	case "new":
		pt, err := dur("proposal_ttl")
		if err != nil {
			return nil, err
		}
		at, err := dur("ack_ttl")
		if err != nil {
			return nil, err
		}
		h.g = New(Config{ProposalTTL: pt, AckTTL: at})
		if kv["workers"] != "" {
			h.workers = strings.Split(kv["workers"], ",")
		}
		h.sagas = map[string]bool{}
		if kv["sagas"] != "" {
			for _, k := range strings.Split(kv["sagas"], ",") {
				h.sagas[k] = true
			}
		}
		return []string{fmt.Sprintf("gate proposal_ttl=%s ack_ttl=%s workers=%s sagas=%s", pt, at, strings.Join(h.workers, ","), kv["sagas"])}, nil
	case "propose":
		cool, err := dur("cooldown")
		if err != nil {
			return nil, err
		}
		mode := Mode(kv["mode"])
		if mode == "" {
			mode = ModeApprove
		}
		res = h.g.Propose(now, Proposal{ID: kv["id"], Key: kv["key"], Policy: kv["policy"], Kind: kv["kind"],
			Target: kv["target"], Mode: mode, Cooldown: cool})
	case "trigger":
		who := kv["who"]
		if who == "" {
			who = "operator"
		}
		res = h.g.Trigger(now, kv["id"], kv["kind"], kv["target"], who)
	case "decide":
		who := kv["who"]
		if who == "" {
			who = "operator"
		}
		if len(flags) != 1 || (flags[0] != "approve" && flags[0] != "reject") {
			return nil, fmt.Errorf("decide wants approve or reject")
		}
		res = h.g.Decide(now, kv["id"], flags[0] == "approve", who, kv["note"])
	case "ack":
		var took bool
		took, res = h.g.Ack(now, kv["id"], kv["node"], it, kv["err"])
		if res == nil && !took {
			return append(h.effects(now), "ignored"), nil
		}
	case "finish":
		var failure error
		if kv["err"] != "" {
			failure = fmt.Errorf("%s", kv["err"])
		}
		res = h.g.Finish(now, kv["id"], "scheduler", it, "done", failure)
	case "fail":
		res = h.g.Fail(now, kv["id"], "scheduler", kv["note"])
	case "lost":
		h.g.NodeLost(now, kv["node"], "nothing heard")
	case "tick":
		h.g.Tick(now)
	case "withdraw":
		keep := map[string]bool{}
		if kv["keep"] != "" {
			for _, k := range strings.Split(kv["keep"], ",") {
				keep[k] = true
			}
		}
		h.g.Withdraw(now, kv["policy"], keep, kv["note"])
	case "actions":
		var out []string
		for _, a := range h.g.Actions() {
			s := fmt.Sprintf("%s %s %s key=%s %s", a.ID, a.Kind, orDash(a.Target), a.Key, a.State)
			if w := a.Awaiting(); len(w) > 0 {
				s += " awaiting=" + strings.Join(w, ",")
			}
			if a.AppliedIteration > 0 {
				s += fmt.Sprintf(" it=%d", a.AppliedIteration)
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unknown command %q", verb)
	}
	out := h.effects(now)
	if res != nil {
		out = append(out, "error: "+res.Error())
	}
	return out, nil
}

// effects prints the gate's effects and plays the manager's part in them.
func (h *harness) effects(now time.Time) []string {
	var out []string
	for len(out) < 1000 {
		ready := h.g.Ready()
		if len(ready) == 0 {
			break
		}
		for _, e := range ready {
			a := e.Action
			switch e.Type {
			case Record:
				s := fmt.Sprintf("record %s %s by %s", a.ID, e.Transition.State, e.Transition.By)
				if e.Transition.Note != "" {
					s += ": " + e.Transition.Note
				}
				out = append(out, s)
			case Dispatch:
				if h.sagas[a.Kind] {
					out = append(out, fmt.Sprintf("dispatch %s %s %s -> change started", a.ID, a.Kind, orDash(a.Target)))
					if err := h.g.Dispatched(now, a.ID, "scheduler", "changing"); err != nil {
						out = append(out, "error: "+err.Error())
					}
					continue
				}
				await := h.workers
				if a.Target != "" {
					await = []string{a.Target}
				}
				out = append(out, fmt.Sprintf("dispatch %s %s %s -> await %s", a.ID, a.Kind, orDash(a.Target), strings.Join(await, ",")))
				if err := h.g.Await(now, a.ID, await); err != nil {
					out = append(out, "error: "+err.Error())
				}
				if err := h.g.Dispatched(now, a.ID, "scheduler", "to "+strings.Join(await, ", ")); err != nil {
					out = append(out, "error: "+err.Error())
				}
			}
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
