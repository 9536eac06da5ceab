package tui

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// eventsView is the event and audit log, newest first.
type eventsView struct {
	c *shared
	size
	tbl     table
	filt    string
	rows    []*consolepb.Event
	builtAt uint64
	built   bool
}

func newEventsView(c *shared) *eventsView {
	v := &eventsView{c: c}
	v.tbl.cols = []column{
		{title: "AGO", width: 6, right: true},
		{title: "JOB", width: 12, drop: 2},
		{title: "KIND", width: 6},
		{title: "WHO", width: 10, drop: 3},
		{title: "NODE", width: 9, drop: 1},
		{title: "MESSAGE", width: 30, flex: true},
	}
	return v
}

func (v *eventsView) Title() string { return "events" }

// ShortHelp and FullHelp are empty: the events view has only the global keys.
func (v *eventsView) ShortHelp() []key.Binding  { return nil }
func (v *eventsView) FullHelp() [][]key.Binding { return nil }

func (v *eventsView) Filter() string     { return v.filt }
func (v *eventsView) SetFilter(f string) { v.filt = f; v.built = false }
func (v *eventsView) click(x, y int)     { v.refresh(); v.tbl.click(y - 1) }

func (v *eventsView) refresh() {
	if v.built && v.builtAt == v.c.dataVer {
		return
	}
	f := strings.ToLower(v.filt)
	v.rows = v.rows[:0]
	for _, e := range v.c.data.events {
		if f == "" || strings.Contains(strings.ToLower(e.GetJob()+" "+e.GetKind()+" "+e.GetWho()+" "+e.GetNode()+" "+e.GetMessage()), f) {
			v.rows = append(v.rows, e)
		}
	}
	v.tbl.set(len(v.rows), v.row)
	v.built, v.builtAt = true, v.c.dataVer
}

func (v *eventsView) row(i int) []cell {
	e := v.rows[i]
	var ms *lipgloss.Style
	kind := e.GetKind()
	msg := e.GetMessage()
	if kind == "audit" {
		if e.GetAllowed() {
			msg = "allowed: " + msg
		} else {
			msg, ms = "denied: "+msg, &v.c.st.straggler
		}
	}
	if kind == "action" {
		ms = &v.c.st.action
	}
	return []cell{
		{text: since(e.GetTime(), v.c.now()), style: &v.c.st.muted},
		{text: printable(e.GetJob())},
		{text: printable(kind), style: &v.c.st.muted},
		{text: printable(e.GetWho())},
		{text: printable(e.GetNode())},
		{text: printable(msg), style: ms},
	}
}

// printable drops control characters and bidirectional overrides from an
// event's text before it reaches the terminal. The scheduler already
// strips them from what clients send (scheduler/console's Clean); this
// keeps an older or another scheduler's event from driving the operator's
// terminal (a changed window title, a line drawn over another).
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069) {
			return -1
		}
		return r
	}, s)
}

// Init does nothing: the view draws from the shared context's data.
func (v *eventsView) Init() tea.Cmd { return nil }

// Update takes the keys the root model did not, and clicks (coordinates in the view's area).
func (v *eventsView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	return v, route(msg, v.key, v.click)
}

// View draws the view in the area SetSize gave it.
func (v *eventsView) View() string { return v.render(v.w, v.h) }

func (v *eventsView) key(msg tea.KeyMsg) tea.Cmd {
	v.refresh()
	v.tbl.navigate(msg, v.c.keys.Global)
	return nil
}

func (v *eventsView) render(w, h int) string {
	v.refresh()
	title := fmt.Sprintf("events and audit log (%d)", len(v.rows))
	if v.filt != "" {
		title += fmt.Sprintf(" · filter %q", v.filt)
	}
	if len(v.rows) == 0 {
		return v.c.box(title, v.tbl.render(&v.c.st, w-2, 1)+"\n\n  "+v.c.st.muted.Render("no events yet"), w, h, true)
	}
	return v.c.box(title, v.tbl.render(&v.c.st, w-2, h-2), w, h, true)
}
