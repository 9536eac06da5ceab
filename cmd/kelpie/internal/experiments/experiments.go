// Package experiments runs the papers' headline experiments as kelpie jobs
// (examples/experiments) on this machine, with time compressed, and writes
// a Markdown table that puts each paper's figure beside ours and says
// whether the target shape holds.
//
// It is a harness, not part of the control plane: it wires a whole local
// cluster (scheduler daemon, agents, servers, workers) the way `kelpie run`
// does, so it lives with the CLI that runs it (`kelpie experiments`), where
// docs/design.md lets wiring import every part, instead of inside scheduler/,
// whose packages must not reach the runtime's servers and workers.
package experiments

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kelpie/kelpie/cmd/kelpie/internal/racks"
	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/examples"
	"github.com/kelpie/kelpie/runtime/role"
	"github.com/kelpie/kelpie/scheduler/daemon"
	"github.com/kelpie/kelpie/scheduler/manager"
	"github.com/kelpie/kelpie/scheduler/policy"
)

// Experiment compares runs of example specs.
type Experiment struct {
	Name   string
	Group  string   // antdt, psld, rat, sync, elastic, eps: --only picks a group
	Paper  string   // the paper's figure
	Target string   // the shape we must show
	Specs  []string // files under examples/experiments
	// Judge computes our figure from the runs' results and whether the
	// target holds.
	Judge func(r map[string]*manager.Result) (ours string, ok bool)
	// Premise checks what must be true of the runs for the comparison to
	// mean what the paper's does (premise.go); a row whose premise fails
	// does not hold.
	Premise func(r map[string]*manager.Result) (text string, ok bool)
	// Values are the figures the table shows with their spread over the
	// rounds: each side's and the ratio the target is about (runs.go).
	Values valuesFn
	// Runner, when set, runs the experiment itself (on schedulers of its
	// own) instead of running Specs one after another; it returns the
	// results for Judge.
	Runner func(ctx context.Context, exe string, log *slog.Logger) (map[string]*manager.Result, error)
}

// Missing are the experiments not runnable yet, and why.
var Missing = [][3]string{}

// Options are what `kelpie experiments` passes to Run.
type Options struct {
	Only string // --only: a group, or part of a row's name
	Runs int    // --runs: rounds of every selected row (at least 1)
	// JSON, when set, receives the Report (every run of every row) as one
	// JSON object.
	JSON io.Writer
}

// Report is the whole of a `kelpie experiments` session: every row, with
// every run it made.
type Report struct {
	Date string      `json:"date"`
	Runs int         `json:"runs"`
	Rows []RowReport `json:"rows"`
}

// RowReport is one row: its verdict on the median runs, the spread of its
// figures, and each round's runs and verdict.
type RowReport struct {
	Name      string  `json:"name"`
	Group     string  `json:"group"`
	Paper     string  `json:"paper"`
	Target    string  `json:"target"`
	Premise   string  `json:"premise"`
	PremiseOK bool    `json:"premise_holds"`
	Ours      string  `json:"kelpie"` // the Judge's text on the median runs
	Holds     bool    `json:"holds"`
	Error     string  `json:"error,omitempty"`
	Values    []Value `json:"values"`
	Rounds    []Round `json:"rounds"`
}

// Round is one round of a row: its runs and what its Judge and premise
// said of them alone.
type Round struct {
	Ours      string                     `json:"kelpie"`
	Holds     bool                       `json:"holds"`
	Premise   string                     `json:"premise"`
	PremiseOK bool                       `json:"premise_holds"`
	Results   map[string]*manager.Result `json:"results"`
}

// Run runs the experiments opts.Only selects (Selected), opts.Runs rounds
// of them, and writes the Markdown table to w (and the Report to
// opts.JSON). In each round every selected row runs each of its specs once
// (a spec's run is shared by the rows of the round that use it), so the
// sides of a comparison alternate; each row is judged on the median of its
// specs' runs (medianSet). Specs with cluster.hosts netns run each on a
// network of their own (runNetns); the others share an embedded scheduler
// on 127.0.0.1.
func Run(ctx context.Context, exe string, opts Options, w io.Writer, log *slog.Logger) error {
	n := max(opts.Runs, 1)
	dir, err := os.MkdirTemp("", "kelpie-experiments-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d, err := daemon.Start(daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, Exe: exe,
		NodeLog: io.Discard, AllowAnonymousViewer: true, CheckData: role.CheckData})
	if err != nil {
		return err
	}
	defer d.Close(true)
	var results map[string]*manager.Result // this round's, by spec file
	runOne := func(file string, round int) (*manager.Result, error) {
		if r, ok := results[file]; ok {
			return r, nil
		}
		s, err := Spec(file)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		var r *manager.Result
		if s.Cluster.Hosts == spec.HostsNetns {
			r, err = runNetns(ctx, exe, s, log)
		} else {
			r, err = runLocal(ctx, d, s)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", file, err)
		}
		log.Info("ran", "round", round+1, "spec", file, "seconds", time.Since(start).Round(time.Millisecond), "jct", r.JCTSeconds,
			"train", r.TrainSeconds, "iterations", r.Iterations, "throughput", r.Throughput, "dprs", r.DPRs,
			"bytes_cross_region", r.BytesCrossRegion, "actions", len(r.Actions), "accuracy", r.Accuracy)
		logActions(log, file, r)
		results[file] = r
		return r, nil
	}
	var rows []Experiment
	for _, e := range All() {
		if Selected(e, opts.Only) {
			rows = append(rows, e)
		}
	}
	rounds := make([][]map[string]*manager.Result, len(rows)) // by row, then round
	errs := make([]error, len(rows))
	for round := range n {
		results = map[string]*manager.Result{}
		for ri, e := range rows {
			if errs[ri] != nil {
				continue
			}
			rs := map[string]*manager.Result{}
			if e.Runner != nil {
				rs, errs[ri] = e.Runner(ctx, exe, log)
			}
			for _, f := range e.Specs {
				if errs[ri] != nil {
					break
				}
				r, err := runOne(f, round)
				if err != nil {
					errs[ri] = fmt.Errorf("round %d: %v", round+1, err)
					break
				}
				rs[f] = r
			}
			rounds[ri] = append(rounds[ri], rs)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	rep := Report{Date: time.Now().UTC().Format(time.RFC3339), Runs: n}
	for ri, e := range rows {
		rep.Rows = append(rep.Rows, judgeRow(e, rounds[ri], errs[ri]))
	}
	failed := writeTable(w, rep)
	if opts.JSON != nil {
		enc := json.NewEncoder(opts.JSON)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d experiments missed their target", failed)
	}
	return nil
}

// judgeRow judges e on the median of its rounds' runs, and each round on
// its own.
func judgeRow(e Experiment, rounds []map[string]*manager.Result, runErr error) RowReport {
	row := RowReport{Name: e.Name, Group: e.Group, Paper: e.Paper, Target: e.Target}
	for _, rs := range rounds {
		ours, ok := e.Judge(rs)
		pt, pok := e.Premise(rs)
		row.Rounds = append(row.Rounds, Round{Ours: ours, Holds: ok && pok, Premise: pt, PremiseOK: pok, Results: rs})
	}
	if runErr != nil {
		row.Error = runErr.Error()
		return row
	}
	med := medianSet(rounds)
	row.Ours, row.Holds = e.Judge(med)
	row.Premise, row.PremiseOK = e.Premise(med)
	row.Holds = row.Holds && row.PremiseOK
	if e.Values != nil {
		row.Values = e.Values(rounds)
	}
	return row
}

// writeTable writes rep as the Markdown table and returns how many rows
// did not hold.
func writeTable(w io.Writer, rep Report) (failed int) {
	times := fmt.Sprintf("%d times, interleaved", rep.Runs)
	if rep.Runs == 1 {
		times = "once (no spread: `--runs 3` gives one)"
	}
	fmt.Fprintf(w, "# kelpie experiments\n\nRun on %s with `kelpie experiments --runs %d` (time compressed: seconds, not hours). "+
		"Each row ran its sides %s; **kelpie** is its judge on the median of each spec's runs, "+
		"**runs** each figure's median [min–max] over the rounds, **premise** what must hold for the comparison to mean what the paper's does.\n\n",
		rep.Date, rep.Runs, times)
	fmt.Fprintln(w, "| experiment | paper | target | premise | kelpie (median) | runs | holds |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, row := range rep.Rows {
		if row.Error != "" {
			fmt.Fprintf(w, "| %s | %s | %s | | failed: %s | | no |\n", row.Name, row.Paper, row.Target, row.Error)
			failed++
			continue
		}
		var vs []string
		for _, v := range row.Values {
			vs = append(vs, v.String())
		}
		mark := "yes"
		switch {
		case !row.PremiseOK:
			mark = "no: not reproduced here (its premise does not hold on this machine)"
		case !row.Holds:
			mark = "no: not reproduced here"
		}
		if !row.Holds {
			failed++
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s %s | %s | %s | %s |\n", row.Name, row.Paper, row.Target, checkMark(row.PremiseOK), row.Premise,
			row.Ours, strings.Join(vs, "; "), mark)
	}
	for _, m := range Missing {
		fmt.Fprintf(w, "| %s | %s | | | %s | | – |\n", m[0], m[1], m[2])
	}
	return failed
}

// checkMark is ✓ or ✗.
func checkMark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

// logActions logs each action of a run (when, what, its stall and the
// verdict on its outcome), so that a row's figures can be traced to what
// the policies and the script did.
func logActions(log *slog.Logger, file string, r *manager.Result) {
	for _, a := range r.Actions {
		args := []any{"spec", file, "id", a.ID, "time_s", a.TimeS, "kind", a.Kind, "node", a.Node, "policy", a.Policy,
			"state", a.State, "paused_s", a.PausedSeconds}
		if a.StallSeconds != nil {
			args = append(args, "stall_s", *a.StallSeconds)
		}
		if a.Realized != nil {
			args = append(args, "verdict", a.Realized.Verdict)
		}
		log.Info("action", args...)
	}
}

// Selected says whether --only picks e: everything for "", the rows of a
// group when only names one (antdt, psld, rat, sync, elastic, eps), else
// the rows whose name contains only.
func Selected(e Experiment, only string) bool {
	if only == "" {
		return true
	}
	for _, x := range All() {
		if x.Group == only {
			return e.Group == only
		}
	}
	return strings.Contains(e.Name, only)
}

// Spec reads and checks an experiment's spec file (examples/experiments).
func Spec(file string) (*spec.Spec, error) {
	src, err := fs.ReadFile(examples.Specs, "experiments/"+file)
	if err != nil {
		return nil, err
	}
	return spec.Parse(file, src)
}

// runLocal runs s on the shared scheduler d.
func runLocal(ctx context.Context, d *daemon.Daemon, s *spec.Spec) (*manager.Result, error) {
	name, err := d.Manager.SubmitSpec(s, "experiments")
	if err != nil {
		return nil, err
	}
	return d.Manager.Wait(ctx, name)
}

// runNetns runs s on a network of its own (cluster.hosts netns, as `kelpie
// run --hosts netns` does): namespaces per host, racks joined by shaped
// uplinks, a scheduler on the network's gateway, the spec's link
// stragglers carried out from the job's start; everything is taken down at
// the end.
func runNetns(ctx context.Context, exe string, s *spec.Spec, log *slog.Logger) (*manager.Result, error) {
	dir, err := os.MkdirTemp("", "kelpie-experiments-netns-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	netDir, dataDir := filepath.Join(dir, "network"), filepath.Join(dir, "scheduler")
	for _, p := range []string{netDir, dataDir} {
		if err := os.Mkdir(p, 0o700); err != nil {
			return nil, err
		}
	}
	network, err := racks.Up(ctx, s, netDir, exe)
	if err != nil {
		return nil, err
	}
	defer network.Close()
	d, err := daemon.Start(daemon.Config{GRPC: network.Addr() + ":0", HTTP: "127.0.0.1:0", DataDir: dataDir, Exe: network.Exe,
		NodeLog: io.Discard, AllowAnonymousViewer: true, CheckData: role.CheckData})
	if err != nil {
		return nil, err
	}
	defer d.Close(true)
	name, err := d.Manager.SubmitSpec(s, "experiments")
	if err != nil {
		return nil, err
	}
	shapeCtx, stopShaping := context.WithCancel(ctx)
	defer stopShaping()
	if cj, ok := d.Manager.Coordinator().Job(name); ok {
		go func() {
			select {
			case <-cj.Started():
				network.Shape(shapeCtx, s, cj.Start(), log)
			case <-shapeCtx.Done():
			}
		}()
	}
	return d.Manager.Wait(ctx, name)
}

// epsArrivals is the multi-job experiment's fixed arrival sequence: a long
// job asking for every worker slot, then short exploratory jobs (other
// learning rates) two seconds apart — in a feedback-driven exploration most
// jobs are short (EPS §2.1).
var epsArrivals = []struct {
	file string
	at   time.Duration
}{
	{"eps-long.yaml", 0},
	{"eps-short-1.yaml", 3 * time.Second},
	{"eps-short-2.yaml", 5 * time.Second},
	{"eps-short-3.yaml", 7 * time.Second},
	{"eps-short-4.yaml", 9 * time.Second},
}

// epsCapacity is the multi-job experiment's cluster.
var epsCapacity = policy.Capacity{Workers: 4, Servers: 4}

// runArrivals submits epsArrivals at their times to a fresh scheduler with
// epsCapacity, once with EPS off ("fifo/" results) and once on ("eps/").
func runArrivals(ctx context.Context, exe string, log *slog.Logger) (map[string]*manager.Result, error) {
	out := map[string]*manager.Result{}
	for _, mode := range []struct{ key, eps string }{{"fifo", manager.ModeOff}, {"eps", manager.ModeAuto}} {
		if err := func() error {
			dir, err := os.MkdirTemp("", "kelpie-eps-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			d, err := daemon.Start(daemon.Config{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", DataDir: dir, Exe: exe,
				NodeLog: io.Discard, AllowAnonymousViewer: true, Tick: 250 * time.Millisecond, Capacity: epsCapacity,
				EPS: mode.eps, EPSInterval: 2 * time.Second, CheckData: role.CheckData})
			if err != nil {
				return err
			}
			defer d.Close(true)
			start := time.Now()
			var names []string
			for _, a := range epsArrivals {
				select {
				case <-time.After(time.Until(start.Add(a.at))):
				case <-ctx.Done():
					return ctx.Err()
				}
				src, err := fs.ReadFile(examples.Specs, "experiments/"+a.file)
				if err != nil {
					return err
				}
				s, err := spec.Parse(a.file, src)
				if err != nil {
					return err
				}
				name, err := d.Manager.SubmitSpec(s, "experiments")
				if err != nil {
					return fmt.Errorf("%s: %v", a.file, err)
				}
				names = append(names, name)
			}
			for i, name := range names {
				r, err := d.Manager.Wait(ctx, name)
				if err != nil {
					return fmt.Errorf("%s %s: %v", mode.key, epsArrivals[i].file, err)
				}
				log.Info("ran", "mode", mode.key, "spec", epsArrivals[i].file, "jct", r.JCTSeconds, "actions", len(r.Actions),
					"accuracy", r.Accuracy)
				logActions(log, mode.key+"/"+epsArrivals[i].file, r)
				out[mode.key+"/"+epsArrivals[i].file] = r
			}
			return nil
		}(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
