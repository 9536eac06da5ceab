// Package keys holds the console's key bindings: one struct per view, each implementing
// help.KeyMap, with defaults that k9s and lazygit users already know (vim keys and arrows, `?`,
// `:`, `/`, esc, q) and remapping by name from the user's config (keys: {approve: [a, y]}).
package keys

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/charmbracelet/bubbles/key"
)

// Global keys work in every view (unless a form or prompt has the keyboard).
type Global struct {
	Up       key.Binding `key:"up"`
	Down     key.Binding `key:"down"`
	Left     key.Binding `key:"left"`
	Right    key.Binding `key:"right"`
	PageUp   key.Binding `key:"page_up"`
	PageDown key.Binding `key:"page_down"`
	Top      key.Binding `key:"top"`
	Bottom   key.Binding `key:"bottom"`
	Back     key.Binding `key:"back"`
	Quit     key.Binding `key:"quit"`
	Help     key.Binding `key:"help"`
	Command  key.Binding `key:"command"`
	Filter   key.Binding `key:"filter"`
	Freeze   key.Binding `key:"freeze"`
	Faster   key.Binding `key:"faster"`
	Slower   key.Binding `key:"slower"`
	Jobs     key.Binding `key:"jobs"`
	Actions  key.Binding `key:"actions"`
	Policies key.Binding `key:"policies"`
	Events   key.Binding `key:"events"`
	Launch   key.Binding `key:"launch"`
}

// Jobs is the jobs list.
type Jobs struct {
	Open    key.Binding `key:"open"`
	Sort    key.Binding `key:"sort"`
	Reverse key.Binding `key:"reverse"`
	Kill    key.Binding `key:"kill"`
}

// Job is one job's nodes, heatmap, charts and PS panel.
type Job struct {
	NextPanel key.Binding `key:"next_panel"`
	PrevPanel key.Binding `key:"prev_panel"`
	Maximise  key.Binding `key:"maximise"`
	Sort      key.Binding `key:"sort"`
	Restart   key.Binding `key:"restart"`
	// Replay pauses the job at the present and scrubs its recorded
	// timeline (←/→ a bucket, [ and ] to the actions); again: live.
	Replay     key.Binding `key:"replay"`
	PrevAction key.Binding `key:"prev_action"`
	NextAction key.Binding `key:"next_action"`
	// StepBack and StepForward scrub the replay a bucket at a time.
	StepBack    key.Binding `key:"step_back"`
	StepForward key.Binding `key:"step_forward"`
	// Stacks collects every role's stacks (kelpie job stacks), SavedStacks
	// shows the last collection saved with the job's history, Probe probes
	// the selected node (kelpie job probe): each opens the triage view.
	Stacks      key.Binding `key:"stacks"`
	SavedStacks key.Binding `key:"saved_stacks"`
	Probe       key.Binding `key:"probe"`
}

// Triage is the stacks and probe view: n/N move between the nodes'
// blocks, R restarts the node at the top.
type Triage struct {
	NextNode key.Binding `key:"next_node"`
	PrevNode key.Binding `key:"prev_node"`
	Restart  key.Binding `key:"restart"`
}

// Actions is the pending queue and the manual triggers.
type Actions struct {
	Approve key.Binding `key:"approve"`
	Reject  key.Binding `key:"reject"`
	Trigger key.Binding `key:"trigger"`
	Restart key.Binding `key:"restart"`
	Batch   key.Binding `key:"batch"`
}

// Policies is the per-job policy modes and parameters.
type Policies struct {
	// Mode toggles approve ↔ off; it never reaches auto, which has its
	// own key and a confirmation (an action in auto mode goes out at once).
	Mode key.Binding `key:"mode"`
	Auto key.Binding `key:"auto"`
	Edit key.Binding `key:"edit"`
}

// Form is any form: launch, batch sizes, policy parameters, node pickers.
type Form struct {
	Next   key.Binding `key:"next_field"`
	Prev   key.Binding `key:"prev_field"`
	Submit key.Binding `key:"submit"`
	Cancel key.Binding `key:"cancel"`
}

// Confirm is a yes/no dialog.
type Confirm struct {
	Yes key.Binding `key:"yes"`
	No  key.Binding `key:"no"`
}

// Map is every binding of the console.
type Map struct {
	Global   Global
	Jobs     Jobs
	Job      Job
	Actions  Actions
	Policies Policies
	Triage   Triage
	Form     Form
	Confirm  Confirm
}

func b(desc string, keys ...string) key.Binding {
	return key.NewBinding(key.WithKeys(keys...), key.WithHelp(helpKeys(keys), desc))
}

func helpKeys(keys []string) string {
	shown := make([]string, 0, len(keys))
	for _, k := range keys {
		switch k {
		case "up":
			k = "↑"
		case "down":
			k = "↓"
		case "left":
			k = "←"
		case "right":
			k = "→"
		case " ":
			k = "space"
		}
		shown = append(shown, k)
	}
	return strings.Join(shown, "/")
}

// Default returns the default bindings.
func Default() Map {
	return Map{
		Global: Global{
			Up:       b("up", "k", "up"),
			Down:     b("down", "j", "down"),
			Left:     b("left", "h", "left"),
			Right:    b("right", "l", "right"),
			PageUp:   b("page up", "pgup", "ctrl+b"),
			PageDown: b("page down", "pgdown", "ctrl+f"),
			Top:      b("top", "g", "home"),
			Bottom:   b("bottom", "G", "end"),
			Back:     b("back", "esc"),
			Quit:     b("quit", "q", "ctrl+c"),
			Help:     b("help", "?"),
			Command:  b("command", ":"),
			Filter:   b("filter", "/"),
			Freeze:   b("freeze", "f"),
			Faster:   b("faster", "+", "="),
			Slower:   b("slower", "-"),
			Jobs:     b("jobs", "J"),
			Actions:  b("actions", "A"),
			Policies: b("policies", "P"),
			Events:   b("events", "E"),
			Launch:   b("launch", "L"),
		},
		Jobs: Jobs{
			Open:    b("open", "enter"),
			Sort:    b("sort", "s"),
			Reverse: b("reverse", "S"),
			Kill:    b("kill job", "ctrl+k"),
		},
		Job: Job{
			NextPanel:   b("next panel", "tab"),
			PrevPanel:   b("prev panel", "shift+tab"),
			Maximise:    b("maximise", "z"),
			Sort:        b("sort", "s"),
			Restart:     b("restart node", "R"),
			Replay:      b("replay/live", "p"),
			PrevAction:  b("replay: prev action", "["),
			NextAction:  b("replay: next action", "]"),
			StepBack:    b("replay: step back", "left", "h"),
			StepForward: b("replay: step on", "right", "l"),
			Stacks:      b("collect stacks", "S"),
			SavedStacks: b("saved stacks", "W"),
			Probe:       b("probe node", "x"),
		},
		Triage: Triage{
			NextNode: b("next node", "n"),
			PrevNode: b("prev node", "N"),
			Restart:  b("restart node", "R"),
		},
		Actions: Actions{
			Approve: b("approve", "a"),
			Reject:  b("reject", "r"),
			Trigger: b("trigger", "t"),
			Restart: b("restart node", "R"),
			Batch:   b("batch sizes", "b"),
		},
		Policies: Policies{
			Mode: b("approve/off", "m"),
			Auto: b("auto mode…", "!"),
			Edit: b("edit params", "e", "enter"),
		},
		Form: Form{
			Next:   b("next field", "tab", "down"),
			Prev:   b("prev field", "shift+tab", "up"),
			Submit: b("submit", "enter"),
			Cancel: b("cancel", "esc"),
		},
		Confirm: Confirm{
			Yes: b("yes", "y", "enter"),
			No:  b("no", "n", "esc"),
		},
	}
}

// Named returns every binding by its config name; a name used by several views (sort, restart)
// maps to each of them.
func (m *Map) Named() map[string][]*key.Binding {
	out := map[string][]*key.Binding{}
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		view := v.Field(i)
		for j := 0; j < view.NumField(); j++ {
			name := view.Type().Field(j).Tag.Get("key")
			if bp, ok := view.Field(j).Addr().Interface().(*key.Binding); ok && name != "" {
				out[name] = append(out[name], bp)
			}
		}
	}
	return out
}

// Rebind replaces the keys of the named bindings. Unknown names, empty lists and key names
// Bubble Tea would never report are errors.
func (m *Map) Rebind(remap map[string][]string) error {
	named := m.Named()
	names := make([]string, 0, len(remap))
	for n := range remap {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		bs, ok := named[n]
		if !ok {
			return fmt.Errorf("keys: unknown binding %q (have %s)", n, strings.Join(sortedKeys(named), ", "))
		}
		ks := remap[n]
		if len(ks) == 0 {
			return fmt.Errorf("keys: binding %q has no keys", n)
		}
		for _, k := range ks {
			if !Valid(k) {
				return fmt.Errorf("keys: binding %q: %q is not a key (a character, or e.g. ctrl+x, alt+x, enter, tab, f5)", n, k)
			}
		}
		for _, bp := range bs {
			bp.SetKeys(ks...)
			bp.SetHelp(helpKeys(ks), bp.Help().Desc)
		}
	}
	return nil
}

func sortedKeys(m map[string][]*key.Binding) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var named = map[string]bool{
	"up": true, "down": true, "left": true, "right": true, "enter": true, "esc": true, "tab": true,
	"shift+tab": true, "backspace": true, "delete": true, "insert": true, "home": true, "end": true,
	"pgup": true, "pgdown": true, " ": true, "ctrl+home": true, "ctrl+end": true,
	"shift+up": true, "shift+down": true, "shift+left": true, "shift+right": true,
	"ctrl+up": true, "ctrl+down": true, "ctrl+left": true, "ctrl+right": true,
}

// Valid reports whether k is a key name as Bubble Tea reports it (KeyMsg.String()).
func Valid(k string) bool {
	if named[k] {
		return true
	}
	if rest, ok := strings.CutPrefix(k, "alt+"); ok {
		return Valid(rest)
	}
	if rest, ok := strings.CutPrefix(k, "ctrl+"); ok {
		return len(rest) == 1 && rest[0] >= 'a' && rest[0] <= 'z' || rest == "@" || rest == "\\" || rest == "]" || rest == "^" || rest == "_"
	}
	if rest, ok := strings.CutPrefix(k, "f"); ok && len(rest) > 0 {
		n := 0
		for _, c := range rest {
			if c < '0' || c > '9' {
				return len([]rune(k)) == 1
			}
			n = n*10 + int(c-'0')
		}
		return n >= 1 && n <= 20
	}
	return len([]rune(k)) == 1
}

// ShortHelp and FullHelp make each view's keys a help.KeyMap.

func (k Global) ShortHelp() []key.Binding {
	return []key.Binding{k.Help, k.Command, k.Filter, k.Back, k.Quit}
}

func (k Global) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom},
		{k.Help, k.Command, k.Filter, k.Back, k.Quit},
		{k.Freeze, k.Faster, k.Slower},
		{k.Jobs, k.Actions, k.Policies, k.Events, k.Launch},
	}
}

func (k Jobs) ShortHelp() []key.Binding  { return []key.Binding{k.Open, k.Sort, k.Reverse, k.Kill} }
func (k Jobs) FullHelp() [][]key.Binding { return [][]key.Binding{k.ShortHelp()} }
func (k Job) ShortHelp() []key.Binding {
	return []key.Binding{k.NextPanel, k.Maximise, k.Sort, k.Restart, k.Replay}
}
func (k Job) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.NextPanel, k.PrevPanel, k.Maximise, k.Sort, k.Restart}, {k.Replay, k.StepBack, k.StepForward, k.PrevAction, k.NextAction},
		{k.Stacks, k.SavedStacks, k.Probe}}
}
func (k Triage) ShortHelp() []key.Binding  { return []key.Binding{k.NextNode, k.PrevNode, k.Restart} }
func (k Triage) FullHelp() [][]key.Binding { return [][]key.Binding{k.ShortHelp()} }
func (k Actions) ShortHelp() []key.Binding {
	return []key.Binding{k.Approve, k.Reject, k.Trigger, k.Restart, k.Batch}
}
func (k Actions) FullHelp() [][]key.Binding  { return [][]key.Binding{k.ShortHelp()} }
func (k Policies) ShortHelp() []key.Binding  { return []key.Binding{k.Mode, k.Auto, k.Edit} }
func (k Policies) FullHelp() [][]key.Binding { return [][]key.Binding{k.ShortHelp()} }
func (k Form) ShortHelp() []key.Binding      { return []key.Binding{k.Next, k.Prev, k.Submit, k.Cancel} }
func (k Form) FullHelp() [][]key.Binding     { return [][]key.Binding{k.ShortHelp()} }
func (k Confirm) ShortHelp() []key.Binding   { return []key.Binding{k.Yes, k.No} }
func (k Confirm) FullHelp() [][]key.Binding  { return [][]key.Binding{k.ShortHelp()} }

// SetReadOnly disables (and so hides from help) every binding that changes the cluster.
func (m *Map) SetReadOnly(ro bool) {
	for _, bp := range []*key.Binding{&m.Jobs.Kill, &m.Job.Restart, &m.Job.Stacks, &m.Job.SavedStacks, &m.Job.Probe, &m.Triage.Restart, &m.Actions.Approve, &m.Actions.Reject,
		&m.Actions.Trigger, &m.Actions.Restart, &m.Actions.Batch, &m.Policies.Mode, &m.Policies.Auto, &m.Policies.Edit, &m.Global.Launch} {
		bp.SetEnabled(!ro)
	}
}
