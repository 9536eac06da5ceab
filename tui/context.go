package tui

import (
	"context"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/themes"
	"github.com/kelpie/kelpie/tui/forms"
	"github.com/kelpie/kelpie/tui/heatmap"
	"github.com/kelpie/kelpie/tui/keys"
)

// Backend is what the console needs from the scheduler: the console API client, or a fake in tests.
type Backend interface {
	Send(ctx context.Context, cmd *consolepb.Command) (*consolepb.CommandResult, error)
	Subscribe(ctx context.Context, jobs []string) error
	SetRate(ctx context.Context, hz float64) error
	// SetWindow trims the detail views to what the console shows (nil: whole views).
	SetWindow(ctx context.Context, w *consolepb.ViewWindow) error
}

// styles are built once per theme (hex colours are parsed when a style is made, not per cell).
type styles struct {
	base, muted, accent, title, ok, warn, straggler, action, selected, header, key, errText lipgloss.Style
	border, borderFocus                                                                     lipgloss.Style
	series                                                                                  []lipgloss.Style
}

func newStyles(t themes.Theme) styles {
	c := func(s string) lipgloss.Color { return lipgloss.Color(s) }
	s := styles{
		base:        lipgloss.NewStyle().Foreground(c(t.Fg)),
		muted:       lipgloss.NewStyle().Foreground(c(t.Muted)),
		accent:      lipgloss.NewStyle().Foreground(c(t.Accent)),
		title:       lipgloss.NewStyle().Foreground(c(t.Accent)).Bold(true),
		ok:          lipgloss.NewStyle().Foreground(c(t.OK)),
		warn:        lipgloss.NewStyle().Foreground(c(t.Warn)),
		straggler:   lipgloss.NewStyle().Foreground(c(t.Straggler)).Bold(true),
		action:      lipgloss.NewStyle().Foreground(c(t.Action)).Bold(true),
		selected:    lipgloss.NewStyle().Foreground(c(t.SelectFg)).Background(c(t.SelectBg)),
		header:      lipgloss.NewStyle().Foreground(c(t.Muted)).Bold(true),
		key:         lipgloss.NewStyle().Foreground(c(t.Accent)).Bold(true),
		errText:     lipgloss.NewStyle().Foreground(c(t.Straggler)),
		border:      lipgloss.NewStyle().Foreground(c(t.Muted)),
		borderFocus: lipgloss.NewStyle().Foreground(c(t.Accent)),
	}
	for _, col := range t.Series {
		s.series = append(s.series, lipgloss.NewStyle().Foreground(c(col)))
	}
	return s
}

// shared is the context every view reads: sizes, theme, keys, clock, data and the backend
// (docs/contributing.md, "The console": passed in, not global).
type shared struct {
	theme    themes.Theme
	st       styles
	palette  *heatmap.Palette
	themeVer int // bumps when the theme changes, invalidating cached renders
	keys     keys.Map
	now      func() time.Time
	readOnly bool // --readonly or a viewer token
	// policies are the policies the scheduler declared in its Welcome,
	// with their parameters (empty before it, or from an older one).
	policies forms.Catalog
	backend  Backend

	data    *store // what the views show (frozen while paused)
	dataVer uint64 // bumps whenever data changes

	job string // the job the job, actions and policies views are about ("" for all)

	replay *replay // the job view scrubbing a job's timeline (replay.go), or nil: live

	triage triageDoc // the stacks or probe the triage view shows (triage.go)

	modal modal     // a dialog or form that has the keyboard
	flash flashLine // the footer's message until the next key
}

type flashKind int

const (
	flashInfo flashKind = iota
	flashOK
	flashErr
)

type flashLine struct {
	text string
	kind flashKind
}

func (c *shared) setTheme(t themes.Theme) error {
	colors, err := themes.Palette(t.Heatmap)
	if err != nil {
		return err
	}
	c.theme = t
	c.st = newStyles(t)
	c.palette = heatmap.NewPalette(colors, lipgloss.ColorProfile())
	c.themeVer++
	return nil
}

// ascii reports whether the terminal shows no colour, so markers must carry the meaning.
func (c *shared) ascii() bool { return lipgloss.ColorProfile() == termenv.Ascii }

func (c *shared) setFlash(kind flashKind, text string) { c.flash = flashLine{text: text, kind: kind} }
