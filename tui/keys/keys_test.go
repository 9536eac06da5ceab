package keys

import (
	"strings"
	"testing"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

func msg(k string) tea.KeyMsg {
	switch k {
	case "enter":
		return tea.KeyMsg{Type: tea.KeyEnter}
	case "esc":
		return tea.KeyMsg{Type: tea.KeyEsc}
	case "ctrl+c":
		return tea.KeyMsg{Type: tea.KeyCtrlC}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func TestDefaults(t *testing.T) {
	m := Default()
	cases := []struct {
		b    key.Binding
		keys []string
	}{
		{m.Global.Up, []string{"k"}}, {m.Global.Down, []string{"j"}}, {m.Global.Quit, []string{"q", "ctrl+c"}},
		{m.Global.Help, []string{"?"}}, {m.Global.Command, []string{":"}}, {m.Global.Filter, []string{"/"}},
		{m.Global.Back, []string{"esc"}}, {m.Global.Freeze, []string{"f"}}, {m.Global.Faster, []string{"+"}},
		{m.Global.Slower, []string{"-"}}, {m.Jobs.Open, []string{"enter"}}, {m.Actions.Approve, []string{"a"}},
		{m.Actions.Reject, []string{"r"}}, {m.Job.Maximise, []string{"z"}},
	}
	for _, c := range cases {
		for _, k := range c.keys {
			if !key.Matches(msg(k), c.b) {
				t.Errorf("%q does not trigger %q", k, c.b.Help().Desc)
			}
		}
	}
}

// In each view, no key means two things (the global keys plus the view's own).
func TestNoConflicts(t *testing.T) {
	m := Default()
	global := m.Global.FullHelp()
	views := map[string][][]key.Binding{
		"jobs": m.Jobs.FullHelp(), "job": m.Job.FullHelp(), "actions": m.Actions.FullHelp(), "policies": m.Policies.FullHelp(),
	}
	for name, v := range views {
		seen := map[string]string{}
		for _, g := range append(append([][]key.Binding{}, global...), v...) {
			for _, b := range g {
				for _, k := range b.Keys() {
					if other, dup := seen[k]; dup && other != b.Help().Desc {
						t.Errorf("view %s: %q is both %q and %q", name, k, other, b.Help().Desc)
					}
					seen[k] = b.Help().Desc
				}
			}
		}
	}
}

func TestRebind(t *testing.T) {
	m := Default()
	if err := m.Rebind(map[string][]string{"approve": {"y", "ctrl+y"}, "sort": {"o"}, "quit": {"ctrl+q"}}); err != nil {
		t.Fatal(err)
	}
	if !key.Matches(msg("y"), m.Actions.Approve) || key.Matches(msg("a"), m.Actions.Approve) {
		t.Errorf("approve after rebind matches %v", m.Actions.Approve.Keys())
	}
	if m.Actions.Approve.Help().Key != "y/ctrl+y" || m.Actions.Approve.Help().Desc != "approve" {
		t.Errorf("approve help = %+v; want y/ctrl+y approve", m.Actions.Approve.Help())
	}
	if !key.Matches(msg("o"), m.Jobs.Sort) || !key.Matches(msg("o"), m.Job.Sort) {
		t.Errorf("sort is shared by the jobs and job views: both should move to o")
	}
	if key.Matches(msg("q"), m.Global.Quit) {
		t.Errorf("q still quits after quit was rebound")
	}
	bad := []struct {
		remap map[string][]string
		want  string
	}{
		{map[string][]string{"launch_missiles": {"x"}}, `unknown binding "launch_missiles"`},
		{map[string][]string{"approve": {}}, "has no keys"},
		{map[string][]string{"approve": {"ctrl+shift+meta"}}, "is not a key"},
		{map[string][]string{"approve": {"yes"}}, "is not a key"},
	}
	for _, b := range bad {
		m := Default()
		if err := m.Rebind(b.remap); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Rebind(%v) = %v; want %q", b.remap, err, b.want)
		}
	}
}

func TestValid(t *testing.T) {
	for k, want := range map[string]bool{
		"a": true, "?": true, "G": true, "enter": true, "shift+tab": true, "ctrl+k": true, "alt+x": true, "alt+enter": true,
		"f5": true, "f": true, "f21": false, "fx": false, "ctrl+": false, "ctrl+ab": false, "": false, "hello": false, " ": true,
	} {
		if got := Valid(k); got != want {
			t.Errorf("Valid(%q) = %v; want %v", k, got, want)
		}
	}
}

func TestReadOnly(t *testing.T) {
	m := Default()
	m.SetReadOnly(true)
	for _, b := range []key.Binding{m.Actions.Approve, m.Actions.Reject, m.Actions.Trigger, m.Jobs.Kill, m.Policies.Mode, m.Global.Launch, m.Job.Restart} {
		if b.Enabled() {
			t.Errorf("%q is enabled in read-only mode", b.Help().Desc)
		}
	}
	if !m.Global.Quit.Enabled() || !m.Global.Help.Enabled() {
		t.Errorf("read-only mode disabled navigation")
	}
	m.SetReadOnly(false)
	if !m.Actions.Approve.Enabled() {
		t.Errorf("approve stays disabled after read-only ends")
	}
}
