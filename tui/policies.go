package tui

import (
	"fmt"
	"sort"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/tui/forms"
)

// policiesView shows each policy's mode (auto, approve, off) and parameters, per job, and edits
// them live with SetPolicy.
type policiesView struct {
	c *shared
	size
	tbl     table
	filt    string
	rows    []policyRow
	builtAt uint64
	builtJb string
	built   bool
}

type policyRow struct {
	job string
	p   *consolepb.PolicyView
}

func newPoliciesView(c *shared) *policiesView {
	v := &policiesView{c: c}
	v.tbl.cols = []column{
		{title: "JOB", width: 14, drop: 1},
		{title: "POLICY", width: 15},
		{title: "MODE", width: 8},
		{title: "PARAMETERS", width: 30, flex: true},
	}
	return v
}

func (v *policiesView) Title() string             { return "policies" }
func (v *policiesView) ShortHelp() []key.Binding  { return v.c.keys.Policies.ShortHelp() }
func (v *policiesView) FullHelp() [][]key.Binding { return v.c.keys.Policies.FullHelp() }
func (v *policiesView) Filter() string            { return v.filt }
func (v *policiesView) SetFilter(f string)        { v.filt = f; v.built = false }
func (v *policiesView) click(x, y int)            { v.refresh(); v.tbl.click(y - 1) }

func (v *policiesView) refresh() {
	if v.built && v.builtAt == v.c.dataVer && v.builtJb == v.c.job {
		return
	}
	jobs := v.c.data.names()
	if v.c.data.jobs[v.c.job] != nil {
		jobs = []string{v.c.job}
	}
	f := strings.ToLower(v.filt)
	v.rows = v.rows[:0]
	for _, n := range jobs {
		for _, p := range v.c.data.jobs[n].GetPolicies() {
			if f == "" || strings.Contains(strings.ToLower(n+" "+p.GetName()+" "+p.GetMode()), f) {
				v.rows = append(v.rows, policyRow{job: n, p: p})
			}
		}
	}
	v.tbl.set(len(v.rows), v.row)
	v.built, v.builtAt, v.builtJb = true, v.c.dataVer, v.c.job
}

func (v *policiesView) row(i int) []cell {
	r := v.rows[i]
	ms := &v.c.st.muted
	switch r.p.GetMode() {
	case "auto":
		ms = &v.c.st.ok
	case "approve":
		ms = &v.c.st.action
	}
	return []cell{
		{text: r.job, style: &v.c.st.muted},
		{text: r.p.GetName()},
		{text: r.p.GetMode(), style: ms},
		{text: kv(r.p.GetParams())},
	}
}

func (v *policiesView) selected() *policyRow {
	if v.tbl.cursor >= 0 && v.tbl.cursor < len(v.rows) {
		return &v.rows[v.tbl.cursor]
	}
	return nil
}

func setPolicyCmd(job, policy, mode string, params map[string]float64) *consolepb.Command {
	return &consolepb.Command{Kind: &consolepb.Command_SetPolicy{SetPolicy: &consolepb.SetPolicy{Job: job, Policy: policy, Mode: mode, Params: params}}}
}

// Init does nothing: the view draws from the shared context's data.
func (v *policiesView) Init() tea.Cmd { return nil }

// Update takes the keys the root model did not, and clicks (coordinates in the view's area).
func (v *policiesView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	return v, route(msg, v.key, v.click)
}

// View draws the view in the area SetSize gave it.
func (v *policiesView) View() string { return v.render(v.w, v.h) }

func (v *policiesView) key(msg tea.KeyMsg) tea.Cmd {
	v.refresh()
	k := v.c.keys
	if v.tbl.navigate(msg, k.Global) {
		return nil
	}
	r := v.selected()
	if r == nil {
		return nil
	}
	switch {
	case key.Matches(msg, k.Policies.Mode):
		next := forms.ToggleMode(r.p.GetMode())
		return v.c.send(fmt.Sprintf("%s %s → %s", r.job, r.p.GetName(), next), setPolicyCmd(r.job, r.p.GetName(), next, nil), nil, nil)
	case key.Matches(msg, k.Policies.Auto):
		if r.p.GetMode() == "auto" {
			v.c.setFlash(flashOK, fmt.Sprintf("%s on %s is already in auto mode", r.p.GetName(), r.job))
			return nil
		}
		row := *r
		v.c.modal = v.autoDialog(row, func() tea.Cmd {
			return v.c.send(fmt.Sprintf("%s %s → auto", row.job, row.p.GetName()), setPolicyCmd(row.job, row.p.GetName(), "auto", nil), nil, nil)
		}, nil)
	case key.Matches(msg, k.Policies.Edit):
		v.c.modal = v.editForm(*r)
	}
	return nil
}

// autoDialog asks before a policy goes to auto mode, where its actions go out with nobody
// approving them; no is where "no" goes back to (nil: nowhere).
func (v *policiesView) autoDialog(r policyRow, yes, no func() tea.Cmd) modal {
	return &confirmDialog{
		title: "auto mode",
		body: fmt.Sprintf("Switch %s on %s to auto?\nIts actions will go out at once, with nobody approving them\n(now %s).",
			r.p.GetName(), r.job, r.p.GetMode()),
		yes: yes, no: no,
	}
}

// editForm edits a policy's mode and each of its parameters. The form checks that each value is
// a number; the scheduler checks it against the paper's bounds and its refusal is shown in the
// form. Choosing auto here asks for a confirmation first, as the auto key does.
func (v *policiesView) editForm(r policyRow) modal {
	f := newForm(fmt.Sprintf("%s · %s", r.p.GetName(), r.job))
	modes := "approve | off | auto (asks first)"
	f.add("mode", "mode", r.p.GetMode(), modes)
	names := make([]string, 0, len(r.p.GetParams()))
	for n := range r.p.GetParams() {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		f.add("p:"+n, n, fmt.Sprintf("%g", r.p.GetParams()[n]), "a number; the scheduler checks its bounds")
	}
	var d *formDialog
	d = &formDialog{form: f, submit: func(f *form) tea.Cmd {
		vals := f.values()
		errs := map[string]string{}
		mode := strings.TrimSpace(vals["mode"])
		if err := forms.Mode(mode); err != nil {
			errs["mode"] = err.Error()
		}
		params := map[string]float64{}
		for _, n := range names {
			x, err := forms.Param(n, vals["p:"+n])
			if err != nil {
				errs["p:"+n] = err.Error()
			}
			params[n] = x
		}
		f.setErrors(errs)
		if len(errs) > 0 {
			return nil
		}
		send := func() tea.Cmd {
			return v.c.send("set "+r.p.GetName()+" on "+r.job, setPolicyCmd(r.job, r.p.GetName(), mode, params), f, nil)
		}
		if mode == "auto" && r.p.GetMode() != "auto" {
			// Confirm first; the form waits behind the dialog and is back on "no".
			v.c.modal = v.autoDialog(r, func() tea.Cmd {
				v.c.modal = d
				d.form.busy = true
				return send()
			}, func() tea.Cmd {
				v.c.modal = d
				return nil
			})
			return nil
		}
		return send()
	}}
	return d
}

func (v *policiesView) render(w, h int) string {
	v.refresh()
	scope := "all jobs"
	if v.c.data.jobs[v.c.job] != nil {
		scope = v.c.job
	}
	title := fmt.Sprintf("policies · %s", scope)
	if v.c.readOnly {
		title += " · read-only"
	}
	if v.filt != "" {
		title += fmt.Sprintf(" · filter %q", v.filt)
	}
	if len(v.rows) == 0 {
		return v.c.box(title, v.tbl.render(&v.c.st, w-2, 1)+"\n\n  "+v.c.st.muted.Render("no policies to show"), w, h, true)
	}
	th := min(h, len(v.rows)+3)
	th = max(th, h/2)
	out := v.c.box(title, v.tbl.render(&v.c.st, w-2, th-2), w, th, true)
	if h-th >= 4 {
		out += "\n" + v.c.box("what the modes mean", strings.Join([]string{
			v.c.st.ok.Render("auto") + "     the policy's actions go straight out (" + v.c.keys.Policies.Auto.Help().Key + ", confirmed)",
			v.c.st.action.Render("approve") + "  they wait in the actions queue (A) for an operator (" + v.c.keys.Policies.Mode.Help().Key + ": approve ↔ off)",
			v.c.st.muted.Render("off") + "      the policy proposes nothing",
		}, "\n"), w, h-th, false)
	}
	return out
}
