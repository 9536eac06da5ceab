package tui

import (
	"fmt"
	"sort"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// jobsView lists every job: state, nodes, throughput, shard progress, policy modes, pending actions, age.
type jobsView struct {
	c *shared
	size
	tbl     table
	sortBy  int
	desc    bool
	filt    string
	rows    []*consolepb.JobView
	builtAt uint64 // dataVer the rows were built from
	built   bool
}

var jobSorts = []string{"name", "state", "age", "throughput", "progress"}

func newJobsView(c *shared) *jobsView {
	v := &jobsView{c: c}
	v.tbl.cols = []column{
		{title: "NAME", width: 16},
		{title: "STATE", width: 9},
		{title: "MODEL", width: 14, drop: 3},
		{title: "W/S", width: 5, right: true},
		{title: "THROUGHPUT", width: 10, right: true},
		{title: "SHARDS", width: 15},
		{title: "ITER", width: 11, right: true, drop: 4},
		{title: "LOSS", width: 6, right: true, drop: 2},
		{title: "POLICIES", width: 20, flex: true, drop: 5},
		{title: "PEND", width: 4, right: true},
		{title: "AGE", width: 6, right: true},
	}
	return v
}

func (v *jobsView) Title() string             { return "jobs" }
func (v *jobsView) ShortHelp() []key.Binding  { return v.c.keys.Jobs.ShortHelp() }
func (v *jobsView) FullHelp() [][]key.Binding { return v.c.keys.Jobs.FullHelp() }
func (v *jobsView) Filter() string            { return v.filt }
func (v *jobsView) SetFilter(f string)        { v.filt = f; v.built = false }
func (v *jobsView) click(x, y int)            { v.refresh(); v.tbl.click(y - 1) }
func (v *jobsView) setSort(by int, d bool)    { v.sortBy, v.desc, v.built = by, d, false }

func (v *jobsView) selected() string {
	v.refresh()
	if v.tbl.cursor < len(v.rows) {
		return v.rows[v.tbl.cursor].GetName()
	}
	return ""
}

func (v *jobsView) refresh() {
	if v.built && v.builtAt == v.c.dataVer {
		return
	}
	keep := ""
	if v.tbl.cursor < len(v.rows) {
		keep = v.rows[v.tbl.cursor].GetName()
	}
	v.rows = v.rows[:0]
	f := strings.ToLower(v.filt)
	for _, j := range v.c.data.jobs {
		if f == "" || strings.Contains(strings.ToLower(j.GetName()+" "+j.GetState()+" "+j.GetModel()), f) {
			v.rows = append(v.rows, j)
		}
	}
	less := func(a, b *consolepb.JobView) bool {
		switch jobSorts[v.sortBy] {
		case "state":
			if a.GetState() != b.GetState() {
				return a.GetState() < b.GetState()
			}
		case "age":
			ta, tb := a.GetSubmitted().AsTime(), b.GetSubmitted().AsTime()
			if !ta.Equal(tb) {
				return ta.After(tb) // youngest first
			}
		case "throughput":
			if a.GetThroughput() != b.GetThroughput() {
				return a.GetThroughput() > b.GetThroughput()
			}
		case "progress":
			pa, pb := progress(a), progress(b)
			if pa != pb {
				return pa > pb
			}
		}
		return a.GetName() < b.GetName()
	}
	sort.SliceStable(v.rows, func(i, j int) bool {
		if v.desc {
			return less(v.rows[j], v.rows[i])
		}
		return less(v.rows[i], v.rows[j])
	})
	v.tbl.set(len(v.rows), v.row)
	for i, j := range v.rows {
		if j.GetName() == keep {
			v.tbl.cursor = i
			v.tbl.clamp()
		}
	}
	v.built, v.builtAt = true, v.c.dataVer
}

func progress(j *consolepb.JobView) float64 {
	if j.GetShardsTotal() <= 0 {
		return 0
	}
	return float64(j.GetShardsDone()) / float64(j.GetShardsTotal())
}

func (c *shared) stateStyle(state string) *lipgloss.Style {
	switch state {
	case "running":
		return &c.st.ok
	case "pending", "queued", "starting", "restarting", "proposed":
		return &c.st.warn
	case "failed", "lost", "rejected", "expired", "diverged":
		return &c.st.straggler
	case "completed", "done", "applied":
		return &c.st.accent
	case "killed", "stopped", "removed":
		return &c.st.muted
	}
	return nil
}

func pendingActions(j *consolepb.JobView) int {
	n := 0
	for _, a := range j.GetActions() {
		if a.GetState() == "proposed" {
			n++
		}
	}
	return n
}

// policyModes is "antdt-nd auto · psld off".
func policyModes(j *consolepb.JobView) string {
	parts := make([]string, 0, len(j.GetPolicies()))
	for _, p := range j.GetPolicies() {
		parts = append(parts, p.GetName()+" "+p.GetMode())
	}
	return strings.Join(parts, " · ")
}

func (v *jobsView) row(i int) []cell {
	j := v.rows[i]
	now := v.c.now()
	end := now
	if e := j.GetEnded(); e != nil && e.Seconds > 0 {
		end = e.AsTime()
	}
	start := j.GetStarted()
	if start == nil || start.Seconds == 0 {
		start = j.GetSubmitted()
	}
	ageText := ""
	if start != nil && start.Seconds > 0 {
		ageText = age(end.Sub(start.AsTime()))
	}
	pend := ""
	var pendStyle *lipgloss.Style
	if n := pendingActions(j); n > 0 {
		pend, pendStyle = fmt.Sprint(n), &v.c.st.action
	}
	iter := ""
	if j.GetIteration() > 0 || j.GetIterations() > 0 {
		iter = fmt.Sprint(j.GetIteration())
		if j.GetIterations() > 0 {
			iter += "/" + fmt.Sprint(j.GetIterations())
		}
	}
	loss := lossText(j.GetLoss())
	return []cell{
		{text: j.GetName()},
		{text: j.GetState(), style: v.c.stateStyle(j.GetState())},
		{text: j.GetModel()},
		{text: fmt.Sprintf("%d/%d", j.GetWorkers(), j.GetServers())},
		{text: rate(j.GetThroughput())},
		{text: bar(j.GetShardsDone(), j.GetShardsTotal(), 10) + " " + pct(j.GetShardsDone(), j.GetShardsTotal())},
		{text: iter},
		{text: loss},
		{text: policyModes(j), style: &v.c.st.muted},
		{text: pend, style: pendStyle},
		{text: ageText},
	}
}

// Init does nothing: the view draws from the shared context's data.
func (v *jobsView) Init() tea.Cmd { return nil }

// Update takes the keys the root model did not, and clicks (coordinates in the view's area).
func (v *jobsView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	return v, route(msg, v.key, v.click)
}

// View draws the view in the area SetSize gave it.
func (v *jobsView) View() string { return v.render(v.w, v.h) }

func (v *jobsView) key(msg tea.KeyMsg) tea.Cmd {
	v.refresh()
	k := v.c.keys
	if v.tbl.navigate(msg, k.Global) {
		return nil
	}
	switch {
	case key.Matches(msg, k.Jobs.Open):
		if j := v.selected(); j != "" {
			return func() tea.Msg { return navigateMsg{to: viewJob, job: j} }
		}
	case key.Matches(msg, k.Jobs.Sort):
		v.setSort((v.sortBy+1)%len(jobSorts), v.desc)
	case key.Matches(msg, k.Jobs.Reverse):
		v.setSort(v.sortBy, !v.desc)
	case key.Matches(msg, k.Jobs.Kill):
		j := v.selected()
		if j == "" {
			return nil
		}
		v.c.modal = &confirmDialog{
			title: "kill job",
			body:  fmt.Sprintf("Kill job %s?\nIts servers and workers stop; its state and logs stay.", j),
			yes: func() tea.Cmd {
				return v.c.send("kill "+j, &consolepb.Command{Kind: &consolepb.Command_KillJob{KillJob: &consolepb.KillJob{Job: j}}}, nil, nil)
			},
		}
	}
	return nil
}

func (v *jobsView) render(w, h int) string {
	v.refresh()
	dir := "↑"
	if v.desc {
		dir = "↓"
	}
	title := fmt.Sprintf("jobs (%d) · sort %s %s", len(v.rows), jobSorts[v.sortBy], dir)
	if v.filt != "" {
		title += fmt.Sprintf(" · filter %q", v.filt)
	}
	if len(v.rows) == 0 {
		msg := "no jobs yet: press " + v.c.keys.Global.Launch.Help().Key + " or type :launch to start one"
		if v.filt != "" {
			msg = "no job matches " + fmt.Sprintf("%q", v.filt) + " (esc clears the filter)"
		} else if v.c.dataVer == 0 {
			msg = "waiting for the scheduler…"
		}
		return v.c.box(title, v.tbl.render(&v.c.st, w-2, 1)+"\n\n  "+v.c.st.muted.Render(msg), w, h, true)
	}
	th := h
	if h >= 16 { // room to spare: the selected job's details below the list
		th = min(max(len(v.rows)+3, 8), h/2)
	}
	out := v.c.box(title, v.tbl.render(&v.c.st, w-2, th-2), w, th, true)
	if th < h {
		out += "\n" + v.preview(w, h-th)
	}
	return out
}

// preview describes the selected job: what it runs, its progress, policies and pending actions.
func (v *jobsView) preview(w, h int) string {
	st := &v.c.st
	j := v.rows[v.tbl.cursor]
	label := func(l string) string { return st.muted.Render(fmt.Sprintf("%-10s", l)) }
	sep := st.muted.Render(" · ")
	lines := []string{
		label("job") + st.title.Render(j.GetName()) + sep + v.c.styled(v.c.stateStyle(j.GetState()), j.GetState()) + sep + orNone(j.GetModel()) + sep + orNone(j.GetSync()),
		label("cluster") + plural(int64(j.GetServers()), "server") + ", " + plural(int64(j.GetWorkers()), "worker") + fmt.Sprintf(", global batch %d", j.GetGlobalBatch()),
		label("progress") + fmt.Sprintf("iteration %d/%d · shards %s %d/%d (todo %d, doing %d) · %s",
			j.GetIteration(), j.GetIterations(), bar(j.GetShardsDone(), j.GetShardsTotal(), 20), j.GetShardsDone(), j.GetShardsTotal(),
			j.GetShardsTodo(), j.GetShardsDoing(), rate(j.GetThroughput())),
	}
	if j.GetLoss() != 0 || j.GetAccuracy() > 0 {
		q := "loss " + lossText(j.GetLoss())
		if j.GetAccuracy() > 0 {
			q += fmt.Sprintf(" · accuracy %.1f%%", 100*j.GetAccuracy())
		}
		lines = append(lines, label("model")+q)
	}
	if j.GetError() != "" {
		lines = append(lines, label("error")+st.errText.Render(j.GetError()))
	}
	for i, p := range j.GetPolicies() {
		l := ""
		if i == 0 {
			l = "policies"
		}
		lines = append(lines, label(l)+fmt.Sprintf("%-15s %-8s %s", p.GetName(), p.GetMode(), st.muted.Render(kv(p.GetParams()))))
	}
	n := 0
	for _, a := range j.GetActions() {
		if a.GetState() != "proposed" {
			continue
		}
		l := ""
		if n == 0 {
			l = "pending"
		}
		n++
		lines = append(lines, label(l)+st.action.Render(a.GetId()+" "+a.GetKind()+" "+a.GetTarget())+st.muted.Render(" · ")+a.GetReason())
	}
	lines = append(lines, "", st.muted.Render("enter opens the job · A its actions · P its policies"))
	return v.c.box("selected", strings.Join(lines, "\n"), w, h, false)
}
