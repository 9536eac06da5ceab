package tui

import (
	"strings"
	"unicode"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
)

// input is a one-line text field. It is ours rather than bubbles' textinput, which pulls in a
// clipboard module this repository does not carry; it does what the forms need: insert (typed or
// pasted), move, delete, and a static cursor (no blink, so an open form costs no CPU).
type input struct {
	value   []rune
	pos     int
	focused bool
	width   int // columns shown; the text scrolls to keep the cursor visible
}

func newInput(v string) input { i := input{}; i.set(v); return i }

func (i *input) set(v string) {
	i.value = []rune(v)
	i.pos = len(i.value)
}

func (i *input) text() string { return string(i.value) }

// update applies an editing key; it reports whether the key was one.
func (i *input) update(msg tea.KeyMsg) bool {
	switch msg.Type {
	case tea.KeyRunes, tea.KeySpace:
		rs := msg.Runes
		if msg.Type == tea.KeySpace {
			rs = []rune{' '}
		}
		clean := make([]rune, 0, len(rs))
		for _, r := range rs {
			if unicode.IsPrint(r) {
				clean = append(clean, r)
			}
		}
		v := make([]rune, 0, len(i.value)+len(clean))
		v = append(append(append(v, i.value[:i.pos]...), clean...), i.value[i.pos:]...)
		i.value = v
		i.pos += len(clean)
	case tea.KeyBackspace:
		if i.pos > 0 {
			i.value = append(i.value[:i.pos-1], i.value[i.pos:]...)
			i.pos--
		}
	case tea.KeyDelete, tea.KeyCtrlD:
		if i.pos < len(i.value) {
			i.value = append(i.value[:i.pos], i.value[i.pos+1:]...)
		}
	case tea.KeyLeft, tea.KeyCtrlB:
		i.pos = max(i.pos-1, 0)
	case tea.KeyRight, tea.KeyCtrlF:
		i.pos = min(i.pos+1, len(i.value))
	case tea.KeyHome, tea.KeyCtrlA:
		i.pos = 0
	case tea.KeyEnd, tea.KeyCtrlE:
		i.pos = len(i.value)
	case tea.KeyCtrlU:
		i.value = append([]rune(nil), i.value[i.pos:]...)
		i.pos = 0
	case tea.KeyCtrlK:
		i.value = i.value[:i.pos]
	case tea.KeyCtrlW:
		j := i.pos
		for j > 0 && i.value[j-1] == ' ' {
			j--
		}
		for j > 0 && i.value[j-1] != ' ' {
			j--
		}
		i.value = append(i.value[:j], i.value[i.pos:]...)
		i.pos = j
	default:
		return false
	}
	return true
}

// view draws the field in width columns, the cursor as a reversed cell when focused (an
// underscore at the end of the text without colour, where reverse video is not drawn).
func (i *input) view(cursor lipgloss.Style, ascii bool) string {
	w := i.width
	if w <= 0 {
		w = len(i.value) + 1
	}
	start := 0
	if i.pos >= w {
		start = i.pos - w + 1
	}
	end := min(len(i.value), start+w)
	var b strings.Builder
	b.WriteString(string(i.value[start:min(i.pos, end)]))
	if i.focused {
		under := " "
		if i.pos < len(i.value) {
			under = string(i.value[i.pos])
		} else if ascii {
			under = "_"
		}
		b.WriteString(cursor.Render(under))
		if i.pos < end {
			b.WriteString(string(i.value[i.pos+1 : end]))
		}
	} else if i.pos < end {
		b.WriteString(string(i.value[i.pos:end]))
	}
	return fit(b.String(), w)
}
