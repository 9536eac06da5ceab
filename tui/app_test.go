package tui

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/goccy/go-yaml"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// waitSent waits until the backend has received n commands.
func waitSent(t *testing.T, tm *teatest.TestModel, b *fakeBackend, n int, screen string) []*consolepb.Command {
	t.Helper()
	waitText(t, tm, screen)
	got := b.sent()
	if len(got) != n {
		t.Fatalf("backend got %d commands; want %d: %v", len(got), n, got)
	}
	return got
}

func TestApproveSendsDecision(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "A", "a")
	got := waitSent(t, tm, b, 1, "approve a-7 ADJUST_BS: done")
	want := &consolepb.Command{Kind: &consolepb.Command_Approve{Approve: &consolepb.DecideAction{Job: "mnist-mlp", ActionId: "a-7"}}}
	if !proto.Equal(got[0], want) {
		t.Errorf("approve sent %v; want %v", got[0], want)
	}
	press(tm, "j", "a") // a-5 is applied: refused locally
	waitText(t, tm, "a-5 is applied, not pending")
	if n := len(b.sent()); n != 1 {
		t.Errorf("approving an applied action sent a command")
	}
	tm.Quit()
	tm.WaitFinished(t)
}

// TestActionsKeyFocusesPending: `A` puts the cursor on the first pending
// action even when it was left on an applied one, so `A` `a` approves.
func TestActionsKeyFocusesPending(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "A", "j", "esc", "A", "a")
	got := waitSent(t, tm, b, 1, "approve a-7 ADJUST_BS: done")
	if got[0].GetApprove().GetActionId() != "a-7" {
		t.Errorf("A then a sent %v; want the approval of pending a-7", got[0])
	}
	tm.Quit()
	tm.WaitFinished(t)
}

func TestRejectRefusedByScheduler(t *testing.T) {
	b := &fakeBackend{answer: func(*consolepb.Command) *consolepb.CommandResult {
		return &consolepb.CommandResult{Error: "action a-7 expired", Code: 9}
	}}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "A", "r")
	got := waitSent(t, tm, b, 1, "reject a-7 ADJUST_BS: action a-7 expired")
	if got[0].GetReject().GetActionId() != "a-7" {
		t.Errorf("reject sent %v", got[0])
	}
	tm.Quit()
	tm.WaitFinished(t)
}

func TestRestartNeedsConfirmation(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "s", "g", "R") // sort by ratio, top row: the straggler
	waitText(t, tm, "Kill and restart worker-2 of mnist-mlp?")
	press(tm, "n")
	press(tm, "R", "y")
	got := waitSent(t, tm, b, 1, "restart worker-2: done")
	tr := got[0].GetTrigger()
	if tr.GetJob() != "mnist-mlp" || tr.GetAction().GetKind() != "KILL_RESTART" || tr.GetAction().GetTarget() != "worker-2" {
		t.Errorf("restart sent %v; want KILL_RESTART of worker-2", got[0])
	}
	tm.Quit()
	tm.WaitFinished(t)
}

func TestTriggerForms(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "A", "t", "4") // remove a server: the form offers server-1
	waitText(t, tm, "remove server · mnist-mlp")
	press(tm, "ctrl+u", "worker-9", "enter")
	waitText(t, tm, "unknown node worker-9")
	press(tm, "ctrl+u", "worker-1", "enter")
	waitText(t, tm, "worker-1 is a worker, not a server")
	press(tm, "ctrl+u", "server-1", "enter")
	waitText(t, tm, "Remove server server-1 of mnist-mlp?")
	press(tm, "y")
	got := waitSent(t, tm, b, 1, "remove server server-1: done")
	if a := got[0].GetTrigger().GetAction(); a.GetKind() != "REMOVE_SERVER" || a.GetTarget() != "server-1" {
		t.Errorf("remove server sent %v", got[0])
	}

	press(tm, "b", "ctrl+u", "worker-2=32 worker-0=96", "enter") // sums to 96+64+32+64 = 256
	got = waitSent(t, tm, b, 2, "adjust batch sizes: done")
	a := got[1].GetTrigger().GetAction()
	if a.GetKind() != "ADJUST_BS" || a.GetBatchSizes()["worker-2"] != 32 || a.GetBatchSizes()["worker-0"] != 96 || len(a.GetBatchSizes()) != 2 {
		t.Errorf("adjust batch sizes sent %v", got[1])
	}
	press(tm, "t", "3", "y")
	got = waitSent(t, tm, b, 3, "add a server: done")
	if got[2].GetTrigger().GetAction().GetKind() != "ADD_SERVER" {
		t.Errorf("add server sent %v", got[2])
	}

	press(tm, "t", "7") // backup workers: b must leave at least one gradient
	waitText(t, tm, "backup workers · mnist-mlp")
	press(tm, "ctrl+u", "4", "enter")
	waitText(t, tm, "a whole number from 0 to 3")
	press(tm, "ctrl+u", "1", "enter")
	got = waitSent(t, tm, b, 4, "backup workers: done")
	if a := got[3].GetTrigger().GetAction(); a.GetKind() != "BACKUP_WORKERS" || a.GetParams()["drop"] != 1 {
		t.Errorf("backup workers sent %v", got[3])
	}
	press(tm, "t", "8") // a worker's learning-rate scale
	waitText(t, tm, "learning-rate scale · mnist-mlp")
	press(tm, "ctrl+u", "worker-2", "tab", "ctrl+u", "20", "enter")
	waitText(t, tm, "a number in (0, 10]")
	press(tm, "ctrl+u", "0.25", "enter")
	got = waitSent(t, tm, b, 5, "scale worker-2's learning rate: done")
	if a := got[4].GetTrigger().GetAction(); a.GetKind() != "ADJUST_LR" || a.GetTarget() != "worker-2" || a.GetParams()["lr_scale"] != 0.25 {
		t.Errorf("learning-rate scale sent %v", got[4])
	}
	tm.Quit()
	tm.WaitFinished(t)
}

func TestReadOnlyHidesControls(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", true, 120, 40) // --readonly
	openJob(t, tm, mnistJob())
	press(tm, "A", "a", "r", "t", "b", "R")
	press(tm, "P", "m", "e")
	waitText(t, tm, "policies · mnist-mlp · read-only")
	press(tm, "L", ":", "launch", "enter") // L is hidden; :launch says why
	waitText(t, tm, "launching jobs is disabled")
	m := final2(t, tm)
	if len(b.sent()) != 0 || m.c.modal != nil {
		t.Errorf("read-only console sent %v / opened %T", b.sent(), m.c.modal)
	}
}

// final2 quits and returns the final model, without a golden file.
func final2(t *testing.T, tm *teatest.TestModel) *App {
	t.Helper()
	tm.Quit()
	return tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App)
}

func TestPolicies(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "P", "m") // antdt-nd: approve → off
	got := waitSent(t, tm, b, 1, "mnist-mlp antdt-nd → off: done")
	sp := got[0].GetSetPolicy()
	if sp.GetJob() != "mnist-mlp" || sp.GetPolicy() != "antdt-nd" || sp.GetMode() != "off" || len(sp.GetParams()) != 0 {
		t.Errorf("mode change sent %v", got[0])
	}
	press(tm, "e", "tab", "ctrl+u", "fast", "enter") // lambda: not a number
	waitText(t, tm, `lambda must be a number, not "fast"`)
	press(tm, "ctrl+u", "2", "enter")
	got = waitSent(t, tm, b, 2, "set antdt-nd on mnist-mlp: done")
	sp = got[1].GetSetPolicy()
	if sp.GetMode() != "approve" || sp.GetParams()["lambda"] != 2 || sp.GetParams()["window_transient_s"] != 5 {
		t.Errorf("edit sent %v; want mode approve, lambda 2, the windows unchanged", got[1])
	}
	tm.Quit()
	tm.WaitFinished(t)
}

// withMode returns mnistJob with antdt-nd in mode.
func withMode(mode string) *consolepb.JobView {
	j := mnistJob()
	j.Policies[0].Mode = mode
	return j
}

// TestPolicyModeNeverCyclesToAuto: the mode key toggles approve ↔ off from every mode and never
// sends auto; auto has its own key and a confirmation, and "no" sends nothing.
func TestPolicyModeNeverCyclesToAuto(t *testing.T) {
	for _, from := range []string{"approve", "off", "auto"} {
		t.Run(from, func(t *testing.T) {
			b := &fakeBackend{}
			tm := run(t, b, "operator", false, 120, 40)
			openJob(t, tm, withMode(from))
			press(tm, "P", "m")
			got := waitSent(t, tm, b, 1, "mnist-mlp antdt-nd → ")
			if m := got[0].GetSetPolicy().GetMode(); m == "auto" || m == from {
				t.Errorf("m on a policy in %s sent mode %q; want approve or off, never auto", from, m)
			}
			final2(t, tm)
		})
	}
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, withMode("off"))
	press(tm, "P", "!")
	waitText(t, tm, "Switch antdt-nd on mnist-mlp to auto?", "with nobody approving them")
	press(tm, "n", "m") // declined: the next command is the toggle's, nothing before it
	got := waitSent(t, tm, b, 1, "mnist-mlp antdt-nd → approve: done")
	if m := got[0].GetSetPolicy().GetMode(); m != "approve" {
		t.Errorf("after declining auto, m sent mode %q; want approve", m)
	}
	press(tm, "!")
	waitText(t, tm, "Switch antdt-nd on mnist-mlp to auto?")
	press(tm, "y")
	got = waitSent(t, tm, b, 2, "mnist-mlp antdt-nd → auto: done")
	if m := got[1].GetSetPolicy().GetMode(); m != "auto" {
		t.Errorf("confirmed auto sent mode %q", m)
	}
	final2(t, tm)
}

// TestPolicyFormAutoAsksFirst: typing auto in the edit form asks before sending; "no" goes back
// to the form, unsent.
func TestPolicyFormAutoAsksFirst(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, withMode("approve"))
	press(tm, "P", "e", "ctrl+u", "auto", "enter")
	waitText(t, tm, "Switch antdt-nd on mnist-mlp to auto?")
	press(tm, "n")
	waitText(t, tm, "auto (asks first)")
	if n := len(b.sent()); n != 0 {
		t.Fatalf("declining auto sent %d commands", n)
	}
	press(tm, "enter", "y")
	got := waitSent(t, tm, b, 1, "set antdt-nd on mnist-mlp: done")
	if m := got[0].GetSetPolicy().GetMode(); m != "auto" {
		t.Errorf("confirmed form sent mode %q", m)
	}
	final2(t, tm)
}

// TestPolicyParamRefused: a parameter outside the paper's bounds is refused by the scheduler and
// the refusal stays in the form, next to the value, until it is corrected.
func TestPolicyParamRefused(t *testing.T) {
	const refusal = "antdt-nd lambda must be > 1, not 0.2 (AntDT §VI-A 3"
	b := &fakeBackend{answer: func(c *consolepb.Command) *consolepb.CommandResult {
		if c.GetSetPolicy().GetParams()["lambda"] <= 1 {
			return &consolepb.CommandResult{Error: refusal + ": λ is the slowness ratio)", Code: 3}
		}
		return &consolepb.CommandResult{Ok: true}
	}}
	tm := run(t, b, "operator", false, 160, 48)
	openJob(t, tm, mnistJob())
	press(tm, "P", "e", "tab", "ctrl+u", "0.2", "enter")
	waitText(t, tm, refusal)
	press(tm, "ctrl+u", "1.6", "enter")
	got := waitSent(t, tm, b, 2, "set antdt-nd on mnist-mlp: done")
	if l := got[1].GetSetPolicy().GetParams()["lambda"]; l != 1.6 {
		t.Errorf("corrected edit sent lambda %v", l)
	}
	final2(t, tm)
}

func TestLaunch(t *testing.T) {
	b := &fakeBackend{answer: func(c *consolepb.Command) *consolepb.CommandResult {
		if strings.Contains(c.GetSubmitJob().GetSpecYaml(), "name: dup") {
			return &consolepb.CommandResult{Error: `job "dup" already exists`, Code: 6}
		}
		return &consolepb.CommandResult{Ok: true, Job: "cifar-x"}
	}}
	tm := run(t, b, "operator", false, 120, 40)
	press(tm, "L", "dup", "tab", "tab", "tab", "ctrl+u", "0", "enter")
	waitText(t, tm, `servers must be a positive integer, not "0"`)
	press(tm, "ctrl+u", "3", "enter")
	waitSent(t, tm, b, 1, `job "dup" already exists`) // the scheduler's refusal, inline
	press(tm, "up", "up", "up", "ctrl+u", "cifar-x", "enter")
	got := waitSent(t, tm, b, 2, "submit job cifar-x: done")
	spec := got[1].GetSubmitJob().GetSpecYaml()
	var parsed struct {
		Name    string `yaml:"name"`
		Cluster struct {
			Servers int `yaml:"servers"`
			Workers int `yaml:"workers"`
		} `yaml:"cluster"`
		Policies map[string]struct {
			Mode string `yaml:"mode"`
		} `yaml:"policies"`
	}
	if err := yaml.Unmarshal([]byte(spec), &parsed); err != nil {
		t.Fatalf("submitted spec does not parse: %v\n%s", err, spec)
	}
	if parsed.Name != "cifar-x" || parsed.Cluster.Servers != 3 || parsed.Cluster.Workers != 4 || parsed.Policies["antdt-nd"].Mode != "approve" {
		t.Errorf("submitted spec = %+v\n%s", parsed, spec)
	}
	m := final2(t, tm)
	if m.cur != viewJob || m.c.job != "cifar-x" {
		t.Errorf("after submitting, view %v job %q; want the new job's view", m.cur, m.c.job)
	}
}

func TestLaunchFromFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	spec := "name: from-file\nmodel: {kind: softmax}\n"
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	press(tm, "L")
	for i := 0; i < 9; i++ {
		press(tm, "tab")
	}
	press(tm, filepath.Join(dir, "missing.yaml"), "enter")
	waitText(t, tm, "cannot read")
	press(tm, "ctrl+u", path, "enter")
	got := waitSent(t, tm, b, 1, "submit job: done")
	if got[0].GetSubmitJob().GetSpecYaml() != spec {
		t.Errorf("submitted %q; want the file as is", got[0].GetSubmitJob().GetSpecYaml())
	}
	tm.Quit()
	tm.WaitFinished(t)
}

func TestQuitAsksFirst(t *testing.T) {
	tm := run(t, &fakeBackend{}, "operator", false, 80, 24)
	press(tm, "q")
	waitText(t, tm, "Quit the kelpie console?")
	press(tm, "n", "q", "y")
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
}

func TestSubscriptionFollowsViews(t *testing.T) {
	b := &fakeBackend{}
	tm := run(t, b, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "A", "P", "esc", "esc", "esc")
	waitText(t, tm, "jobs (3)")
	m := final2(t, tm)
	b.mu.Lock()
	defer b.mu.Unlock()
	// jobs (the client's first subscription) → mnist-mlp for job, actions, policies → jobs again.
	if len(b.scopes) != 2 || len(b.scopes[0]) != 1 || b.scopes[0][0] != "mnist-mlp" || b.scopes[1] != nil {
		t.Errorf("subscriptions %q; want [mnist-mlp] then every job", b.scopes)
	}
	if m.cur != viewJobs {
		t.Errorf("three esc from policies led to view %d; want the jobs view", m.cur)
	}
}

func TestCommandMode(t *testing.T) {
	m := testApp(&fakeBackend{}, false)
	m.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
	for _, msg := range feed("operator", nil, summaryJobs()) {
		m.Update(msg)
	}
	cases := []struct {
		line     string
		view     viewID
		job      string
		flash    string
		flashErr bool
	}{
		{"job mnist-mlp", viewJob, "mnist-mlp", "", false},
		{"events", viewEvents, "mnist-mlp", "", false},
		{"job nope", viewEvents, "mnist-mlp", `no job "nope"`, true},
		{"actions ctr-sparse", viewActions, "ctr-sparse", "", false},
		{"jobs", viewJobs, "ctr-sparse", "", false},
		{"theme light", viewJobs, "ctr-sparse", "theme light", false},
		{"theme neon", viewJobs, "ctr-sparse", `unknown theme "neon"`, true},
		{"palette viridis", viewJobs, "ctr-sparse", "heatmap palette viridis", false},
		{"frobnicate", viewJobs, "ctr-sparse", "unknown command :frobnicate", true},
		{"launch", viewLaunch, "ctr-sparse", "", false},
	}
	for _, c := range cases {
		m.c.flash = flashLine{}
		m.run(c.line)
		if m.cur != c.view || m.c.job != c.job {
			t.Errorf(":%s → view %d job %q; want view %d job %q", c.line, m.cur, m.c.job, c.view, c.job)
		}
		if !strings.Contains(m.c.flash.text, c.flash) || (m.c.flash.kind == flashErr) != c.flashErr {
			t.Errorf(":%s flashed %q (error %v); want %q (error %v)", c.line, m.c.flash.text, m.c.flash.kind == flashErr, c.flash, c.flashErr)
		}
	}
	if m.c.theme.Name != "light" || m.c.theme.Heatmap != "viridis" {
		t.Errorf("theme %s palette %s; want light with viridis", m.c.theme.Name, m.c.theme.Heatmap)
	}
	if cmd := m.run("q"); cmd == nil {
		t.Errorf(":q returned no command; want tea.Quit")
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Errorf(":q returned %T; want tea.QuitMsg", cmd())
	}

	completions := []struct{ in, want string }{
		{"ev", "events"}, {"job mn", "job mnist-"}, {"job mnist-s", "job mnist-softmax"}, {"th", "theme "}, {"zz", "zz"},
	}
	for _, c := range completions {
		if got := m.complete(c.in); got != c.want {
			t.Errorf("complete(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}

func TestFreezeAndRate(t *testing.T) {
	b := &fakeBackend{}
	m := testApp(b, false)
	m.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
	for _, msg := range feed("operator", nil, summaryJobs()) {
		m.Update(msg)
	}
	m.Update(applyTickMsg{})
	ver := m.c.dataVer
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("f")})
	m.Update(client.DeltaMsg{Delta: &consolepb.Delta{RemovedJobs: []string{"ctr-sparse"}}})
	m.Update(applyTickMsg{})
	if m.c.dataVer != ver || m.c.data.jobs["ctr-sparse"] == nil {
		t.Errorf("frozen console showed new data")
	}
	if !strings.Contains(m.View(), "FROZEN") {
		t.Errorf("frozen console does not say so")
	}
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("f")})
	if m.c.dataVer == ver || m.c.data.jobs["ctr-sparse"] != nil {
		t.Errorf("unfreezing did not show the data received meanwhile")
	}
	_, cmd := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("-")})
	cmd()
	if rates[m.rate] != 10 || len(b.rates) != 1 || b.rates[0] != 10 {
		t.Errorf("after -, rate %v and backend rates %v; want 10", rates[m.rate], b.rates)
	}
	for i := 0; i < 10; i++ {
		m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("-")})
	}
	if rates[m.rate] != 0.5 {
		t.Errorf("rate %v after many -; want the floor 0.5", rates[m.rate])
	}
}

// Data is shown at most at the refresh rate: the first change at once, the next at the tick.
func TestThrottle(t *testing.T) {
	m := testApp(&fakeBackend{}, false)
	m.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
	_, cmd := m.Update(client.SnapshotMsg{Snapshot: &consolepb.Snapshot{Jobs: summaryJobs()}})
	if m.c.dataVer != 1 || cmd == nil {
		t.Fatalf("first snapshot: data version %d, tick %v; want shown at once and a tick", m.c.dataVer, cmd != nil)
	}
	_, cmd = m.Update(client.DeltaMsg{Delta: &consolepb.Delta{RemovedJobs: []string{"ctr-sparse"}}})
	if m.c.dataVer != 1 || cmd != nil {
		t.Errorf("delta inside the interval was shown at once")
	}
	_, cmd = m.Update(applyTickMsg{})
	if m.c.dataVer != 2 || cmd == nil {
		t.Errorf("tick did not show the pending delta")
	}
	_, cmd = m.Update(applyTickMsg{})
	if cmd != nil {
		t.Errorf("a tick with nothing pending scheduled another: the console would never idle")
	}
	before := m.View()
	if m.dirty {
		t.Errorf("View left the model dirty")
	}
	m.Update(applyTickMsg{})
	if m.dirty || m.View() != before {
		t.Errorf("an idle tick invalidated the cached frame")
	}
}

func TestStore(t *testing.T) {
	s := newStore()
	s.applySnapshot(nil, &consolepb.Snapshot{Jobs: summaryJobs(), Events: events()})
	if len(s.jobs) != 3 || len(s.events) != 6 {
		t.Fatalf("snapshot of every job: %d jobs, %d events; want 3, 6", len(s.jobs), len(s.events))
	}
	full := mnistJob()
	s.applySnapshot([]string{"mnist-mlp"}, &consolepb.Snapshot{Jobs: []*consolepb.JobView{full}, Events: events()[:2]})
	if len(s.jobs) != 3 || s.jobs["mnist-mlp"] != full || len(s.events) != 6 {
		t.Errorf("scoped snapshot: %d jobs, mnist-mlp replaced %v, %d events; want 3, true, 6 (no duplicates)",
			len(s.jobs), s.jobs["mnist-mlp"] == full, len(s.events))
	}
	s.applySnapshot([]string{"ctr-sparse"}, &consolepb.Snapshot{})
	if _, ok := s.jobs["ctr-sparse"]; ok {
		t.Errorf("a scoped snapshot without its job kept it")
	}
	newer := &consolepb.Event{Time: ts(time.Second), Message: "newest"}
	s.applyDelta(&consolepb.Delta{Jobs: []*consolepb.JobView{{Name: "x"}}, RemovedJobs: []string{"mnist-softmax"}, Events: []*consolepb.Event{newer}})
	if s.jobs["x"] == nil || s.jobs["mnist-softmax"] != nil || s.events[0] != newer {
		t.Errorf("delta not applied: jobs %v, first event %v", s.names(), s.events[0])
	}
	var many []*consolepb.Event
	for i := 0; i < 2*maxEvents; i++ {
		many = append(many, &consolepb.Event{Time: ts(time.Duration(i) * time.Millisecond), Message: "e"})
	}
	s.applyDelta(&consolepb.Delta{Events: many})
	if len(s.events) != maxEvents || !s.events[0].GetTime().AsTime().Equal(t0.Add(time.Duration(2*maxEvents-1)*time.Millisecond)) {
		t.Errorf("events: %d kept, newest %v; want %d, the newest first", len(s.events), s.events[0].GetTime().AsTime(), maxEvents)
	}
}

func TestInput(t *testing.T) {
	in := newInput("worker-0=64")
	steps := []struct {
		k    tea.KeyMsg
		want string
		pos  int
	}{
		{tea.KeyMsg{Type: tea.KeyBackspace}, "worker-0=6", 10},
		{tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("80")}, "worker-0=680", 12},
		{tea.KeyMsg{Type: tea.KeyHome}, "worker-0=680", 0},
		{tea.KeyMsg{Type: tea.KeyDelete}, "orker-0=680", 0},
		{tea.KeyMsg{Type: tea.KeyRight}, "orker-0=680", 1},
		{tea.KeyMsg{Type: tea.KeyCtrlK}, "o", 1},
		{tea.KeyMsg{Type: tea.KeySpace}, "o ", 2},
		{tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("ab\x01")}, "o ab", 4},
		{tea.KeyMsg{Type: tea.KeyCtrlW}, "o ", 2},
		{tea.KeyMsg{Type: tea.KeyCtrlU}, "", 0},
	}
	for i, s := range steps {
		in.update(s.k)
		if in.text() != s.want || in.pos != s.pos {
			t.Errorf("step %d (%v): %q at %d; want %q at %d", i, s.k, in.text(), in.pos, s.want, s.pos)
		}
	}
}

func TestTableLayout(t *testing.T) {
	tb := table{cols: []column{
		{title: "A", width: 10}, {title: "B", width: 10, drop: 1}, {title: "C", width: 10, drop: 2}, {title: "D", width: 5, flex: true},
	}}
	cases := []struct {
		w    int
		want []int
	}{
		{100, []int{10, 10, 10, 65}}, // the flex column takes the rest
		{40, []int{10, 10, 10, 5}},   // exactly fits: marker 2 + 35 + 3 separators
		{39, []int{10, 10, -1, 15}},  // C drops first
		{20, []int{10, -1, -1, 7}},   // then B
		{5, []int{10, -1, -1, 5}},    // A never drops
	}
	for _, c := range cases {
		if got := tb.widths(c.w, nil); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("widths(%d) = %v; want %v", c.w, got, c.want)
		}
	}
	// Text wider than its column: the column grows into the room there is
	// before the flexible one does ("straggler-d…" at 160 columns).
	need := []int{14, 3, 12, 5}
	for _, c := range []struct {
		w    int
		want []int
	}{
		{100, []int{14, 10, 12, 59}}, // A and C grow to their text, D takes the rest
		{44, []int{14, 10, 10, 5}},   // room for A's 4 more cells, not C's
		{40, []int{10, 10, 10, 5}},   // no room: as before
	} {
		if got := tb.widths(c.w, need); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("widths(%d, %v) = %v; want %v", c.w, need, got, c.want)
		}
	}
}

func TestMouse(t *testing.T) {
	th := testApp(&fakeBackend{}, false)
	th.mouse = true
	th.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
	for _, msg := range feed("operator", nil, summaryJobs()) {
		th.Update(msg)
	}
	jv := th.views[viewJobs].(*jobsView)
	th.Update(tea.MouseMsg{Button: tea.MouseButtonWheelDown, Action: tea.MouseActionPress})
	if got := jv.selected(); got != "mnist-mlp" {
		t.Errorf("wheel down selected %q; want mnist-mlp", got)
	}
	// Screen line 0 is the header, 1 the box's top, 2 the table header, 3.. the rows.
	th.Update(tea.MouseMsg{Button: tea.MouseButtonLeft, Action: tea.MouseActionPress, X: 5, Y: 5})
	if got := jv.selected(); got != "mnist-softmax" {
		t.Errorf("click on the third row selected %q; want mnist-softmax", got)
	}
	th.mouse = false
	th.Update(tea.MouseMsg{Button: tea.MouseButtonWheelUp, Action: tea.MouseActionPress})
	if got := jv.selected(); got != "mnist-softmax" {
		t.Errorf("with the mouse off, the wheel still moved the cursor")
	}
}

// The job view draws each node's sparkline once per data version: a cursor move reuses it, new
// data redraws it.
func TestSparklineCache(t *testing.T) {
	m := testApp(&fakeBackend{}, false)
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	for _, msg := range feed("operator", nil, summaryJobs()) {
		m.Update(msg)
	}
	m.run("job mnist-mlp")
	m.Update(client.SnapshotMsg{Scope: []string{"mnist-mlp"}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{mnistJob()}}})
	m.Update(applyTickMsg{})
	jv := m.views[viewJob].(*jobView)
	trend := func() string {
		for _, l := range strings.Split(m.View(), "\n") {
			if i := strings.Index(l, "worker-0 "); i >= 0 && strings.Contains(l, " worker ") {
				return l
			}
		}
		t.Fatalf("no worker-0 row in\n%s", m.View())
		return ""
	}
	before := trend()
	if _, ok := jv.sparks["worker-0"]; !ok {
		t.Fatalf("worker-0's sparkline was not cached after a frame")
	}
	jv.sparks["worker-0"] = "cached" // a cursor move must reuse the cached string
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("j")})
	if got := trend(); !strings.Contains(got, "cached") {
		t.Errorf("after a cursor move, worker-0's row redrew its sparkline: %q", got)
	}
	j := mnistJob()
	for _, n := range j.Nodes {
		if n.Name == "worker-0" {
			for i := range n.Sparkline {
				n.Sparkline[i] = 0.61 // as slow as the straggler now
			}
		}
	}
	m.Update(client.SnapshotMsg{Scope: []string{"mnist-mlp"}, Snapshot: &consolepb.Snapshot{Jobs: []*consolepb.JobView{j}}})
	m.Update(applyTickMsg{})
	after := trend()
	if strings.Contains(after, "cached") || after == before || !strings.Contains(after, strings.Repeat("█", 16)) {
		t.Errorf("after new data, worker-0's sparkline = %q; want it redrawn full (was %q)", after, before)
	}
}

// TestLaunchErrorClearsOnEdit: the launch form's error about the name goes
// once the name is edited (it stayed after the name was corrected).
func TestLaunchErrorClearsOnEdit(t *testing.T) {
	tm := run(t, &fakeBackend{}, "operator", false, 120, 40)
	press(tm, "L", "enter")
	waitText(t, tm, "a name is required")
	press(tm, "m")
	m := final2(t, tm)
	f := m.views[viewLaunch].(*launchView).f
	if f.fields[0].err != "" || strings.Contains(m.View(), "a name is required") {
		t.Errorf("after the name was edited the form still says %q", f.fields[0].err)
	}
}

// TestEscGoesUpALevel: esc goes to the parent view — a job's policies and
// actions to the job, the job to the list — not back through the views
// visited.
func TestEscGoesUpALevel(t *testing.T) {
	tm := run(t, &fakeBackend{}, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "A", "P", "esc") // the actions were visited last: esc used to go back there
	m := final2(t, tm)
	if m.cur != viewJob {
		t.Errorf("esc from the policies (after the actions) went to view %d; want the job (%d)", m.cur, viewJob)
	}
	tm = run(t, &fakeBackend{}, "operator", false, 120, 40)
	openJob(t, tm, mnistJob())
	press(tm, "A", "P", "esc", "esc")
	if m := final2(t, tm); m.cur != viewJobs {
		t.Errorf("esc twice from a job's policies went to view %d; want the jobs list", m.cur)
	}
}

// TestJobHelpListsReplayKeys: the job view's help names the replay's
// step keys (←/→) and action jumps ([ ]).
func TestJobHelpListsReplayKeys(t *testing.T) {
	tm := run(t, &fakeBackend{}, "operator", false, 160, 48)
	openJob(t, tm, mnistJob())
	press(tm, "?")
	waitText(t, tm, "replay: step back", "replay: prev action")
	m := final2(t, tm)
	v := m.View()
	for _, k := range []string{"←/h", "→/l", "[", "]"} {
		if !strings.Contains(v, k) {
			t.Errorf("the job view's help lacks %q", k)
		}
	}
}

// TestQuitDialogSaysWhatQuittingDoes: the demo's console says quitting
// stops the demo; a console on a scheduler says the jobs keep running.
func TestQuitDialogSaysWhatQuittingDoes(t *testing.T) {
	a := testApp(&fakeBackend{}, false)
	a.quitNote = "This stops the demo: its scheduler and its jobs end with it."
	tm := teatest.NewTestModel(t, a, teatest.WithInitialTermSize(120, 40))
	for _, msg := range feed("operator", nil, summaryJobs()) {
		tm.Send(msg)
	}
	press(tm, "q")
	waitText(t, tm, "Quit the kelpie console?", "This stops the demo")
	final2(t, tm)
	if testApp(nil, false).quitNote != DefaultQuitNote {
		t.Error("a console without a note does not say the jobs keep running")
	}
}
