package tui

// The chrome around the current view: header (breadcrumbs, connection, rate), the connection
// banner, the footer (prompt, flash or short help), the help page, and dialogs drawn over the
// body. View caches the whole screen until a message changes something.

import (
	"fmt"
	"math"
	"strings"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/x/ansi"

	"github.com/kelpie/kelpie/scheduler/console/client"
	"github.com/kelpie/kelpie/themes"
)

// View draws the screen; it is cached until a message changes something.
func (m *App) View() string {
	if !m.dirty && m.cache != "" {
		return m.cache
	}
	m.dirty = false
	m.cache = m.render()
	return m.cache
}

// bodySize is the area between the header (and the banner, when there is one) and the footer.
func (m *App) bodySize() (w, h int) { return m.w, m.h - 2 - m.bannerLines() }

func (m *App) bannerLines() int {
	if m.banner() != "" {
		return 1
	}
	return 0
}

func (m *App) render() string {
	w, h := m.w, m.h
	if w <= 0 || h <= 0 {
		return ""
	}
	if w < 20 || h < 6 {
		return block("kelpie: the terminal is too small ("+fmt.Sprint(w)+"×"+fmt.Sprint(h)+")", w, h)
	}
	var b strings.Builder
	b.WriteString(m.header(w))
	b.WriteByte('\n')
	if s := m.banner(); s != "" {
		b.WriteString(fit(s, w))
		b.WriteByte('\n')
	}
	_, bh := m.bodySize()
	var body string
	switch {
	case m.showHelp:
		body = m.c.box("help", m.helpText(w-2), w, bh, true)
	default:
		v := m.views[m.cur]
		v.SetSize(w, bh) // the banner may have come or gone since the last resize
		body = block(v.View(), w, bh)
	}
	switch {
	case m.quitDialog:
		d := &confirmDialog{title: "quit", body: "Quit the kelpie console?\n" + m.quitNote}
		body = overlay(body, d.view(m.c, w, bh), w)
	case m.c.modal != nil:
		body = overlay(body, m.c.modal.view(m.c, w, bh), w)
	}
	b.WriteString(body)
	b.WriteByte('\n')
	b.WriteString(m.footer(w))
	return b.String()
}

// overlay draws the non-blank lines of top (a dialog placed in the full area) over base.
func overlay(base, top string, w int) string {
	bl := strings.Split(base, "\n")
	tl := strings.Split(top, "\n")
	for i, t := range tl {
		if i >= len(bl) || strings.TrimSpace(ansi.Strip(t)) == "" {
			continue
		}
		plain := ansi.Strip(t)
		left := len(plain) - len(strings.TrimLeft(plain, " "))
		right := len(strings.TrimRight(plain, " "))
		inner := ansi.Cut(t, left, ansi.StringWidth(plain)-(len(plain)-right))
		iw := ansi.StringWidth(inner)
		bl[i] = ansi.Truncate(bl[i], left, "") + inner + ansi.TruncateLeft(bl[i], left+iw, "")
		bl[i] = fit(bl[i], w)
	}
	return strings.Join(bl, "\n")
}

func (m *App) crumbs() string {
	parts := []string{"jobs"}
	switch d := viewDefs[m.cur]; {
	case d.aside:
		parts = []string{m.views[m.cur].Title()}
	case d.inJob:
		if m.c.job != "" {
			parts = append(parts, m.c.job)
		}
		parts = append(parts, m.views[m.cur].Title())
	case d.ofJob:
		parts = append(parts, m.c.job)
	}
	return strings.Join(parts, " › ")
}

func (m *App) header(w int) string {
	st := &m.c.st
	left := st.title.Render("kelpie") + st.muted.Render(" │ ") + st.base.Render(m.crumbs())
	var right []string
	switch m.status.State {
	case client.Connected:
		who := ""
		if m.welcome != nil && m.welcome.GetUser() != "" {
			who = m.welcome.GetUser() + "@"
		}
		right = append(right, st.ok.Render("● "+who+m.addr))
	case client.Connecting:
		right = append(right, st.warn.Render("◌ connecting"))
	case client.Disconnected:
		right = append(right, st.straggler.Render("○ disconnected"))
	case client.Unauthorized:
		right = append(right, st.straggler.Render("✗ unauthorized"))
	case client.Closed:
		right = append(right, st.muted.Render("closed"))
	}
	if m.welcome != nil && m.welcome.GetRole() != "" {
		right = append(right, st.muted.Render(m.welcome.GetRole()))
	}
	if m.c.readOnly {
		right = append(right, st.warn.Render("read-only"))
	}
	right = append(right, st.muted.Render(fmtHz(rates[m.rate])+" Hz"))
	if m.frozen {
		right = append(right, st.action.Render("❄ FROZEN"))
	}
	r := strings.Join(right, st.muted.Render(" │ "))
	rw := ansi.StringWidth(r)
	if rw+2 > w {
		return fit(r, w)
	}
	// The breadcrumbs give way first: the connection state must stay visible.
	return fit(left, w-rw-2) + " " + r + " "
}

// banner is a line about the connection when it is not up.
func (m *App) banner() string {
	st := &m.c.st
	s := m.status
	switch s.State {
	case client.Disconnected:
		left := s.RetryAt.Sub(m.c.now())
		secs := int(math.Ceil(left.Seconds()))
		if secs < 0 {
			secs = 0
		}
		why := ""
		if s.Err != nil {
			why = " (" + s.Err.Error() + ")"
		}
		return st.straggler.Render(fmt.Sprintf("⚠ disconnected from %s, retrying in %ds%s; showing the last state received", s.Addr, secs, why))
	case client.Unauthorized:
		why := ""
		if s.Err != nil {
			why = ": " + s.Err.Error()
		}
		return st.straggler.Render("✗ the scheduler refused the token" + why + "; restart with a valid --token")
	}
	return ""
}

func (m *App) footer(w int) string {
	st := &m.c.st
	if m.prompt != nil {
		m.prompt.in.width = max(w-2, 1)
		return st.accent.Render(string(m.prompt.kind)) + " " + m.prompt.in.view(st.selected, m.c.ascii())
	}
	if f := m.c.flash; f.text != "" {
		switch f.kind {
		case flashErr:
			return st.errText.Render(fit("✗ "+f.text, w))
		case flashOK:
			return st.ok.Render(fit("✓ "+f.text, w))
		default:
			return st.base.Render(fit(f.text, w))
		}
	}
	var km help.KeyMap
	switch {
	case m.quitDialog:
		km = m.c.keys.Confirm
	case m.c.modal != nil:
		km = m.c.modal.keyMap(m.c)
	default:
		km = m.views[m.cur]
	}
	bindings := append(append([]key.Binding(nil), km.ShortHelp()...), m.c.keys.Global.ShortHelp()...)
	m.helpModel.Width = w
	return fit(m.helpModel.ShortHelpView(bindings), w)
}

func (m *App) helpText(w int) string {
	st := &m.c.st
	var b strings.Builder
	section := func(name string, groups [][]key.Binding) {
		b.WriteString(st.title.Render(name) + "\n")
		var items []string
		for _, g := range groups {
			for _, k := range g {
				if !k.Enabled() {
					continue
				}
				items = append(items, st.key.Render(fmt.Sprintf("%-14s", k.Help().Key))+" "+st.muted.Render(k.Help().Desc))
			}
		}
		cols := max(w/36, 1)
		for i := 0; i < len(items); i += cols {
			end := min(i+cols, len(items))
			row := make([]string, 0, cols)
			for _, it := range items[i:end] {
				row = append(row, fit(it, 35))
			}
			b.WriteString(strings.Join(row, " ") + "\n")
		}
		b.WriteString("\n")
	}
	section(m.views[m.cur].Title(), m.views[m.cur].FullHelp())
	section("everywhere", m.c.keys.Global.FullHelp())
	b.WriteString(st.title.Render("command mode") + "\n")
	cmds := []string{":jobs", ":job NAME", ":actions [NAME]", ":policies [NAME]", ":events", ":launch",
		":theme " + strings.Join(themes.Names(), "|"), ":palette " + strings.Join(themes.PaletteNames(), "|"), ":help", ":q"}
	b.WriteString(st.muted.Render(strings.Join(cmds, "  ")) + "\n")
	b.WriteString(st.muted.Render("tab completes a command; esc closes this help"))
	return b.String()
}

// styleHelp styles the help bar from the theme.
func (m *App) styleHelp() {
	st := m.c.st
	m.helpModel.Styles.ShortKey = st.key
	m.helpModel.Styles.ShortDesc = st.muted
	m.helpModel.Styles.ShortSeparator = st.muted
	m.helpModel.Styles.FullKey = st.key
	m.helpModel.Styles.FullDesc = st.muted
	m.helpModel.Styles.FullSeparator = st.muted
	m.helpModel.Styles.Ellipsis = st.muted
}

func fmtHz(hz float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", hz), ".0") }
