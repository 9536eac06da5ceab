package change

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kelpie/kelpie/core/blocks"
	"github.com/kelpie/kelpie/core/scenario"
)

// TestScenarios replays testdata/*.txt. Each file is a list of commands;
// the lines starting with "> " after a command are its expected output:
// the effects the change produced, then its phase.
//
//	new kind=reassign|add-server|remove-server|relaunch blocks=N servers=S active=0,1 [new=I] [remove=I] [assign=0,1,...] [join=D] [switch=D]
//	joined at=D
//	retabled at=D it=I workers=a,b,...
//	retable-failed at=D server=I err=rest of line
//	ack at=D node=N            (an agent: the worker switched)
//	nack at=D node=N err=rest of line   (an agent answered with an error)
//	lost at=D node=N
//	settled at=D paused=X
//	tick at=D
//
// The harness plays the job manager and the agents: it reports what the
// servers did (joined, retabled, settled), and agents answer only when a
// line says so; a worker with no ack line stays silent. The old table
// holds N equal blocks round-robin on the active servers. Run
// `go test -run TestScenarios -rewrite` to regenerate.
func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata/*.txt", func() scenario.Step {
		h := &harness{}
		return h.run
	})
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct{ c *Table }

func ints(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func (h *harness) run(cmd string) ([]string, error) {
	f := strings.Fields(cmd)
	kv := map[string]string{}
	for i := 1; i < len(f); i++ {
		k, v, _ := strings.Cut(f[i], "=")
		if k == "err" {
			kv[k] = strings.Join(append([]string{v}, f[i+1:]...), " ")
			break
		}
		kv[k] = v
	}
	dur := func(k string, def time.Duration) (time.Duration, error) {
		if kv[k] == "" {
			return def, nil
		}
		return time.ParseDuration(kv[k])
	}
	at, err := dur("at", 0)
	if err != nil {
		return nil, err
	}
	now := epoch.Add(at)
	if f[0] != "new" && h.c == nil {
		return nil, fmt.Errorf("no change yet: start with new")
	}
	switch f[0] {
	case "new":
		kinds := map[string]Kind{"reassign": Reassign, "add-server": AddServer, "remove-server": RemoveServer, "relaunch": Relaunch}
		p := Plan{Kind: kinds[kv["kind"]], New: -1, Remove: -1}
		if p.Kind == 0 {
			return nil, fmt.Errorf("kind %q", kv["kind"])
		}
		nb, err := strconv.Atoi(kv["blocks"])
		if err != nil {
			return nil, fmt.Errorf("blocks: %v", err)
		}
		if p.Servers, err = strconv.Atoi(kv["servers"]); err != nil {
			return nil, fmt.Errorf("servers: %v", err)
		}
		if p.Active, err = ints(kv["active"]); err != nil || len(p.Active) == 0 {
			return nil, fmt.Errorf("active: %v", err)
		}
		if p.Assignment, err = ints(kv["assign"]); err != nil {
			return nil, err
		}
		for _, k := range []string{"new", "remove"} {
			if kv[k] == "" {
				continue
			}
			n, err := strconv.Atoi(kv[k])
			if err != nil {
				return nil, err
			}
			if k == "new" {
				p.New = n
			} else {
				p.Remove = n
			}
		}
		if p.Limits.Join, err = dur("join", 90*time.Second); err != nil {
			return nil, err
		}
		if p.Limits.Switch, err = dur("switch", 5*time.Minute); err != nil {
			return nil, err
		}
		p.Old = blocks.Table{Version: 1, Servers: p.Servers}
		for i := range nb {
			p.Old.Blocks = append(p.Old.Blocks, blocks.Block{ID: i, Length: 1024, Cols: 1})
			p.Old.ServerOf = append(p.Old.ServerOf, p.Active[i%len(p.Active)])
		}
		for i := range p.Servers {
			p.Names = append(p.Names, fmt.Sprintf("server-%d", i))
		}
		h.c = NewTable(p, now)
		return append([]string{fmt.Sprintf("table v1 %v on %d server slots", p.Old.ServerOf, p.Servers)}, h.effects()...), nil
	case "joined":
		h.c.Joined(now)
	case "retabled":
		it, err := strconv.ParseInt(kv["it"], 10, 64)
		if err != nil {
			return nil, err
		}
		var ws []string
		if kv["workers"] != "" {
			ws = strings.Split(kv["workers"], ",")
		}
		h.c.Retabled(now, it, ws)
	case "retable-failed":
		n, err := strconv.Atoi(kv["server"])
		if err != nil {
			return nil, err
		}
		h.c.RetableFailed(now, n, errors.New(kv["err"]))
	case "ack":
		h.c.Switched(now, kv["node"])
	case "nack":
		h.c.WorkerFailed(now, kv["node"], kv["err"])
	case "lost":
		h.c.Lost(now, kv["node"])
	case "settled":
		p, err := strconv.ParseFloat(kv["paused"], 64)
		if err != nil {
			return nil, err
		}
		h.c.Settled(now, p)
	case "tick":
		h.c.Tick(now)
	default:
		return nil, fmt.Errorf("unknown command %q", f[0])
	}
	return h.effects(), nil
}

func (h *harness) effects() []string {
	var out []string
	for _, e := range h.c.Ready() {
		switch e.Type {
		case Retable:
			out = append(out, fmt.Sprintf("retable v%d %v removed=%v (%d of %d blocks move)", e.Table.Version, e.Table.ServerOf,
				e.Removed, h.c.Moved(), len(e.Table.Blocks)))
		case Commit:
			out = append(out, fmt.Sprintf("commit v%d", e.Table.Version))
		case Shutdown:
			out = append(out, fmt.Sprintf("shutdown %v", e.Removed))
		case Finish:
			if e.Err != nil {
				out = append(out, "finish failed: "+e.Err.Error())
			} else {
				out = append(out, "finish applied: "+e.Note)
			}
		}
	}
	s := "phase " + h.c.Phase().String()
	if w := h.c.Awaiting(); len(w) > 0 {
		s += " awaiting " + strings.Join(w, ",")
	}
	if d := h.c.Deadline(); !d.IsZero() {
		s += " until " + d.Sub(epoch).String()
	}
	return append(out, s)
}
