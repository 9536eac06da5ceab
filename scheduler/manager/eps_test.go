package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kelpie/kelpie/core/spec"
	"github.com/kelpie/kelpie/scheduler/clock"
	"github.com/kelpie/kelpie/scheduler/policy"
	"github.com/kelpie/kelpie/scheduler/store"
)

// newCapacityManager is a manager that launches nothing (NoLaunch), with a
// capacity, a clock (nil: the real one), and a loop slow enough that the
// tests drive the passes.
func newCapacityManager(t *testing.T, c policy.Capacity, eps string, now func() time.Time) *Manager {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "kelpie.db"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Store: st, NoLaunch: true, Capacity: c, EPS: eps, Tick: time.Hour, LogDir: t.TempDir(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		st.Close()
	})
	return m
}

func epsSpec(t *testing.T, name string, workers, servers int, extra string) *spec.Spec {
	t.Helper()
	src := fmt.Sprintf("name: %s\nmodel: {kind: softmax}\ndata: {kind: mnist, seed: 1}\ntrain: {global_batch: 64}\n"+
		"cluster: {workers: %d, servers: %d%s}\n", name, workers, servers, extra)
	s, err := spec.Parse(name+".yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// states is every job's state and size, as the console shows them.
func states(m *Manager) string {
	var parts []string
	for _, v := range m.View(nil, 0) {
		parts = append(parts, fmt.Sprintf("%s=%s/%dw%ds", v.Name, v.State, v.Workers, v.Servers))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// waitStates waits (bounded) for the console's states.
func waitStates(t *testing.T, m *Manager, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for states(m) != want {
		if time.Now().After(deadline) {
			t.Fatalf("states %q; want %q", states(m), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestQueueFirstInFirstOut(t *testing.T) {
	m := newCapacityManager(t, policy.Capacity{Workers: 3, Servers: 2}, ModeOff, nil)
	for _, s := range []*spec.Spec{epsSpec(t, "a", 2, 1, ""), epsSpec(t, "b", 2, 1, ""), epsSpec(t, "c", 1, 1, "")} {
		if _, err := m.SubmitSpec(s, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// c would fit beside a, but b came first.
	waitStates(t, m, "a=starting/2w1s b=queued/2w1s c=queued/1w1s")
	if err := m.Kill("a", "test"); err != nil {
		t.Fatal(err)
	}
	waitStates(t, m, "a=killed/2w1s b=starting/2w1s c=starting/1w1s")

	// A killed queued job leaves the queue.
	if _, err := m.SubmitSpec(epsSpec(t, "d", 3, 1, ""), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SubmitSpec(epsSpec(t, "e", 1, 1, ""), "test"); err != nil {
		t.Fatal(err)
	}
	waitStates(t, m, "a=killed/2w1s b=starting/2w1s c=starting/1w1s d=queued/3w1s e=queued/1w1s")
	if err := m.Kill("d", "test"); err != nil {
		t.Fatal(err)
	}
	if err := m.Kill("b", "test"); err != nil {
		t.Fatal(err)
	}
	waitStates(t, m, "a=killed/2w1s b=killed/2w1s c=starting/1w1s d=killed/3w1s e=starting/1w1s")

	// Every decision is in the audit log with its reason. The view shows a
	// launch as soon as it is decided; its audit record is written just
	// after, so look again (bounded) until every record is there.
	wants := []string{
		"b queued: needs 2 workers and 1 server; 1 worker and 1 server free (first in, first out)",
		"b launch: b with 2 workers and 1 server after",
		"e launch: e with 1 worker and 1 server",
	}
	var got, missing []string
	for try := 0; try < 100; try++ {
		audit, err := m.cfg.Store.ListAudit(time.Time{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, missing = got[:0], missing[:0]
		for _, e := range audit {
			if e.Who == "scheduler" {
				got = append(got, e.Job+" "+e.What+": "+e.Reason)
			}
		}
		for _, want := range wants {
			found := false
			for _, g := range got {
				found = found || strings.HasPrefix(g, want)
			}
			if !found {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range missing {
		t.Errorf("audit log lacks %q; has:\n%s", want, strings.Join(got, "\n"))
	}
}

func TestQueueRefusesWhatNeverFits(t *testing.T) {
	m := newCapacityManager(t, policy.Capacity{Workers: 2, Servers: 2}, ModeOff, nil)
	_, err := m.SubmitSpec(epsSpec(t, "big", 3, 1, ""), "test")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "needs at least 3 workers and 1 server") {
		t.Errorf("SubmitSpec(3 workers into 2) = %v; want ResourceExhausted naming the need", err)
	}
	// With EPS it may start smaller, down to its minimum.
	m = newCapacityManager(t, policy.Capacity{Workers: 2, Servers: 2}, ModeAuto, nil)
	if _, err := m.SubmitSpec(epsSpec(t, "big", 3, 1, ""), "test"); err != nil {
		t.Fatalf("SubmitSpec(3 workers, min 1, into 2) with EPS: %v", err)
	}
	_, err = m.SubmitSpec(epsSpec(t, "huge", 4, 1, ", min_workers: 3"), "test")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "needs at least 3 workers") {
		t.Errorf("SubmitSpec(min 3 workers into 2) = %v; want ResourceExhausted", err)
	}
}

// TestLaunchSmaller: EPS launches a job at the largest size that fits when
// the running jobs cannot give anything up (here: still starting, so in
// their early-feedback phase), never below its minimum.
func TestLaunchSmaller(t *testing.T) {
	m := newCapacityManager(t, policy.Capacity{Workers: 6, Servers: 3}, ModeAuto, nil)
	if _, err := m.SubmitSpec(epsSpec(t, "a", 3, 1, ""), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SubmitSpec(epsSpec(t, "b", 4, 2, ", min_workers: 2"), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SubmitSpec(epsSpec(t, "c", 2, 1, ", min_workers: 2"), "test"); err != nil {
		t.Fatal(err)
	}
	waitStates(t, m, "a=starting/3w1s b=starting/3w2s c=queued/2w1s")
	v := m.View([]string{"b"}, 0)[0]
	if !strings.Contains(v.SpecYaml, "workers: 3\n") || len(v.Nodes) != 5 {
		t.Errorf("b launched with spec\n%s\nand %d nodes; want 3 workers and 2 servers", v.SpecYaml, len(v.Nodes))
	}
	var reason string
	for _, e := range m.jobEvents("b") {
		if e.Kind == "eps" && strings.HasPrefix(e.Message, "launch") {
			reason = e.Message
		}
	}
	for _, want := range []string{"4 workers and 2 servers cannot be made", "a protected in early feedback", "it fits"} {
		if !strings.Contains(reason, want) {
			t.Errorf("b's launch event %q lacks %q", reason, want)
		}
	}
	// A job killed while it runs frees its slots for the queue.
	if err := m.Kill("a", "test"); err != nil {
		t.Fatal(err)
	}
	waitStates(t, m, "a=killed/3w1s b=starting/3w2s c=starting/2w1s")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := m.Wait(ctx, "a"); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Wait(a) = %v; want killed", err)
	}
}

// TestGrowthProposalWithdrawn: in approve mode EPS's growth of a running job
// waits for an operator and holds its slots meanwhile; a job that arrives
// and needs them gets them: the proposal is withdrawn.
func TestGrowthProposalWithdrawn(t *testing.T) {
	clk := clock.NewFake(time.Now())
	m := newCapacityManager(t, policy.Capacity{Workers: 4, Servers: 2}, ModeApprove, clk.Now)
	if _, err := m.SubmitSpec(epsSpec(t, "a", 2, 1, ", block_bytes: 4096"), "test"); err != nil {
		t.Fatal(err)
	}
	// a runs past its early feedback (no agents here: set it by hand).
	j, _ := m.lookup("a")
	pauseActor(j)
	j.state = StateRunning
	for _, n := range j.nodes {
		if n.role == "worker" {
			n.prog.iteration = 500
		}
	}
	resumeActor(j)
	clk.Advance(DefaultEPSInterval) // the next running-job scheduling
	m.schedule()
	pauseActor(j)
	var proposed []string
	for _, a := range j.actions {
		proposed = append(proposed, a.Kind+" "+a.State+" "+a.Reason)
	}
	resumeActor(j)
	m.mu.Lock()
	used := m.usedLocked([]*jobState{j})
	m.mu.Unlock()
	want := "ADD_SERVER proposed 2 worker slots and 1 server slot free: add 1 worker and 1 server (EPS running-job scheduling"
	if len(proposed) != 1 || !strings.HasPrefix(proposed[0], want) {
		t.Fatalf("a's actions %q; want one %q…", proposed, want)
	}
	if used != (slots{Workers: 3, Servers: 2}) {
		t.Errorf("a holds %v; want 3 workers and 2 servers (its growth)", used)
	}
	if _, err := m.SubmitSpec(epsSpec(t, "b", 2, 1, ""), "test"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // views are rebuilt at most every ViewTTL
	waitStates(t, m, "a=running/2w1s b=starting/2w1s")
	m.mu.Lock()
	defer m.mu.Unlock()
	pauseActor(j)
	defer resumeActor(j)
	if a := j.actions[0]; a.State != ActExpired || !strings.Contains(a.History[len(a.History)-1].Note, "withdrawn") {
		t.Errorf("a's growth proposal is %s (%v); want withdrawn", a.State, a.History)
	}
	if len(j.actions) != 1 || len(m.eps.plan.Steps("a")) != 0 {
		t.Errorf("a has %d actions and %d steps left; want the rest of its growth dropped", len(j.actions), len(m.eps.plan.Steps("a")))
	}
}

// TestQueuedSurvivesRestart: a job queued when the scheduler stops is queued
// again by the next one on the same store, and launched once it fits.
func TestQueuedSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() (*Manager, *store.Store) {
		st, err := store.Open(filepath.Join(dir, "kelpie.db"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(Config{Store: st, NoLaunch: true, Capacity: policy.Capacity{Workers: 2, Servers: 2}, EPS: ModeOff,
			Tick: time.Hour, LogDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return m, st
	}
	m, st := open()
	for _, name := range []string{"a", "b", "c"} {
		if _, err := m.SubmitSpec(epsSpec(t, name, 2, 1, ""), "test"); err != nil {
			t.Fatal(err)
		}
	}
	waitStates(t, m, "a=starting/2w1s b=queued/2w1s c=queued/2w1s")
	m.Close()
	st.Close()

	// a had not started: the new scheduler fails it, which frees its slots
	// for b, the first in the queue.
	m, st = open()
	defer func() {
		m.Close()
		st.Close()
	}()
	waitStates(t, m, "a=failed/2w1s b=starting/2w1s c=queued/2w1s")
}

// TestShrinkRecomputesSizeDefaults: a job of 8 workers under drop (whose
// wait_for defaults to workers − 1 = 7) shrinks under EPS to the 4 workers
// there is room for: the shrunk spec waits for 3, not the 7 it could never
// have (every smaller size was skipped, silently, and the job refused with
// "needs at least 1 worker … capacity is 4 workers"). A size that cannot
// launch says why.
func TestShrinkRecomputesSizeDefaults(t *testing.T) {
	m := newCapacityManager(t, policy.Capacity{Workers: 4, Servers: 2}, ModeAuto, nil)
	for _, sync := range []string{"bsp", "drop"} {
		s := epsSpec(t, "shrink-"+sync, 8, 1, "}\nsync: {model: "+sync)
		if s.Sync.Drop.WaitFor != 7 {
			t.Fatalf("wait_for %d; want the default 7", s.Sync.Drop.WaitFor)
		}
		sizes, specs, refused := m.launchSizes(s)
		if len(refused) > 0 {
			t.Errorf("%s: sizes refused: %v", sync, refused)
		}
		z := slots{Workers: 4, Servers: 1}
		if len(sizes) == 0 || sizes[0] != z || specs[z] == nil {
			t.Fatalf("%s: sizes %v; want 4 workers and 1 server first", sync, sizes)
		}
		if got := specs[z].Sync.Drop.WaitFor; got != 3 {
			t.Errorf("%s: shrunk to 4 workers, wait_for %d; want 3 (the default at 4)", sync, got)
		}
		if _, err := m.SubmitSpec(s, "test"); err != nil {
			t.Errorf("%s: %v", sync, err)
		}
	}
	// An explicit wait_for that no smaller size can take: refused, saying
	// why at each size.
	m = newCapacityManager(t, policy.Capacity{Workers: 4, Servers: 2}, ModeAuto, nil)
	s := epsSpec(t, "strict", 8, 1, ", min_workers: 3}\nsync: {model: drop, drop: {wait_for: 6}")
	_, err := m.SubmitSpec(s, "test")
	t.Logf("refusal: %v", err)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "cannot launch: at 4 workers") ||
		!strings.Contains(err.Error(), "wait_for") {
		t.Errorf("SubmitSpec(wait_for 6 into 4 workers) = %v; want a refusal naming wait_for at each smaller size", err)
	}
}
