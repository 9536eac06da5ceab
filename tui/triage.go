package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// triageDoc is what the triage view shows: a job's stacks (collected
// now, or the last collection saved with its history) or a node's probe,
// as lines, with where each node's "== NODE" block starts.
type triageDoc struct {
	seq   int    // the request it answers: a late answer to an older one is dropped
	title string // "stacks of JOB", "saved stacks of JOB", "probe of NODE"
	job   string
	busy  bool   // asked, not answered yet
	err   string // why it failed
	lines []string
	// blocks are the nodes' "== NODE" lines: their names and line indexes.
	blocks []triageBlock
}

type triageBlock struct {
	node string
	line int
}

// triageDoneMsg is the answer to a stacks or probe command.
type triageDoneMsg struct {
	seq int
	res *consolepb.CommandResult
	err error
}

// askTriage starts a stacks collection (saved: the last one saved) or a
// probe of node, and opens the triage view on it.
func (c *shared) askTriage(title string, cmd *consolepb.Command) tea.Cmd {
	c.triage = triageDoc{seq: c.triage.seq + 1, title: title, job: c.job, busy: true}
	seq, b := c.triage.seq, c.backend
	ask := func() tea.Msg {
		if b == nil {
			return triageDoneMsg{seq: seq, err: client.ErrNotConnected}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 70*time.Second)
		defer cancel()
		res, err := b.Send(ctx, cmd)
		return triageDoneMsg{seq: seq, res: res, err: err}
	}
	return tea.Batch(func() tea.Msg { return navigateMsg{to: viewTriage, job: c.job} }, ask)
}

// triageDone takes the answer in, unless a newer request replaced it.
func (c *shared) triageDone(msg triageDoneMsg) {
	d := &c.triage
	if msg.seq != d.seq {
		return
	}
	d.busy = false
	switch {
	case msg.err != nil:
		d.err = msg.err.Error()
	case msg.res == nil:
		d.err = "no result"
	case !msg.res.GetOk():
		d.err = msg.res.GetError()
	case msg.res.GetProbe() != nil:
		d.setLines(probeText(msg.res.GetProbe()))
	default:
		d.setLines(stacksText(msg.res.GetStacks()))
	}
	if d.err != "" {
		c.setFlash(flashErr, d.title+": "+d.err)
	}
}

// setLines splits text into the doc's lines and finds its node blocks.
func (d *triageDoc) setLines(text string) {
	d.lines = strings.Split(strings.TrimRight(text, "\n"), "\n")
	d.blocks = d.blocks[:0]
	for i, l := range d.lines {
		if rest, ok := strings.CutPrefix(l, "== "); ok {
			name, _, _ := strings.Cut(rest, " ")
			d.blocks = append(d.blocks, triageBlock{node: name, line: i})
		}
	}
}

// stacksText is the stacks as `kelpie job stacks` prints them: each node's
// under a "== NODE (role)" line.
func stacksText(stacks []*consolepb.NodeStacks) string {
	var b strings.Builder
	for _, s := range stacks {
		fmt.Fprintf(&b, "== %s (%s)\n", s.GetNode(), s.GetRole())
		if s.GetError() != "" {
			fmt.Fprintf(&b, "!! %s\n", s.GetError())
		}
		if s.GetTruncated() {
			b.WriteString("!! truncated at the bound\n")
		}
		if t := s.GetText(); t != "" {
			b.WriteString(strings.TrimRight(t, "\n"))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// probeText is a probe's verdict, then each node's figures under its
// "== NODE (role)" line.
func probeText(p *consolepb.ProbeResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "verdict: %s", p.GetVerdict())
	if p.GetSubject() != "" {
		fmt.Fprintf(&b, " — %s (%s %.1f×)", p.GetSubject(), p.GetCause(), p.GetRatio())
	}
	fmt.Fprintf(&b, "\n%s\n", p.GetDetail())
	for _, n := range p.GetNodes() {
		fmt.Fprintf(&b, "== %s (%s)\n", n.GetNode(), n.GetRole())
		if n.GetKernelS() > 0 {
			fmt.Fprintf(&b, "   kernel %.2fms a round", 1000*n.GetKernelS())
			if n.GetKernelRatio() > 0 {
				fmt.Fprintf(&b, " (%.1f× the others' median)", n.GetKernelRatio())
			}
			b.WriteByte('\n')
		}
		for _, t := range n.GetTrips() {
			if t.GetError() != "" {
				fmt.Fprintf(&b, "   → %s: %s\n", t.GetServer(), t.GetError())
				continue
			}
			fmt.Fprintf(&b, "   → %s  round trip %.2fms, in the server %.2fms", t.GetServer(), 1000*t.GetRttS(), 1000*t.GetServerS())
			if t.GetRatio() > 0 {
				fmt.Fprintf(&b, "  %.1f×", t.GetRatio())
			}
			b.WriteByte('\n')
		}
		if n.GetError() != "" {
			fmt.Fprintf(&b, "!! %s\n", n.GetError())
		}
	}
	return b.String()
}

// triageView shows the triage doc in a scrollable viewport: n and N jump
// to the next and previous node's block, R restarts the node whose block
// is at the top (a hung job restarted node by node from its stacks).
type triageView struct {
	c *shared
	size
	vp      viewport.Model
	shown   int // the doc's seq the viewport holds
	shownOK bool
	busy    bool
	// at is the block n/N moved to (-1: none; the block at the top is
	// current then): near the end the viewport cannot bring it to the top.
	at int
}

func newTriageView(c *shared) *triageView {
	return &triageView{c: c, vp: viewport.New(0, 0), at: -1}
}

func (v *triageView) Title() string             { return v.c.triage.title }
func (v *triageView) ShortHelp() []key.Binding  { return v.c.keys.Triage.ShortHelp() }
func (v *triageView) FullHelp() [][]key.Binding { return v.c.keys.Triage.FullHelp() }
func (v *triageView) Init() tea.Cmd             { return nil }
func (v *triageView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	return v, route(msg, v.key, func(int, int) {})
}

// sync puts the doc into the viewport when it changed.
func (v *triageView) sync() {
	d := &v.c.triage
	v.vp.Width, v.vp.Height = v.w, max(v.h-2, 1)
	if v.shownOK && v.shown == d.seq && v.busy == d.busy {
		return
	}
	v.shown, v.shownOK, v.busy = d.seq, true, d.busy
	lines := make([]string, len(d.lines))
	for i, l := range d.lines {
		lines[i] = ansi.Truncate(strings.ReplaceAll(l, "\t", "    "), v.w, "…")
	}
	v.vp.SetContent(strings.Join(lines, "\n"))
	v.vp.GotoTop()
	v.at = -1
}

// current is the block n/N moved to, else the node whose block holds the
// top line.
func (v *triageView) current() string {
	bs := v.c.triage.blocks
	if v.at >= 0 && v.at < len(bs) {
		return bs[v.at].node
	}
	node := ""
	for _, b := range bs {
		if b.line <= v.vp.YOffset {
			node = b.node
		}
	}
	return node
}

// currentIndex is current's block index (-1: none).
func (v *triageView) currentIndex() int {
	if v.at >= 0 {
		return v.at
	}
	i := -1
	for j, b := range v.c.triage.blocks {
		if b.line <= v.vp.YOffset {
			i = j
		}
	}
	return i
}

func (v *triageView) key(msg tea.KeyMsg) tea.Cmd {
	v.sync()
	k := v.c.keys
	switch {
	case key.Matches(msg, k.Global.Down):
		v.vp.ScrollDown(1)
		v.at = -1
	case key.Matches(msg, k.Global.Up):
		v.vp.ScrollUp(1)
		v.at = -1
	case key.Matches(msg, k.Global.PageDown):
		v.vp.PageDown()
		v.at = -1
	case key.Matches(msg, k.Global.PageUp):
		v.vp.PageUp()
		v.at = -1
	case key.Matches(msg, k.Global.Top):
		v.vp.GotoTop()
		v.at = -1
	case key.Matches(msg, k.Global.Bottom):
		v.vp.GotoBottom()
		v.at = -1
	case key.Matches(msg, k.Triage.NextNode):
		if i := v.currentIndex() + 1; i < len(v.c.triage.blocks) {
			v.at = i
			v.vp.SetYOffset(v.c.triage.blocks[i].line)
		}
	case key.Matches(msg, k.Triage.PrevNode):
		if i := v.currentIndex() - 1; i >= 0 {
			v.at = i
			v.vp.SetYOffset(v.c.triage.blocks[i].line)
		}
	case key.Matches(msg, k.Triage.Restart):
		if n := v.current(); n != "" && v.c.triage.job != "" {
			v.c.modal = restartDialog(v.c, v.c.triage.job, n)
		}
	}
	return nil
}

// View draws a status line, the viewport and where it is.
func (v *triageView) View() string {
	v.sync()
	d := &v.c.triage
	st := v.c.st
	var head string
	switch {
	case d.busy:
		head = st.accent.Render(d.title + " — asking the agents…")
	case d.err != "":
		head = st.errText.Render(d.title + ": " + d.err)
	case len(d.lines) == 0:
		head = st.muted.Render("nothing here yet: S in a job collects its stacks, W shows the saved ones, x probes the selected node")
	default:
		head = st.title.Render(d.title) + st.muted.Render(fmt.Sprintf(" · %d nodes · %d lines", len(d.blocks), len(d.lines)))
	}
	foot := ""
	if len(d.lines) > 0 {
		foot = st.muted.Render(fmt.Sprintf("line %d of %d", v.vp.YOffset+1, len(d.lines)))
		if n := v.current(); n != "" {
			foot += st.muted.Render(" · at ") + st.accent.Render(n)
		}
	}
	body := v.vp.View()
	out := ansi.Truncate(head, v.w, "…") + "\n" + body + "\n" + ansi.Truncate(foot, v.w, "…")
	// Exactly h lines: the viewport pads itself to its height.
	lines := strings.Split(out, "\n")
	for len(lines) < v.h {
		lines = append(lines, "")
	}
	return strings.Join(lines[:max(v.h, 0)], "\n")
}
