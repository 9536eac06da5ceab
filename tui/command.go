package tui

// The footer's prompt: command mode (:) with completion, and the current view's filter (/).

import (
	"fmt"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/kelpie/kelpie/themes"
)

// prompt is the footer's command (:) or filter (/) line.
type prompt struct {
	kind rune // ':' or '/'
	in   input
}

// promptKey edits the prompt line: enter runs a command or keeps a filter, esc drops it, tab
// completes a command.
func (m *App) promptKey(msg tea.KeyMsg) tea.Cmd {
	p := m.prompt
	switch msg.Type {
	case tea.KeyEsc:
		if p.kind == '/' {
			m.setFilter("")
		}
		m.prompt = nil
		return nil
	case tea.KeyEnter:
		m.prompt = nil
		if p.kind == ':' {
			return m.run(strings.TrimSpace(p.in.text()))
		}
		return nil
	case tea.KeyTab:
		if p.kind == ':' {
			p.in.set(m.complete(p.in.text()))
		}
		return nil
	case tea.KeyCtrlC:
		m.prompt = nil
		m.quitDialog = true
		return nil
	}
	p.in.update(msg)
	if p.kind == '/' {
		m.setFilter(p.in.text())
	}
	return nil
}

// setFilter sets the current view's filter (the / prompt opens only on views that have one).
func (m *App) setFilter(text string) {
	if f, ok := filterOf(m.views[m.cur]); ok {
		f.SetFilter(text)
	}
}

// commands are the command mode's verbs, for help and completion.
var commands = []string{"jobs", "job", "actions", "policies", "events", "launch", "theme", "palette", "help", "q"}

func (m *App) candidates() []string {
	var out []string
	for _, c := range commands {
		switch c {
		case "job", "actions", "policies":
			for _, n := range m.c.data.names() {
				out = append(out, c+" "+n)
			}
			out = append(out, c)
		case "theme":
			for _, n := range themes.Names() {
				out = append(out, "theme "+n)
			}
		case "palette":
			for _, n := range themes.PaletteNames() {
				out = append(out, "palette "+n)
			}
		default:
			out = append(out, c)
		}
	}
	return out
}

// complete extends text to the longest prefix shared by the commands it starts.
func (m *App) complete(text string) string {
	var match []string
	for _, c := range m.candidates() {
		if strings.HasPrefix(c, text) {
			match = append(match, c)
		}
	}
	if len(match) == 0 {
		return text
	}
	pre := match[0]
	for _, s := range match[1:] {
		for !strings.HasPrefix(s, pre) {
			pre = pre[:len(pre)-1]
		}
	}
	return pre
}

// run executes a command-mode line.
func (m *App) run(line string) tea.Cmd {
	verb, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	known := func(job string) bool { // before the full list arrives (--job), any name may be right
		_, ok := m.c.data.jobs[job]
		return ok || !m.c.data.complete
	}
	if id, d, ok := viewByCommand(verb); ok {
		if !d.ofJob {
			return m.goTo(id, "")
		}
		if arg != "" && !known(arg) {
			m.c.setFlash(flashErr, fmt.Sprintf("no job %q (have %s)", arg, strings.Join(m.c.data.names(), ", ")))
			return nil
		}
		if d.needsJob && arg == "" && m.c.job == "" {
			m.c.setFlash(flashErr, fmt.Sprintf(":%s needs a name, e.g. :%s mnist-mlp", verb, verb))
			return nil
		}
		return m.goTo(id, arg)
	}
	switch verb {
	case "":
		return nil
	case "q", "q!", "quit":
		return tea.Quit
	case "help":
		m.showHelp = true
		return nil
	case "theme":
		t, err := themes.Get(arg)
		if err == nil {
			t.Heatmap = m.c.theme.Heatmap
			if err = m.c.setTheme(t); err == nil {
				m.styleHelp()
				m.c.setFlash(flashOK, "theme "+t.Name)
				return nil
			}
		}
		m.c.setFlash(flashErr, err.Error())
		return nil
	case "palette":
		if _, err := themes.Palette(arg); err != nil {
			m.c.setFlash(flashErr, err.Error())
			return nil
		}
		t := m.c.theme
		t.Heatmap = arg
		_ = m.c.setTheme(t)
		m.c.setFlash(flashOK, "heatmap palette "+arg)
		return nil
	}
	m.c.setFlash(flashErr, fmt.Sprintf("unknown command :%s (try %s)", verb, strings.Join(commands, ", ")))
	return nil
}
