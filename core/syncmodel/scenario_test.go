package syncmodel

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/core/scenario"
)

// TestScenarios replays testdata/*.txt. Each file is a list of commands;
// the lines starting with "> " after a command are its expected output.
//
//	new model=ssp s=3 pull=lazy workers=0,1,2 [c=X] [alpha=X] [dynamic] [nt=N]
//	push WORKER PROGRESS
//	pull ID WORKER PROGRESS [U]
//	workers 0,1,...
//	config model=... (as new, without workers)
//	cancel ID
//	stats
//
// Released pulls are shown as id(gap), the gap being the number of
// iterations whose gradients the pull still lacks when it is answered.
// Run `go test -run TestScenarios -rewrite` to regenerate the expectations
// after a deliberate change, then read the diff.
func TestScenarios(t *testing.T) {
	scenario.Run(t, "testdata/*.txt", func() scenario.Step {
		h := &harness{progress: map[PullID]int64{}}
		return h.run
	})
}

type harness struct {
	e        *Engine
	progress map[PullID]int64
}

func (h *harness) run(cmd string) ([]string, error) {
	f := strings.Fields(cmd)
	if f[0] != "new" && h.e == nil {
		return nil, fmt.Errorf("no engine yet: start with new")
	}
	switch f[0] {
	case "new":
		c, workers, err := parseConfig(f[1:])
		if err != nil {
			return nil, err
		}
		if err := c.Validate(); err != nil {
			return nil, err
		}
		h.e = New(c, workers)
		return []string{fmt.Sprintf("%v workers=%v vtrain=%d", c, h.e.Members(), h.e.VTrain())}, nil
	case "push":
		n, err := ints(f[1:], 2)
		if err != nil {
			return nil, err
		}
		r := h.e.Push(int(n[0]), n[1])
		if !r.Accept {
			return []string{fmt.Sprintf("reject %s vtrain=%d", r.Reject, h.e.VTrain())}, nil
		}
		s := fmt.Sprintf("accept vtrain=%d", h.e.VTrain())
		if r.Advanced > 0 {
			s += fmt.Sprintf(" advanced=%d", r.Advanced)
		}
		return []string{s + h.released(r.Release)}, nil
	case "pull":
		if len(f) != 4 && len(f) != 5 {
			return nil, fmt.Errorf("want pull ID WORKER PROGRESS [U]")
		}
		n, err := ints(f[1:4], 3)
		if err != nil {
			return nil, err
		}
		u := 0.0
		if len(f) == 5 {
			if u, err = strconv.ParseFloat(f[4], 64); err != nil {
				return nil, err
			}
		}
		id := PullID(n[0])
		h.progress[id] = n[2]
		if h.e.Pull(id, int(n[1]), n[2], u) {
			return []string{fmt.Sprintf("serve gap=%d vtrain=%d", h.gap(id), h.e.VTrain())}, nil
		}
		return []string{fmt.Sprintf("delay vtrain=%d pending=%d", h.e.VTrain(), h.e.Pending())}, nil
	case "workers":
		if len(f) != 2 {
			return nil, fmt.Errorf("want workers 0,1,...")
		}
		ws, err := intList(f[1])
		if err != nil {
			return nil, err
		}
		rel := h.e.SetWorkers(ws)
		return []string{fmt.Sprintf("workers=%v vtrain=%d", h.e.Members(), h.e.VTrain()) + h.released(rel)}, nil
	case "config":
		c, _, err := parseConfig(f[1:])
		if err != nil {
			return nil, err
		}
		if err := c.Validate(); err != nil {
			return nil, err
		}
		rel := h.e.SetConfig(c)
		return []string{fmt.Sprintf("%v vtrain=%d", c, h.e.VTrain()) + h.released(rel)}, nil
	case "cancel":
		n, err := ints(f[1:], 1)
		if err != nil {
			return nil, err
		}
		return []string{fmt.Sprintf("cancelled=%v pending=%d", h.e.Cancel(PullID(n[0])), h.e.Pending())}, nil
	case "stats":
		s := h.e.Stats()
		var hist []string
		for gap, n := range s.Staleness {
			if n > 0 {
				hist = append(hist, fmt.Sprintf("%d:%d", gap, n))
			}
		}
		return []string{fmt.Sprintf("dprs=%d delayed_iterations=%d dropped=%d duplicates=%d served=%d staleness={%s}",
			s.DPRs, s.DelayedIterations, s.Dropped, s.Duplicates, s.Served, strings.Join(hist, " "))}, nil
	}
	return nil, fmt.Errorf("unknown command %q", f[0])
}

func (h *harness) gap(id PullID) int64 { return max(h.progress[id]+1-h.e.VTrain(), 0) }

func (h *harness) released(ids []PullID) string {
	if len(ids) == 0 {
		return ""
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprintf("%d(%d)", id, h.gap(id))
	}
	return " release=" + strings.Join(parts, ",")
}

func parseConfig(args []string) (Config, []int, error) {
	var c Config
	var workers []int
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		var err error
		switch k {
		case "model":
			c.Model = Kind(v)
		case "s":
			c.Staleness, err = strconv.Atoi(v)
		case "pull":
			c.Pull = PullMode(v)
		case "c":
			c.PSSPC, err = strconv.ParseFloat(v, 64)
		case "alpha":
			c.PSSPAlpha, err = strconv.ParseFloat(v, 64)
		case "dynamic":
			c.PSSPDynamic = true
		case "nt":
			c.DropWaitFor, err = strconv.Atoi(v)
		case "workers":
			workers, err = intList(v)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return c, nil, err
		}
	}
	return c, workers, nil
}

func ints(args []string, n int) ([]int64, error) {
	if len(args) != n {
		return nil, fmt.Errorf("want %d numbers, got %q", n, args)
	}
	out := make([]int64, n)
	for i, a := range args {
		v, err := strconv.ParseInt(a, 10, 64)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func intList(s string) ([]int, error) {
	if s == "" || s == "-" {
		return nil, nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
