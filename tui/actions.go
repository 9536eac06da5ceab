package tui

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/tui/forms"
)

// actionsView is the pending queue (proposed actions first, each with its policy, target, reason
// and predicted effect), recent actions below, the selected action's details, and the manual
// triggers. In read-only mode the queue is shown but nothing can be decided or triggered.
type actionsView struct {
	c *shared
	size
	tbl     table
	filt    string
	rows    []*consolepb.Action
	builtAt uint64
	builtJb string
	built   bool
}

// destructive kinds ask for confirmation before they are approved or triggered.
var destructive = map[string]bool{"KILL_RESTART": true, "REMOVE_SERVER": true, "REMOVE_WORKER": true, "BACKUP_WORKERS": true}

func newActionsView(c *shared) *actionsView {
	v := &actionsView{c: c}
	v.tbl.cols = []column{
		{title: "ID", width: 8},
		{title: "JOB", width: 12, drop: 4},
		{title: "KIND", width: 13},
		{title: "TARGET", width: 10},
		{title: "POLICY", width: 14, drop: 3},
		{title: "STATE", width: 10},
		{title: "OUTCOME", width: 7, drop: 5},
		{title: "AGE", width: 6, right: true, drop: 2},
		{title: "REASON", width: 20, flex: true, drop: 1},
	}
	return v
}

func (v *actionsView) Title() string             { return "actions" }
func (v *actionsView) ShortHelp() []key.Binding  { return v.c.keys.Actions.ShortHelp() }
func (v *actionsView) FullHelp() [][]key.Binding { return v.c.keys.Actions.FullHelp() }
func (v *actionsView) Filter() string            { return v.filt }
func (v *actionsView) SetFilter(f string)        { v.filt = f; v.built = false }
func (v *actionsView) click(x, y int)            { v.refresh(); v.tbl.click(y - 1) }

func (v *actionsView) refresh() {
	if v.built && v.builtAt == v.c.dataVer && v.builtJb == v.c.job {
		return
	}
	keep := ""
	if a := v.selected(); a != nil {
		keep = a.GetId()
	}
	var all []*consolepb.Action
	if j := v.c.data.jobs[v.c.job]; j != nil {
		all = append(all, j.GetActions()...)
	} else {
		for _, n := range v.c.data.names() {
			all = append(all, v.c.data.jobs[n].GetActions()...)
		}
	}
	f := strings.ToLower(v.filt)
	v.rows = v.rows[:0]
	for _, a := range all {
		if f == "" || strings.Contains(strings.ToLower(a.GetId()+" "+a.GetKind()+" "+a.GetTarget()+" "+a.GetPolicy()+" "+a.GetState()+" "+a.GetReason()), f) {
			v.rows = append(v.rows, a)
		}
	}
	sort.SliceStable(v.rows, func(i, j int) bool { // pending first; otherwise as the scheduler ordered them
		return v.rows[i].GetState() == "proposed" && v.rows[j].GetState() != "proposed"
	})
	v.tbl.set(len(v.rows), v.row)
	for i, a := range v.rows {
		if a.GetId() == keep {
			v.tbl.cursor = i
			v.tbl.clamp()
		}
	}
	v.built, v.builtAt, v.builtJb = true, v.c.dataVer, v.c.job
}

// focusPending puts the cursor on the first action waiting for a decision
// (pending actions sort first), so `A` then `a` approves what the operator
// came for rather than whatever row the cursor was left on. With nothing
// pending the cursor stays where it was.
func (v *actionsView) focusPending() {
	v.built = false
	v.refresh()
	for i, a := range v.rows {
		if a.GetState() == "proposed" {
			v.tbl.cursor = i
			v.tbl.clamp()
			return
		}
	}
}

func (v *actionsView) selected() *consolepb.Action {
	if v.tbl.cursor >= 0 && v.tbl.cursor < len(v.rows) {
		return v.rows[v.tbl.cursor]
	}
	return nil
}

func (v *actionsView) row(i int) []cell {
	a := v.rows[i]
	st := v.c.stateStyle(a.GetState())
	if a.GetState() == "proposed" {
		st = &v.c.st.action
	}
	state := a.GetState()
	if state == "proposed" {
		state = "pending⚑"
	}
	return []cell{
		{text: a.GetId()},
		{text: a.GetJob(), style: &v.c.st.muted},
		{text: a.GetKind()},
		{text: a.GetTarget()},
		{text: a.GetPolicy(), style: &v.c.st.muted},
		{text: state, style: st},
		v.outcome(a),
		{text: since(a.GetCreated(), v.c.now())},
		{text: a.GetReason()},
	}
}

// outcome is an applied action's realized effect in a word: hit (✓), miss
// (✗), or "…" while it is being measured.
func (v *actionsView) outcome(a *consolepb.Action) cell {
	r := a.GetRealized()
	switch {
	case r != nil && r.GetMiss():
		return cell{text: "✗ miss", style: &v.c.st.straggler}
	case r != nil:
		return cell{text: "✓ hit", style: &v.c.st.ok}
	case a.GetState() == "applied":
		return cell{text: "…", style: &v.c.st.muted}
	}
	return cell{}
}

// triggerJob is the job a manual action is for: the open job, or the selected action's.
func (v *actionsView) triggerJob() string {
	if v.c.data.jobs[v.c.job] != nil {
		return v.c.job
	}
	if a := v.selected(); a != nil {
		return a.GetJob()
	}
	return ""
}

// Init does nothing: the view draws from the shared context's data.
func (v *actionsView) Init() tea.Cmd { return nil }

// Update takes the keys the root model did not, and clicks (coordinates in the view's area).
func (v *actionsView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	return v, route(msg, v.key, v.click)
}

// View draws the view in the area SetSize gave it.
func (v *actionsView) View() string { return v.render(v.w, v.h) }

func (v *actionsView) key(msg tea.KeyMsg) tea.Cmd {
	v.refresh()
	k := v.c.keys
	if v.tbl.navigate(msg, k.Global) {
		return nil
	}
	switch {
	case key.Matches(msg, k.Actions.Approve), key.Matches(msg, k.Actions.Reject):
		a := v.selected()
		approve := key.Matches(msg, k.Actions.Approve)
		if a == nil {
			return nil
		}
		if a.GetState() != "proposed" {
			v.c.setFlash(flashErr, fmt.Sprintf("%s is %s, not pending", a.GetId(), a.GetState()))
			return nil
		}
		return v.decide(a, approve)
	case key.Matches(msg, k.Actions.Trigger):
		v.c.modal = &menuDialog{title: "trigger an action", items: []string{
			"restart a node (KILL_RESTART)", "adjust batch sizes (ADJUST_BS)",
			"add a server", "remove a server", "add a worker", "remove a worker",
			"backup workers (BACKUP_WORKERS)", "scale a worker's learning rate (ADJUST_LR)",
		}, choose: v.trigger}
	case key.Matches(msg, k.Actions.Restart):
		return v.trigger(0)
	case key.Matches(msg, k.Actions.Batch):
		return v.trigger(1)
	}
	return nil
}

func (v *actionsView) decide(a *consolepb.Action, approve bool) tea.Cmd {
	d := &consolepb.DecideAction{Job: a.GetJob(), ActionId: a.GetId()}
	verb := "reject"
	cmd := &consolepb.Command{Kind: &consolepb.Command_Reject{Reject: d}}
	if approve {
		verb = "approve"
		cmd = &consolepb.Command{Kind: &consolepb.Command_Approve{Approve: d}}
	}
	what := fmt.Sprintf("%s %s %s", verb, a.GetId(), a.GetKind())
	if approve && destructive[a.GetKind()] {
		v.c.modal = &confirmDialog{
			title: "approve",
			body:  fmt.Sprintf("Approve %s %s on %s?\n%s", a.GetKind(), a.GetId(), orNone(a.GetTarget()), a.GetPredicted()),
			yes:   func() tea.Cmd { return v.c.send(what, cmd, nil, nil) },
		}
		return nil
	}
	return v.c.send(what, cmd, nil, nil)
}

// nodesOf maps each node of the job to its role; workers lists the workers in order.
func nodesOf(j *consolepb.JobView) (roles map[string]string, workers, servers []string, sizes map[string]int32) {
	roles, sizes = map[string]string{}, map[string]int32{}
	for _, n := range j.GetNodes() {
		if n.GetState() == "removed" {
			continue // taken out of the job: no action applies to it
		}
		roles[n.GetName()] = n.GetRole()
		switch n.GetRole() {
		case "worker":
			workers = append(workers, n.GetName())
			sizes[n.GetName()] = n.GetBatchSize()
		case "server":
			servers = append(servers, n.GetName())
		}
	}
	return
}

// trigger opens the form or dialog for menu item i.
func (v *actionsView) trigger(i int) tea.Cmd {
	job := v.triggerJob()
	j := v.c.data.jobs[job]
	if j == nil {
		v.c.setFlash(flashErr, "open a job first (:job NAME) to trigger an action")
		return nil
	}
	roles, workers, servers, sizes := nodesOf(j)
	if len(roles) == 0 && i != 2 && i != 4 {
		v.c.setFlash(flashErr, "waiting for "+job+"'s nodes")
		return nil
	}
	send := func(what string, a *consolepb.Action, f *form) tea.Cmd {
		return v.c.send(what, triggerCmd(job, a), f, nil)
	}
	switch i {
	case 0, 3, 5: // restart, remove server, remove worker: pick a node, then confirm
		role, kind, verb := "", "KILL_RESTART", "restart"
		def := ""
		switch i {
		case 0:
			def = v.suggestRestart(j)
		case 3:
			role, kind, verb = "server", "REMOVE_SERVER", "remove server"
			if len(servers) > 0 {
				def = servers[len(servers)-1]
			}
		case 5:
			role, kind, verb = "worker", "REMOVE_WORKER", "remove worker"
			if len(workers) > 0 {
				def = workers[len(workers)-1]
			}
		}
		f := newForm(verb + " · " + job)
		f.add("node", "node", def, "a node of "+job)
		v.c.modal = &formDialog{form: f, submit: func(f *form) tea.Cmd {
			node := strings.TrimSpace(f.values()["node"])
			if err := forms.Node(node, roles, role); err != nil {
				f.setErrors(map[string]string{"node": err.Error()})
				return nil
			}
			v.c.modal = &confirmDialog{
				title: verb,
				body:  fmt.Sprintf("%s %s of %s?\nThis stops the node's process.", strings.ToUpper(verb[:1])+verb[1:], node, job),
				yes:   func() tea.Cmd { return send(verb+" "+node, &consolepb.Action{Kind: kind, Target: node}, nil) },
			}
			return nil
		}}
	case 1:
		f := newForm("adjust batch sizes · " + job)
		f.info = []string{fmt.Sprintf("global batch %d: the sizes must sum to it; workers left out keep theirs", j.GetGlobalBatch())}
		f.add("sizes", "sizes", forms.FormatBatchSizes(workers, sizes), "worker=size pairs, e.g. worker-2=32")
		v.c.modal = &formDialog{form: f, submit: func(f *form) tea.Cmd {
			bs, err := forms.BatchSizes(f.values()["sizes"], sizes, j.GetGlobalBatch())
			if err != nil {
				f.setErrors(map[string]string{"sizes": err.Error()})
				return nil
			}
			f.setErrors(nil)
			return send("adjust batch sizes", &consolepb.Action{Kind: "ADJUST_BS", BatchSizes: bs}, f)
		}}
	case 6:
		f := newForm("backup workers · " + job)
		f.info = []string{fmt.Sprintf("each iteration goes ahead with the first %d−b gradients; the b slowest are dropped and their shards trained again; 0 turns it off", len(workers))}
		f.add("drop", "drop b", "1", "gradients dropped per iteration")
		v.c.modal = &formDialog{form: f, submit: func(f *form) tea.Cmd {
			b, err := strconv.Atoi(strings.TrimSpace(f.values()["drop"]))
			if err != nil || b < 0 || b >= len(workers) {
				f.setErrors(map[string]string{"drop": fmt.Sprintf("a whole number from 0 to %d", len(workers)-1)})
				return nil
			}
			f.setErrors(nil)
			return send("backup workers", &consolepb.Action{Kind: "BACKUP_WORKERS", Params: map[string]float64{"drop": float64(b)}}, f)
		}}
	case 7:
		f := newForm("learning-rate scale · " + job)
		def := v.suggestRestart(j)
		if roles[def] != "worker" && len(workers) > 0 {
			def = workers[0]
		}
		f.add("node", "worker", def, "a worker of "+job)
		f.add("scale", "scale", "0.5", "factor on its gradient, in (0, 10]")
		v.c.modal = &formDialog{form: f, submit: func(f *form) tea.Cmd {
			vals := f.values()
			node := strings.TrimSpace(vals["node"])
			errs := map[string]string{}
			if err := forms.Node(node, roles, "worker"); err != nil {
				errs["node"] = err.Error()
			}
			scale, err := strconv.ParseFloat(strings.TrimSpace(vals["scale"]), 64)
			if err != nil || !(scale > 0 && scale <= 10) {
				errs["scale"] = "a number in (0, 10]"
			}
			if len(errs) > 0 {
				f.setErrors(errs)
				return nil
			}
			f.setErrors(nil)
			return send("scale "+node+"'s learning rate", &consolepb.Action{Kind: "ADJUST_LR", Target: node,
				Params: map[string]float64{"lr_scale": scale}}, f)
		}}
	case 2, 4:
		kind, what := "ADD_SERVER", "add a server"
		if i == 4 {
			kind, what = "ADD_WORKER", "add a worker"
		}
		v.c.modal = &confirmDialog{
			title: what,
			body:  fmt.Sprintf("%s to %s?", strings.ToUpper(what[:1])+what[1:], job),
			yes:   func() tea.Cmd { return send(what, &consolepb.Action{Kind: kind}, nil) },
		}
	}
	return nil
}

// suggestRestart is the node a restart form starts with: the selected action's target, else the
// first persistent straggler, else the first worker.
func (v *actionsView) suggestRestart(j *consolepb.JobView) string {
	if a := v.selected(); a != nil && a.GetTarget() != "" && a.GetJob() == j.GetName() {
		return a.GetTarget()
	}
	first := ""
	for _, n := range j.GetNodes() {
		if n.GetClass() == "persistent" {
			return n.GetName()
		}
		if first == "" && n.GetRole() == "worker" {
			first = n.GetName()
		}
	}
	return first
}

func (v *actionsView) render(w, h int) string {
	v.refresh()
	pend := 0
	for _, a := range v.rows {
		if a.GetState() == "proposed" {
			pend++
		}
	}
	scope := "all jobs"
	if v.c.data.jobs[v.c.job] != nil {
		scope = v.c.job
	}
	title := fmt.Sprintf("actions · %s · %d pending, %d in all", scope, pend, len(v.rows))
	if v.c.readOnly {
		title += " · read-only"
	}
	if v.filt != "" {
		title += fmt.Sprintf(" · filter %q", v.filt)
	}
	th := h
	detail := ""
	if h >= 14 {
		th = h * 3 / 5
		detail = v.detail(w, h-th)
	}
	var body string
	if len(v.rows) == 0 {
		body = v.tbl.render(&v.c.st, w-2, 1) + "\n\n  " + v.c.st.muted.Render("no actions yet: policies propose them as stragglers appear")
		if !v.c.readOnly {
			body += "\n  " + v.c.st.muted.Render("press "+v.c.keys.Actions.Trigger.Help().Key+" to trigger one by hand")
		}
	} else {
		body = v.tbl.render(&v.c.st, w-2, th-2)
	}
	out := v.c.box(title, body, w, th, true)
	if detail != "" {
		out += "\n" + detail
	}
	return out
}

func (v *actionsView) detail(w, h int) string {
	st := &v.c.st
	a := v.selected()
	if a == nil {
		return v.c.box("details", "", w, h, false)
	}
	label := func(l string) string { return st.muted.Render(fmt.Sprintf("%-11s", l)) }
	lines := []string{
		fmt.Sprintf("%s %s%s · from %s · %s", st.title.Render(a.GetId()), a.GetKind(), onTarget(a), a.GetPolicy(),
			v.c.styled(v.c.stateStyle(a.GetState()), a.GetState())),
		label("reason") + a.GetReason(),
		label("predicted") + a.GetPredicted(),
	}
	if r := a.GetRealized(); r != nil {
		// Predicted against realized, side by side: the closed loop.
		style := &st.ok
		if r.GetMiss() {
			style = &st.straggler
		}
		lines = append(lines, label("realized")+style.Render(r.GetVerdict())+
			st.muted.Render(fmt.Sprintf(" · over %.0fs windows · BPT %s → %s", r.GetWindowS(), duration(r.GetBptBeforeS()), duration(r.GetBptAfterS()))))
	} else if a.GetState() == "applied" {
		lines = append(lines, label("realized")+st.muted.Render("measuring over the policy's window…"))
	}
	now := evidenceNow(a.GetEvidence(), v.c.data.jobs[a.GetJob()])
	if len(now) > 0 {
		// The reason was written from the figures at proposal time; what
		// they are now sits beside it, so a stale proposal shows as such.
		lines[1] += st.muted.Render(" · now " + evidenceText(now))
	}
	if len(a.GetEvidence()) > 0 {
		lines = append(lines, label("evidence")+evidenceText(a.GetEvidence()))
	}
	if len(a.GetBatchSizes()) > 0 {
		lines = append(lines, label("batch")+kvInt(a.GetBatchSizes()))
	}
	if len(a.GetAccumulation()) > 0 {
		lines = append(lines, label("accumulate")+kvInt(a.GetAccumulation()))
	}
	if len(a.GetParams()) > 0 {
		lines = append(lines, label("params")+kv(a.GetParams()))
	}
	if a.GetSyncModel() != "" {
		lines = append(lines, label("sync")+a.GetSyncModel())
	}
	if it := iterationText(a); it != "" {
		lines = append(lines, label("iteration")+it)
	}
	if a.GetDecidedBy() != "" {
		lines = append(lines, label("decided by")+a.GetDecidedBy())
	}
	if a.GetError() != "" {
		lines = append(lines, label("error")+st.errText.Render(a.GetError()))
	}
	if hs := a.GetHistory(); len(hs) > 0 {
		var parts []string
		for _, t := range hs {
			p := t.GetState()
			if t.GetBy() != "" {
				p += " by " + t.GetBy()
			}
			if s := since(t.GetAt(), v.c.now()); s != "" {
				p += " " + s + " ago"
			}
			parts = append(parts, p)
		}
		lines = append(lines, label("history")+strings.Join(parts, " → "))
	}
	if a.GetState() == "proposed" && !v.c.readOnly {
		k := v.c.keys.Actions
		lines = append(lines, "", st.key.Render(k.Approve.Help().Key)+" approve  "+st.key.Render(k.Reject.Help().Key)+" reject")
	}
	return v.c.box("details", strings.Join(wrapDetail(lines, w-2, 11), "\n"), w, h, false)
}

// wrapDetail wraps each detail line wider than w at word boundaries, the
// continuation lines indented under the text (past the label's indent
// cells); the first line, the action's title, wraps without indent. A
// reason is read whole, never cut at the box's edge.
func wrapDetail(lines []string, w, indent int) []string {
	if w <= indent+10 {
		return lines
	}
	out := make([]string, 0, len(lines))
	for i, l := range lines {
		if ansi.StringWidth(l) <= w {
			out = append(out, l)
			continue
		}
		ind := indent
		if i == 0 {
			ind = 0
		}
		head, rest := ansi.Cut(l, 0, ind), ansi.Cut(l, ind, ansi.StringWidth(l))
		for j, part := range strings.Split(ansi.Wrap(rest, w-ind, ""), "\n") {
			if j == 0 {
				out = append(out, head+part)
			} else {
				out = append(out, strings.Repeat(" ", ind)+part)
			}
		}
	}
	return out
}

// onTarget is " on NODE" for an action on a node, " on every worker" for
// a job-wide one (never "on none").
func onTarget(a *consolepb.Action) string {
	if a.GetTarget() != "" {
		return " on " + a.GetTarget()
	}
	switch a.GetKind() {
	case "ADJUST_BS", "ADJUST_LR", "BACKUP_WORKERS":
		return " on every worker"
	}
	return ""
}

// iterationText says at which iteration an action is to apply and did,
// leaving out what is not set yet ("target 0" means none).
func iterationText(a *consolepb.Action) string {
	var parts []string
	if t := a.GetTargetIteration(); t > 0 {
		parts = append(parts, fmt.Sprintf("target %d", t))
	}
	if t := a.GetAppliedIteration(); t > 0 {
		parts = append(parts, fmt.Sprintf("applied at %d", t))
	}
	return strings.Join(parts, ", ")
}

// evidenceNow returns, for each figure of an action's evidence that the job
// view also shows, its current value where it differs from the one at
// proposal time by more than 5 %. A figure the view has no value for yet (0,
// no report) is left out, never shown as 0.
func evidenceNow(ev map[string]float64, j *consolepb.JobView) map[string]float64 {
	if j == nil || len(ev) == 0 {
		return nil
	}
	nodes := make(map[string]*consolepb.NodeView, len(j.GetNodes()))
	for _, n := range j.GetNodes() {
		nodes[n.GetName()] = n
	}
	out := map[string]float64{}
	for k, then := range ev {
		var now float64
		node, field, ok := strings.Cut(k, "/")
		n := nodes[node]
		switch {
		case !ok && k == "mean_bpt_trans_s":
			now = j.GetMonitor().GetMeanBptS()
		case ok && n != nil && field == "bpt_per_s":
			now = n.GetBptLongS()
		case ok && n != nil && field == "bpt_trans_s":
			now = n.GetBptShortS()
		case ok && n != nil && field == "throughput":
			now = n.GetThroughput()
		}
		if now <= 0 || math.IsNaN(now) || math.IsInf(now, 0) {
			continue
		}
		if math.Abs(now-then) > 0.05*math.Abs(then) {
			out[k] = now
		}
	}
	return out
}

func kv(m map[string]float64) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s=%g", k, m[k])
	}
	return strings.Join(parts, " ")
}

func kvInt(m map[string]int32) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
