package tui

import (
	"github.com/charmbracelet/bubbles/help"
	tea "github.com/charmbracelet/bubbletea"
)

// component is one screen of the console, in the shape of soft-serve's common.Component
// (docs/contributing.md, "The console"): a tea.Model, bubbles' help.KeyMap (its own keys, for the footer and the
// ? page) and SetSize (the area the chrome leaves it). Components read the shared context
// (context.go: theme, keys, clock, data, backend) and cache what they draw.
//
// The root model (app.go) gives a component the messages it does not take itself: keys, and
// tea.MouseMsg clicks with coordinates relative to the component's top-left corner. Components
// are pointers: Update returns the component itself.
type component interface {
	tea.Model
	help.KeyMap
	SetSize(w, h int)
	// Title names the view in the breadcrumbs and the help page.
	Title() string
}

// filterer is a component with a / filter.
type filterer interface {
	Filter() string
	SetFilter(f string)
}

// capturer is a component that can hold the keyboard (a form: q and / are text then).
type capturer interface {
	Capturing() bool
}

// size is a component's area, set by SetSize.
type size struct{ w, h int }

// SetSize sets the area the component draws in.
func (s *size) SetSize(w, h int) { s.w, s.h = w, h }

// filterOf is c's filter, if it has one.
func filterOf(c component) (filterer, bool) {
	f, ok := c.(filterer)
	return f, ok
}

// capturing says whether c holds the keyboard.
func capturing(c component) bool {
	k, ok := c.(capturer)
	return ok && k.Capturing()
}

// Every view is a component.
var (
	_ component = (*jobsView)(nil)
	_ component = (*jobView)(nil)
	_ component = (*actionsView)(nil)
	_ component = (*policiesView)(nil)
	_ component = (*eventsView)(nil)
	_ component = (*launchView)(nil)
	_ component = (*triageView)(nil)
	_ filterer  = (*jobsView)(nil)
	_ filterer  = (*jobView)(nil)
	_ filterer  = (*actionsView)(nil)
	_ filterer  = (*policiesView)(nil)
	_ filterer  = (*eventsView)(nil)
	_ capturer  = (*launchView)(nil)
)

// route hands a view's message to its key handler, or a click (in the view's
// coordinates) to its click handler: every view's Update.
func route(msg tea.Msg, key func(tea.KeyMsg) tea.Cmd, click func(x, y int)) tea.Cmd {
	switch msg := msg.(type) {
	case tea.KeyMsg:
		return key(msg)
	case tea.MouseMsg:
		click(msg.X, msg.Y)
	}
	return nil
}
