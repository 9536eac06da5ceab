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
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kelpie/kelpie/cmd/kelpie/internal/racks"
	"github.com/kelpie/kelpie/examples"
	"github.com/kelpie/kelpie/runtime/role"
	"github.com/kelpie/kelpie/runtime/spec"
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
	// Runner, when set, runs the experiment itself (on schedulers of its
	// own) instead of running Specs one after another; it returns the
	// results for Judge.
	Runner func(ctx context.Context, exe string, log *slog.Logger) (map[string]*manager.Result, error)
}

// Missing are the experiments not runnable yet, and why.
var Missing = [][3]string{}

// Run runs the experiments --only selects (Selected) and writes the Markdown table to w. Specs with cluster.hosts
// netns run each on a network of their own (runNetns); the others share an
// embedded scheduler on 127.0.0.1. A spec's run is shared by the rows that
// use it.
func Run(ctx context.Context, exe string, only string, w io.Writer, log *slog.Logger) error {
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
	results := map[string]*manager.Result{}
	runOne := func(file string) (*manager.Result, error) {
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
		log.Info("ran", "spec", file, "seconds", time.Since(start).Round(time.Millisecond), "jct", r.JCTSeconds,
			"train", r.TrainSeconds, "iterations", r.Iterations, "throughput", r.Throughput, "dprs", r.DPRs,
			"bytes_cross_region", r.BytesCrossRegion, "actions", len(r.Actions), "accuracy", r.Accuracy)
		logActions(log, file, r)
		results[file] = r
		return r, nil
	}
	fmt.Fprintf(w, "# kelpie experiments\n\nRun on %s with `make experiments` (time compressed: seconds, not hours).\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintln(w, "| experiment | paper | target | premise | kelpie | holds |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	failed := 0
	for _, e := range All() {
		if !Selected(e, only) {
			continue
		}
		rs := map[string]*manager.Result{}
		var runErr error
		if e.Runner != nil {
			rs, runErr = e.Runner(ctx, exe, log)
		}
		for _, f := range e.Specs {
			if runErr != nil {
				break
			}
			r, err := runOne(f)
			if err != nil {
				runErr = err
				break
			}
			rs[f] = r
		}
		if runErr != nil {
			fmt.Fprintf(w, "| %s | %s | %s | | failed: %v | no |\n", e.Name, e.Paper, e.Target, runErr)
			failed++
			continue
		}
		ours, ok := e.Judge(rs)
		premise, pok := e.Premise(rs)
		premise = checkMark(pok) + " " + premise
		mark := "yes"
		if !pok {
			mark, failed = "no: not reproduced here (its premise does not hold on this machine)", failed+1
		} else if !ok {
			mark, failed = "no: not reproduced here", failed+1
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", e.Name, e.Paper, e.Target, premise, ours, mark)
	}
	for _, m := range Missing {
		fmt.Fprintf(w, "| %s | %s | | | %s | – |\n", m[0], m[1], m[2])
	}
	if failed > 0 {
		return fmt.Errorf("%d experiments missed their target", failed)
	}
	return nil
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
