package tui

import (
	"strings"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/kelpie/kelpie/tui/keys"
)

// fit pads or truncates s (which may hold escapes) to exactly w columns.
func fit(s string, w int) string {
	if w <= 0 {
		return ""
	}
	sw := ansi.StringWidth(s)
	if sw > w {
		s = ansi.Truncate(s, w, "…")
		sw = ansi.StringWidth(s)
	}
	if sw < w {
		s += strings.Repeat(" ", w-sw)
	}
	return s
}

// fitRight is fit, right-aligned.
func fitRight(s string, w int) string {
	if w <= 0 {
		return ""
	}
	sw := ansi.StringWidth(s)
	if sw > w {
		return ansi.Truncate(s, w, "…")
	}
	return strings.Repeat(" ", w-sw) + s
}

// wrap breaks plain text into lines of at most w columns at spaces.
func wrap(text string, w int) []string {
	if w <= 0 {
		return nil
	}
	var out []string
	line := ""
	for _, word := range strings.Fields(text) {
		for ansi.StringWidth(word) > w { // a word longer than the line is cut
			if line != "" {
				out = append(out, line)
				line = ""
			}
			cut := ansi.Truncate(word, w, "")
			out = append(out, cut)
			word = word[len(cut):]
		}
		switch {
		case line == "":
			line = word
		case ansi.StringWidth(line)+1+ansi.StringWidth(word) <= w:
			line += " " + word
		default:
			out = append(out, line)
			line = word
		}
	}
	if line != "" {
		out = append(out, line)
	}
	return out
}

// block fits text into exactly h lines of w columns.
func block(text string, w, h int) string {
	if w <= 0 || h <= 0 {
		return ""
	}
	lines := strings.Split(text, "\n")
	out := make([]string, h)
	for i := range out {
		if i < len(lines) {
			out[i] = fit(lines[i], w)
		} else {
			out[i] = strings.Repeat(" ", w)
		}
	}
	return strings.Join(out, "\n")
}

// box draws a rounded border with a title around body, in exactly w×h cells.
func (c *shared) box(title, body string, w, h int, focused bool) string {
	if w < 4 || h < 2 {
		return block(body, max(w, 0), max(h, 0))
	}
	bs := c.st.border
	ts := c.st.muted
	if focused {
		bs, ts = c.st.borderFocus, c.st.title
	}
	inner := w - 2
	title = ansi.Truncate(title, max(inner-4, 0), "…")
	var b strings.Builder
	tw := ansi.StringWidth(title)
	if tw > 0 {
		b.WriteString(bs.Render("╭─ "))
		b.WriteString(ts.Render(title))
		b.WriteString(bs.Render(" " + strings.Repeat("─", max(inner-tw-3, 0)) + "╮"))
	} else {
		b.WriteString(bs.Render("╭" + strings.Repeat("─", inner) + "╮"))
	}
	side := bs.Render("│")
	lines := strings.Split(body, "\n")
	for i := 0; i < h-2; i++ {
		b.WriteByte('\n')
		b.WriteString(side)
		if i < len(lines) {
			b.WriteString(fit(lines[i], inner))
		} else {
			b.WriteString(strings.Repeat(" ", inner))
		}
		b.WriteString(side)
	}
	b.WriteByte('\n')
	b.WriteString(bs.Render("╰" + strings.Repeat("─", inner) + "╯"))
	return b.String()
}

// hjoin puts blocks of equal height side by side.
func hjoin(parts ...string) string { return lipgloss.JoinHorizontal(lipgloss.Top, parts...) }

// ---------------------------------------------------------------- table

type column struct {
	title string
	width int  // preferred width
	flex  bool // takes the width left over
	right bool // right-aligned
	drop  int  // when the terminal is narrow, higher drops first; 0 never drops
}

type cell struct {
	text  string
	style *lipgloss.Style // nil: the base style
	raw   bool            // already rendered at the column's width (sparklines)
}

// table draws rows lazily: only the rows on screen are built (a job can have 1,000 nodes).
type table struct {
	cols   []column
	n      int
	row    func(i int) []cell
	cursor int
	offset int
	height int // rows on screen, set by render
}

func (t *table) set(n int, row func(i int) []cell) {
	t.n, t.row = n, row
	t.clamp()
}

func (t *table) clamp() {
	if t.cursor >= t.n {
		t.cursor = t.n - 1
	}
	if t.cursor < 0 {
		t.cursor = 0
	}
	if t.height > 0 {
		if t.cursor < t.offset {
			t.offset = t.cursor
		}
		if t.cursor >= t.offset+t.height {
			t.offset = t.cursor - t.height + 1
		}
	}
	if t.offset > max(t.n-t.height, 0) {
		t.offset = max(t.n-t.height, 0)
	}
	if t.offset < 0 {
		t.offset = 0
	}
}

// navigate moves the cursor for the global navigation keys; it reports whether the key was one.
func (t *table) navigate(msg tea.KeyMsg, g keys.Global) bool {
	page := max(t.height-1, 1)
	switch {
	case key.Matches(msg, g.Up):
		t.cursor--
	case key.Matches(msg, g.Down):
		t.cursor++
	case key.Matches(msg, g.PageUp):
		t.cursor -= page
	case key.Matches(msg, g.PageDown):
		t.cursor += page
	case key.Matches(msg, g.Top):
		t.cursor = 0
	case key.Matches(msg, g.Bottom):
		t.cursor = t.n - 1
	default:
		return false
	}
	t.clamp()
	return true
}

// click selects the row drawn at line y of the table (0 is the header).
func (t *table) click(y int) bool {
	if y < 1 || t.offset+y-1 >= t.n {
		return false
	}
	t.cursor = t.offset + y - 1
	t.clamp()
	return true
}

// widths lays the columns out in w columns: -1 for a dropped column.
// needs is, per column, the widest text among the rows on screen (raw
// cells excluded: they are drawn at whatever width they get).
func (t *table) needs(h int) []int {
	need := make([]int, len(t.cols))
	for line := 0; line < h-1 && t.offset+line < t.n; line++ {
		for ci, cl := range t.row(t.offset + line) {
			if ci < len(need) && !cl.raw {
				need[ci] = max(need[ci], lipgloss.Width(cl.text))
			}
		}
	}
	return need
}

// widths lays the columns out in w cells: each at its preferred width,
// dropping columns (highest drop first) while they do not fit; room left
// goes first to fixed columns whose text on screen is wider than their
// preferred width (a name is not cut while there is room for it), then to
// the flexible column.
func (t *table) widths(w int, need []int) []int {
	ws := make([]int, len(t.cols))
	on := make([]bool, len(t.cols))
	total := 2 // the cursor marker
	count := 0
	for i, c := range t.cols {
		ws[i], on[i] = c.width, true
		total += c.width
		count++
	}
	total += count - 1
	for total > w {
		worst := -1
		for i, c := range t.cols {
			if on[i] && c.drop > 0 && (worst < 0 || c.drop > t.cols[worst].drop) {
				worst = i
			}
		}
		if worst < 0 {
			break
		}
		on[worst] = false
		total -= ws[worst] + 1
	}
	for i, c := range t.cols {
		if on[i] && !c.flex && i < len(need) && need[i] > ws[i] && total < w {
			grow := min(need[i]-ws[i], w-total)
			ws[i] += grow
			total += grow
		}
	}
	for i, c := range t.cols {
		if on[i] && c.flex && total < w {
			ws[i] += w - total
			total = w
		}
	}
	for i := range ws {
		if !on[i] {
			ws[i] = -1
		}
	}
	return ws
}

// render draws the header and the visible rows in exactly h lines of w columns.
func (t *table) render(st *styles, w, h int) string {
	if h <= 0 || w <= 0 {
		return ""
	}
	t.height = max(h-1, 1)
	t.clamp()
	ws := t.widths(w, t.needs(h))
	var b strings.Builder
	hdr := make([]string, 0, len(ws))
	for i, c := range t.cols {
		if ws[i] < 0 {
			continue
		}
		if c.right {
			hdr = append(hdr, fitRight(c.title, ws[i]))
		} else {
			hdr = append(hdr, fit(c.title, ws[i]))
		}
	}
	b.WriteString(st.header.Render(fit("  "+strings.Join(hdr, " "), w)))
	for line := 0; line < h-1; line++ {
		b.WriteByte('\n')
		i := t.offset + line
		if i >= t.n {
			b.WriteString(strings.Repeat(" ", w))
			continue
		}
		cells := t.row(i)
		sel := i == t.cursor
		parts := make([]string, 0, len(ws))
		for ci, c := range t.cols {
			if ws[ci] < 0 {
				continue
			}
			var cl cell
			if ci < len(cells) {
				cl = cells[ci]
			}
			var s string
			switch {
			case cl.raw:
				s = fit(cl.text, ws[ci])
			case c.right:
				s = fitRight(cl.text, ws[ci])
			default:
				s = fit(cl.text, ws[ci])
			}
			if !sel && cl.style != nil && !cl.raw {
				s = cl.style.Render(s)
			}
			parts = append(parts, s)
		}
		row := strings.Join(parts, " ")
		if sel {
			b.WriteString(st.selected.Render(fit("› "+row, w)))
		} else {
			b.WriteString(fit("  "+row, w))
		}
	}
	return b.String()
}

// ---------------------------------------------------------------- forms and dialogs

// modal is a dialog or form that takes the keyboard until it closes.
type modal interface {
	update(msg tea.KeyMsg, c *shared) (cmd tea.Cmd, closed bool)
	view(c *shared, w, h int) string
	keyMap(c *shared) help.KeyMap
}

type field struct {
	key, label, hint string
	input            input
	err              string
}

// form is a column of labelled text fields with inline errors per field and for the whole form.
type form struct {
	title  string
	info   []string
	fields []*field
	focus  int
	err    string // the form's own error, e.g. the scheduler's refusal
	busy   bool   // sent; waiting for the result
}

func newForm(title string) *form { return &form{title: title} }

func (f *form) add(key, label, value, hint string) *field {
	fl := &field{key: key, label: label, hint: hint, input: newInput(value)}
	fl.input.focused = len(f.fields) == 0
	f.fields = append(f.fields, fl)
	return fl
}

func (f *form) values() map[string]string {
	v := make(map[string]string, len(f.fields))
	for _, fl := range f.fields {
		v[fl.key] = fl.input.text()
	}
	return v
}

// setErrors shows errs by field key, clearing the rest, and focuses the first field in error.
func (f *form) setErrors(errs map[string]string) {
	first := -1
	for i, fl := range f.fields {
		fl.err = errs[fl.key]
		if fl.err != "" && first < 0 {
			first = i
		}
	}
	if first >= 0 {
		f.setFocus(first)
	}
}

func (f *form) setFocus(i int) {
	if len(f.fields) == 0 {
		return
	}
	i = (i%len(f.fields) + len(f.fields)) % len(f.fields)
	f.fields[f.focus].input.focused = false
	f.focus = i
	f.fields[i].input.focused = true
}

type formEvent int

const (
	formNone formEvent = iota
	formSubmit
	formCancel
)

func (f *form) update(msg tea.KeyMsg, km keys.Form) (tea.Cmd, formEvent) {
	switch {
	case key.Matches(msg, km.Cancel):
		return nil, formCancel
	case key.Matches(msg, km.Submit):
		if f.busy {
			return nil, formNone
		}
		return nil, formSubmit
	case key.Matches(msg, km.Next):
		f.setFocus(f.focus + 1)
		return nil, formNone
	case key.Matches(msg, km.Prev):
		f.setFocus(f.focus - 1)
		return nil, formNone
	}
	if len(f.fields) == 0 {
		return nil, formNone
	}
	fl := f.fields[f.focus]
	before := fl.input.text()
	fl.input.update(msg)
	if fl.input.text() != before {
		// The error was about the value as it was: once it is edited the
		// error no longer describes it (the next submit checks again).
		fl.err, f.err = "", ""
	}
	return nil, formNone
}

func (f *form) view(c *shared, w int) string {
	st := &c.st
	labelW := 0
	for _, fl := range f.fields {
		labelW = max(labelW, len(fl.label))
	}
	labelW = min(labelW, w/3)
	var lines []string
	for _, l := range f.info {
		for _, wl := range wrap(l, w) {
			lines = append(lines, st.muted.Render(wl))
		}
	}
	if len(f.info) > 0 {
		lines = append(lines, "")
	}
	for i, fl := range f.fields {
		fl.input.width = max(w-labelW-4, 4)
		mark := "  "
		ls := st.base
		if i == f.focus {
			mark = "› "
			ls = st.accent
		}
		lines = append(lines, mark+ls.Render(fit(fl.label, labelW))+"  "+fl.input.view(st.selected, c.ascii()))
		indent := strings.Repeat(" ", labelW+4)
		switch {
		case fl.err != "":
			for _, wl := range wrap("✗ "+fl.err, w-labelW-4) {
				lines = append(lines, indent+st.errText.Render(wl))
			}
		case fl.hint != "" && i == f.focus:
			for _, wl := range wrap(fl.hint, w-labelW-4) {
				lines = append(lines, indent+st.muted.Render(wl))
			}
		}
	}
	lines = append(lines, "")
	switch {
	case f.busy:
		lines = append(lines, st.muted.Render("sending…"))
	case f.err != "":
		for _, wl := range wrap("✗ "+f.err, w) {
			lines = append(lines, st.errText.Render(wl))
		}
	}
	return strings.Join(lines, "\n")
}

// formDialog is a form in a dialog; submit validates and returns the command to send, or nil
// after setting the form's errors.
type formDialog struct {
	form   *form
	submit func(f *form) tea.Cmd
}

func (d *formDialog) update(msg tea.KeyMsg, c *shared) (tea.Cmd, bool) {
	cmd, ev := d.form.update(msg, c.keys.Form)
	switch ev {
	case formCancel:
		return nil, true
	case formSubmit:
		d.form.err = ""
		if send := d.submit(d.form); send != nil {
			d.form.busy = true
			return send, false
		}
	}
	return cmd, false
}

func (d *formDialog) view(c *shared, w, h int) string {
	bw := min(w-2, max(72, w/2))
	body := d.form.view(c, bw-4)
	bh := min(h, strings.Count(body, "\n")+3)
	return lipgloss.Place(w, h, lipgloss.Center, lipgloss.Center, c.box(d.form.title, body, bw, bh, true))
}

func (d *formDialog) keyMap(c *shared) help.KeyMap { return c.keys.Form }

// confirmDialog asks yes or no before a destructive command.
type confirmDialog struct {
	title, body string
	yes         func() tea.Cmd
	no          func() tea.Cmd // optional: what "no" goes back to (e.g. the form that asked)
}

func (d *confirmDialog) update(msg tea.KeyMsg, c *shared) (tea.Cmd, bool) {
	switch {
	case key.Matches(msg, c.keys.Confirm.Yes):
		return d.yes(), true
	case key.Matches(msg, c.keys.Confirm.No):
		if d.no != nil {
			return d.no(), true
		}
		return nil, true
	}
	return nil, false
}

func (d *confirmDialog) view(c *shared, w, h int) string {
	text := d.body + "\n\n" + c.st.key.Render(c.keys.Confirm.Yes.Help().Key) + " " + c.keys.Confirm.Yes.Help().Desc +
		"   " + c.st.key.Render(c.keys.Confirm.No.Help().Key) + " " + c.keys.Confirm.No.Help().Desc
	bw := min(w, max(40, lipgloss.Width(text)+4))
	bh := min(h, strings.Count(text, "\n")+3)
	return lipgloss.Place(w, h, lipgloss.Center, lipgloss.Center, c.box(d.title, text, bw, bh, true))
}

func (d *confirmDialog) keyMap(c *shared) help.KeyMap { return c.keys.Confirm }

// menuDialog picks one of a few items (by cursor or by number).
type menuDialog struct {
	title  string
	items  []string
	cursor int
	choose func(i int) tea.Cmd
}

func (d *menuDialog) update(msg tea.KeyMsg, c *shared) (tea.Cmd, bool) {
	g := c.keys.Global
	switch {
	case key.Matches(msg, c.keys.Form.Cancel):
		return nil, true
	case key.Matches(msg, g.Up):
		d.cursor = (d.cursor - 1 + len(d.items)) % len(d.items)
	case key.Matches(msg, g.Down):
		d.cursor = (d.cursor + 1) % len(d.items)
	case key.Matches(msg, c.keys.Form.Submit):
		return d.choose(d.cursor), true
	default:
		if s := msg.String(); len(s) == 1 && s[0] >= '1' && int(s[0]-'1') < len(d.items) {
			return d.choose(int(s[0] - '1')), true
		}
	}
	return nil, false
}

func (d *menuDialog) view(c *shared, w, h int) string {
	lines := make([]string, len(d.items))
	for i, it := range d.items {
		mark := "  "
		s := c.st.base
		if i == d.cursor {
			mark, s = "› ", c.st.accent
		}
		lines[i] = mark + c.st.key.Render(string(rune('1'+i))) + " " + s.Render(it)
	}
	body := strings.Join(lines, "\n")
	bw := min(w, max(36, lipgloss.Width(body)+4))
	return lipgloss.Place(w, h, lipgloss.Center, lipgloss.Center, c.box(d.title, body, bw, min(h, len(lines)+2), true))
}

func (d *menuDialog) keyMap(c *shared) help.KeyMap { return menuKeys{c.keys} }

type menuKeys struct{ k keys.Map }

func (m menuKeys) ShortHelp() []key.Binding {
	return []key.Binding{m.k.Global.Up, m.k.Global.Down, m.k.Form.Submit, m.k.Form.Cancel}
}
func (m menuKeys) FullHelp() [][]key.Binding { return [][]key.Binding{m.ShortHelp()} }
