package tui

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/tui/chart"
	"github.com/kelpie/kelpie/tui/heatmap"
)

type panel int

const (
	panelNodes panel = iota
	panelHeatmap
	panelCharts
	panelPS
	numPanels
)

// jobView is one job: summary and shard progress, the node table with sparklines, the straggler
// heatmap, BPT and speed charts, and the PS panel. Panels are drawn from caches keyed by the data
// version, their size and the theme, so moving the cursor redraws the table only.
type jobView struct {
	c *shared
	size
	tbl       table
	focus     panel
	maximised bool
	sortBy    int
	filt      string

	job   *consolepb.JobView
	nodes []*consolepb.NodeView // filtered and sorted
	// windowed: the scheduler sent a window of the rows (ViewWindow),
	// sorted and filtered; row first+i of the table is nodes[i].
	windowed bool
	first    int
	builtAt  uint64
	built    bool
	builtJb  string

	sparkMax map[string]float64 // per role: the scale shared by that role's sparklines
	sparks   map[string]string  // per node: its drawn sparkline, until the data changes
	hm       heatmap.Renderer
	hmRows   []heatmap.Row
	cache    map[panel]panelCache
}

type panelCache struct {
	dataVer  uint64
	themeVer int
	job      string
	w, h     int
	focused  bool
	out      string
}

var nodeSorts = []string{"as reported", "ratio", "name"}

func newJobView(c *shared) *jobView {
	v := &jobView{c: c, cache: map[panel]panelCache{}}
	v.tbl.cols = []column{
		{title: "NODE", width: 10},
		{title: "ROLE", width: 6, drop: 2},
		{title: "HOST", width: 12, drop: 7},
		{title: "STATE", width: 8},
		{title: "BS", width: 4, right: true},
		{title: "BPT S", width: 6, right: true},
		{title: "BPT L", width: 6, right: true, drop: 5},
		{title: "TREND", width: 16, drop: 4},
		{title: "×MEAN", width: 5, right: true, drop: 3},
		{title: "CLASS", width: 11},
		{title: "SUP", width: 3, drop: 6},
		{title: "RST", width: 3, right: true, drop: 8},
		{title: "ITER", width: 7, right: true, drop: 9},
	}
	return v
}

func (v *jobView) Title() string             { return "job" }
func (v *jobView) ShortHelp() []key.Binding  { return v.c.keys.Job.ShortHelp() }
func (v *jobView) FullHelp() [][]key.Binding { return v.c.keys.Job.FullHelp() }
func (v *jobView) Filter() string            { return v.filt }
func (v *jobView) SetFilter(f string)        { v.filt = f; v.built = false }
func (v *jobView) click(x, y int)            { v.refresh(); v.tbl.click(y - 3) } // below the summary and the border

func (v *jobView) refresh() {
	if v.built && v.builtAt == v.c.dataVer && v.builtJb == v.c.job {
		return
	}
	keep := ""
	if n := v.selectedNode(); n != nil {
		keep = n.GetName()
	}
	v.job = v.c.data.jobs[v.c.job]
	if r := v.c.replaying(v.c.job); r != nil {
		cols := 60
		if rows := v.job.GetHeatmap().GetRows(); len(rows) > 0 && len(rows[0].GetCells()) > 0 {
			cols = len(rows[0].GetCells())
		}
		v.job = r.view(cols)
	}
	v.nodes = v.nodes[:0]
	v.windowed = v.job.GetNodesTotal() > 0 || v.job.GetNodesOffset() > 0
	f := strings.ToLower(v.filt)
	if v.windowed {
		f = "" // the scheduler filtered and sorted the window
	}
	v.sparkMax = map[string]float64{}
	if v.builtAt != v.c.dataVer || v.builtJb != v.c.job || v.sparks == nil {
		v.sparks = map[string]string{}
	}
	for _, n := range v.job.GetNodes() {
		for _, s := range n.GetSparkline() {
			v.sparkMax[n.GetRole()] = math.Max(v.sparkMax[n.GetRole()], s)
		}
		if f == "" || strings.Contains(strings.ToLower(n.GetName()+" "+n.GetRole()+" "+n.GetState()+" "+n.GetClass()+" "+n.GetHost()), f) {
			v.nodes = append(v.nodes, n)
		}
	}
	switch sortKey := nodeSorts[v.sortBy]; {
	case v.windowed:
	case sortKey == "ratio":
		sort.SliceStable(v.nodes, func(i, j int) bool { return v.nodes[i].GetRatio() > v.nodes[j].GetRatio() })
	case sortKey == "name":
		sort.SliceStable(v.nodes, func(i, j int) bool { return v.nodes[i].GetName() < v.nodes[j].GetName() })
	}
	if v.builtJb != v.c.job {
		v.tbl.cursor, v.tbl.offset = 0, 0
	}
	rows, first := len(v.nodes), 0
	if v.windowed {
		rows, first = int(v.job.GetNodesTotal()), int(v.job.GetNodesOffset())
	}
	v.first = first
	v.tbl.set(rows, v.row)
	for i, n := range v.nodes {
		if n.GetName() == keep && !v.windowed {
			v.tbl.cursor = i
			v.tbl.clamp()
		}
	}
	v.hmRows = v.hmRows[:0]
	for _, r := range v.job.GetHeatmap().GetRows() {
		v.hmRows = append(v.hmRows, heatmap.Row{Label: r.GetNode(), Cells: r.GetCells()})
	}
	v.built, v.builtAt, v.builtJb = true, v.c.dataVer, v.c.job
}

func (v *jobView) selectedNode() *consolepb.NodeView {
	if i := v.tbl.cursor - v.first; i >= 0 && i < len(v.nodes) {
		return v.nodes[i]
	}
	return nil
}

// classStyle is the colour of a straggler class.
func (c *shared) classStyle(class string) *lipgloss.Style {
	switch class {
	case "persistent":
		return &c.st.straggler
	case "transient":
		return &c.st.warn
	case "healthy":
		return &c.st.ok
	}
	return &c.st.muted
}

// classText marks stragglers so they stand out without colour too.
func classText(class string) string {
	switch class {
	case "persistent":
		return "persistent▲"
	case "transient":
		return "transient△"
	case "":
		return "unknown"
	}
	return class
}

func (v *jobView) row(i int) []cell {
	if i -= v.first; i < 0 || i >= len(v.nodes) {
		return []cell{{text: "…", style: &v.c.st.muted}} // outside the window the scheduler sent: on its way
	}
	n := v.nodes[i]
	cs := v.c.classStyle(n.GetClass())
	strag := n.GetClass() == "persistent" || n.GetClass() == "transient"
	var nameStyle *lipgloss.Style
	if strag {
		nameStyle = cs
	}
	spark, ok := v.sparks[n.GetName()]
	if !ok { // ntcharts draws cell by cell: once per node and data version, not on every cursor move
		spark = chart.Sparkline(n.GetSparkline(), 16, v.sparkMax[n.GetRole()])
		v.sparks[n.GetName()] = spark
	}
	if strag {
		spark = cs.Render(spark)
	} else {
		spark = v.c.st.accent.Render(spark)
	}
	sup := ""
	if n.GetRole() == "server" && n.GetSuperior() {
		sup = "★"
	}
	ratio := ""
	if n.GetRatio() > 0 {
		ratio = fmt.Sprintf("%.2f", n.GetRatio())
	}
	bs := ""
	if n.GetBatchSize() > 0 {
		bs = fmt.Sprint(n.GetBatchSize())
		if n.GetAccumulation() > 1 {
			bs += fmt.Sprintf("×%d", n.GetAccumulation())
		}
	}
	rst := ""
	if n.GetRestarts() > 0 {
		rst = fmt.Sprint(n.GetRestarts())
	}
	return []cell{
		{text: n.GetName(), style: nameStyle},
		{text: n.GetRole(), style: &v.c.st.muted},
		{text: n.GetHost(), style: &v.c.st.muted},
		{text: n.GetState(), style: v.c.stateStyle(n.GetState())},
		{text: bs},
		{text: secs(n.GetBptShortS())},
		{text: secs(n.GetBptLongS())},
		{text: spark, raw: true},
		{text: ratio, style: nameStyle},
		{text: classText(n.GetClass()), style: cs},
		{text: sup, style: &v.c.st.ok},
		{text: rst, style: &v.c.st.warn},
		{text: fmt.Sprint(n.GetIteration()), style: &v.c.st.muted},
	}
}

// Init does nothing: the view draws from the shared context's data.
func (v *jobView) Init() tea.Cmd { return nil }

// Update takes the keys the root model did not, and clicks (coordinates in the view's area).
func (v *jobView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	return v, route(msg, v.key, v.click)
}

// View draws the view in the area SetSize gave it.
func (v *jobView) View() string { return v.render(v.w, v.h) }

func (v *jobView) key(msg tea.KeyMsg) tea.Cmd {
	v.refresh()
	k := v.c.keys
	if (v.focus == panelNodes || !v.maximised) && v.tbl.navigate(msg, k.Global) {
		return nil
	}
	if cmd, ok := v.replayKey(msg); ok {
		return cmd
	}
	switch {
	case key.Matches(msg, k.Job.NextPanel):
		v.focus = (v.focus + 1) % numPanels
	case key.Matches(msg, k.Job.PrevPanel):
		v.focus = (v.focus + numPanels - 1) % numPanels
	case key.Matches(msg, k.Job.Maximise):
		v.maximised = !v.maximised
	case key.Matches(msg, k.Job.Sort):
		v.sortBy = (v.sortBy + 1) % len(nodeSorts)
		v.built = false
	case key.Matches(msg, k.Job.Restart):
		n := v.selectedNode()
		if n == nil {
			return nil
		}
		v.c.modal = restartDialog(v.c, v.c.job, n.GetName())
	case key.Matches(msg, k.Job.Stacks), key.Matches(msg, k.Job.SavedStacks):
		saved := key.Matches(msg, k.Job.SavedStacks)
		title := "stacks of " + v.c.job
		if saved {
			title = "saved stacks of " + v.c.job
		}
		return v.c.askTriage(title, &consolepb.Command{Kind: &consolepb.Command_Stacks{Stacks: &consolepb.GetStacks{Job: v.c.job, Saved: saved}}})
	case key.Matches(msg, k.Job.Probe):
		n := v.selectedNode()
		if n == nil {
			return nil
		}
		return v.c.askTriage("probe of "+n.GetName(), &consolepb.Command{Kind: &consolepb.Command_Probe{Probe: &consolepb.GetProbe{Job: v.c.job, Node: n.GetName()}}})
	default:
		if s := msg.String(); len(s) == 1 && s[0] >= '1' && s[0] < '1'+byte(numPanels) {
			v.focus = panel(s[0] - '1')
		}
	}
	return nil
}

// replayKey takes the replay keys: p pauses at the present (or the end)
// and leaves again; ←/→ step a bucket and [ ] jump to the previous and next
// action, entering the replay first if needed.
func (v *jobView) replayKey(msg tea.KeyMsg) (tea.Cmd, bool) {
	k := v.c.keys
	var move func(*replay)
	switch {
	case key.Matches(msg, k.Job.Replay):
		if v.c.replay != nil && v.c.replay.job == v.c.job {
			v.c.stopReplay()
			return nil, true
		}
		return v.c.startReplay(v.c.job, nil), true
	case key.Matches(msg, k.Job.StepBack):
		move = func(r *replay) { r.step(-1) }
	case key.Matches(msg, k.Job.StepForward):
		move = func(r *replay) { r.step(1) }
	case key.Matches(msg, k.Job.PrevAction):
		move = func(r *replay) {
			if !r.jumpAction(-1) {
				v.c.setFlash(flashInfo, "no action before this moment")
			}
		}
	case key.Matches(msg, k.Job.NextAction):
		move = func(r *replay) {
			if !r.jumpAction(1) {
				v.c.setFlash(flashInfo, "no action after this moment")
			}
		}
	default:
		return nil, false
	}
	if r := v.c.replaying(v.c.job); r != nil {
		move(r)
		v.c.dataVer++
		return nil, true
	}
	if v.c.replay != nil && v.c.replay.job == v.c.job {
		return nil, true // its history is on its way
	}
	return v.c.startReplay(v.c.job, move), true
}

// restartDialog confirms a KILL_RESTART of one node.
func restartDialog(c *shared, job, node string) modal {
	return &confirmDialog{
		title: "restart node",
		body:  fmt.Sprintf("Kill and restart %s of %s?\nIt loses its current iteration and rejoins at the next one.", node, job),
		yes: func() tea.Cmd {
			return c.send("restart "+node, triggerCmd(job, &consolepb.Action{Kind: "KILL_RESTART", Target: node}), nil, nil)
		},
	}
}

func triggerCmd(job string, a *consolepb.Action) *consolepb.Command {
	a.Job = job
	a.Policy = "operator"
	return &consolepb.Command{Kind: &consolepb.Command_Trigger{Trigger: &consolepb.TriggerAction{Job: job, Action: a}}}
}

// ---------------------------------------------------------------- layout

func (v *jobView) render(w, h int) string {
	v.refresh()
	if v.job == nil {
		msg := fmt.Sprintf("job %q is not known (yet): waiting for the scheduler, or :jobs to pick one", v.c.job)
		return v.c.box("job "+v.c.job, "\n  "+v.c.st.muted.Render(msg), w, h, true)
	}
	sum := v.summary(w)
	bh := h - 2
	var body string
	switch {
	case bh < 4:
		body = ""
	case v.maximised:
		body = v.panel(v.focus, w, bh)
	case w >= 140 && bh >= 30:
		// Top row: nodes | heatmap, as tall as the nodes need (up to 3/5); bottom row: charts | PS.
		lw := w * 11 / 20
		need := max(len(v.nodes)+3, len(v.hmRows)+4, 10)
		th := min(need, bh*3/5)
		cw := w * 3 / 5
		top := hjoin(v.panel(panelNodes, lw, th), v.panel(panelHeatmap, w-lw, th))
		bottom := hjoin(v.panel(panelCharts, cw, bh-th), v.panel(panelPS, w-cw, bh-th))
		body = top + "\n" + bottom
	default:
		nh := min(len(v.nodes)+3, bh/2)
		nh = max(nh, min(bh, 5))
		second := v.focus
		if second == panelNodes {
			second = panelHeatmap
		}
		body = v.panel(panelNodes, w, nh)
		if bh-nh >= 3 {
			body += "\n" + v.panel(second, w, bh-nh)
		}
	}
	return sum + "\n" + body
}

func (v *jobView) panel(p panel, w, h int) string {
	focused := v.focus == p
	if p == panelNodes { // the table moves with the cursor: not cached
		return v.nodesPanel(w, h, focused)
	}
	pc := v.cache[p]
	if pc.out != "" && pc.dataVer == v.c.dataVer && pc.themeVer == v.c.themeVer && pc.job == v.c.job &&
		pc.w == w && pc.h == h && pc.focused == focused {
		return pc.out
	}
	var out string
	switch p {
	case panelHeatmap:
		out = v.heatmapPanel(w, h, focused)
	case panelCharts:
		out = v.chartsPanel(w, h, focused)
	case panelPS:
		out = v.psPanel(w, h, focused)
	}
	v.cache[p] = panelCache{dataVer: v.c.dataVer, themeVer: v.c.themeVer, job: v.c.job, w: w, h: h, focused: focused, out: out}
	return out
}

// headerPart is one piece of a header line and how much it matters.
type headerPart struct {
	text string
	rank int
}

// fitParts joins the parts with sep, leaving out the lowest-ranked ones
// until the line fits in w cells (the first part always stays).
func fitParts(parts []headerPart, sep string, w int) string {
	parts = slices.Clone(parts)
	for {
		texts := make([]string, len(parts))
		for i, p := range parts {
			texts[i] = p.text
		}
		line := strings.Join(texts, sep)
		if lipgloss.Width(line) <= w || len(parts) <= 2 {
			return line
		}
		low := 0
		for i, p := range parts {
			if p.rank < parts[low].rank {
				low = i
			}
		}
		parts = slices.Delete(parts, low, low+1)
	}
}

func (v *jobView) panelTitle(p panel, text string) string {
	return fmt.Sprintf("[%d] %s", int(p)+1, text)
}

func (v *jobView) summary(w int) string {
	j, st := v.job, &v.c.st
	sep := st.muted.Render(" · ")
	// Each part with its rank: when the line is too narrow the lowest rank
	// goes first, so iteration, loss and throughput — what an operator
	// steers by — stay longest, after the name and state.
	var parts []headerPart
	add := func(rank int, text string) { parts = append(parts, headerPart{text: text, rank: rank}) }
	if r := v.c.replaying(v.c.job); r != nil {
		add(8, st.action.Render(r.label()))
	} else if v.c.replay != nil && v.c.replay.job == v.c.job {
		add(8, st.muted.Render("⏸ loading the timeline…"))
	}
	add(10, st.title.Render(j.GetName()))
	add(9, v.c.styled(v.c.stateStyle(j.GetState()), j.GetState()))
	if j.GetModel() != "" {
		add(1, j.GetModel())
	}
	if j.GetSync() != "" {
		add(2, j.GetSync())
	}
	add(3, plural(int64(j.GetWorkers()), "worker")+", "+plural(int64(j.GetServers()), "server"))
	if j.GetIterations() > 0 {
		add(7, fmt.Sprintf("iter %d/%d", j.GetIteration(), j.GetIterations()))
	} else if j.GetIteration() > 0 {
		add(7, fmt.Sprintf("iter %d", j.GetIteration()))
	}
	if l := lossText(j.GetLoss()); l != "" {
		add(6, "loss "+l)
	}
	if j.GetAccuracy() > 0 {
		add(4, fmt.Sprintf("accuracy %.1f%%", 100*j.GetAccuracy()))
	}
	add(5, rate(j.GetThroughput()))
	if s := since(j.GetStarted(), v.c.now()); s != "" && (j.GetEnded() == nil || j.GetEnded().Seconds == 0) && v.c.replaying(v.c.job) == nil {
		add(0, "up "+s)
	}
	line1 := fitParts(parts, sep, w)
	if j.GetError() != "" {
		line1 += sep + st.errText.Render(j.GetError())
	}
	if b := j.GetClusterBusy(); b != "" {
		line1 = st.warn.Render("⚠ cluster busy: "+b) + sep + line1
	}
	if h := hungText(j.GetHung(), w < 100); h != "" {
		if k := v.c.keys.Job.Stacks; w >= 100 && k.Enabled() {
			h += " — " + k.Help().Key + ": stacks" // an operator's way in
		}
		line1 = st.straggler.Render(h) + sep + line1
	}
	bw := 20
	if w < 100 {
		bw = 10
	}
	line2 := fmt.Sprintf("shards %s %d/%d  todo %d  doing %d  done %d",
		st.accent.Render(bar(j.GetShardsDone(), j.GetShardsTotal(), bw)), j.GetShardsDone(), j.GetShardsTotal(),
		j.GetShardsTodo(), j.GetShardsDoing(), j.GetShardsDone())
	gt := goodputText(j.GetGoodput(), bw)
	if gt != "" && w < 100 { // narrow: the ledger before the shard details
		line2 = fmt.Sprintf("shards %s %d/%d", st.accent.Render(bar(j.GetShardsDone(), j.GetShardsTotal(), bw/2)),
			j.GetShardsDone(), j.GetShardsTotal()) + sep + gt
		gt = ""
	}
	if n := pendingActions(j); n > 0 {
		line2 += "  " + st.action.Render(fmt.Sprintf("⚑ %d pending (A)", n))
	}
	if gt != "" {
		line2 += sep + gt
	}
	if pm := policyModes(j); pm != "" {
		line2 += sep + st.muted.Render(pm)
	}
	return fit(line1, w) + "\n" + fit(line2, w)
}

func (c *shared) styled(s *lipgloss.Style, text string) string {
	if s == nil {
		return text
	}
	return s.Render(text)
}

func (v *jobView) nodesPanel(w, h int, focused bool) string {
	title := fmt.Sprintf("nodes (%d) · sort %s", v.tbl.n, nodeSorts[v.sortBy])
	if v.filt != "" {
		title += fmt.Sprintf(" · filter %q", v.filt)
	}
	if len(v.nodes) == 0 && v.filt == "" {
		msg := "no nodes reported yet"
		return v.c.box(v.panelTitle(panelNodes, title), v.tbl.render(&v.c.st, w-2, 1)+"\n  "+v.c.st.muted.Render(msg), w, h, focused)
	}
	return v.c.box(v.panelTitle(panelNodes, title), v.tbl.render(&v.c.st, w-2, h-2), w, h, focused)
}

func (v *jobView) heatmapPanel(w, h int, focused bool) string {
	hm := v.job.GetHeatmap()
	title := fmt.Sprintf("straggler heatmap · %d nodes × %d buckets of %gs", len(v.hmRows), maxCells(v.hmRows), hm.GetBucketSeconds())
	if len(v.hmRows) == 0 {
		return v.c.box(v.panelTitle(panelHeatmap, "straggler heatmap"), "\n  "+v.c.st.muted.Render("no telemetry yet"), w, h, focused)
	}
	// The detail line under the map: why the stragglers are slow.
	// The detail lines under the map: why the stragglers are slow, as
	// many as leave the map 4 lines.
	why := causeLines(v.job.GetNodes())
	n := min(len(why), maxCauseLines, max(h-2-4, 0))
	if n < len(why) && n > 0 {
		why[n-1] += fmt.Sprintf(" (+%d more)", len(why)-n)
	}
	body := v.hm.Render(v.hmRows, heatmap.Options{Width: w - 2, Height: h - 2 - n, BucketSeconds: hm.GetBucketSeconds()}, v.c.palette)
	if n > 0 {
		body = strings.TrimRight(body, "\n")
		for _, l := range why[:n] {
			body += "\n" + v.c.st.straggler.Render(ansi.Truncate("cause · "+l, w-2, "…"))
		}
	}
	return v.c.box(v.panelTitle(panelHeatmap, title), body, w, h, focused)
}

func maxCells(rows []heatmap.Row) int {
	n := 0
	for _, r := range rows {
		n = max(n, len(r.Cells))
	}
	return n
}

// chartSeries picks up to 8 series with the prefix: the highest latest values (slowest workers),
// or with lowest, the lowest (slowest servers).
func chartSeries(all []*consolepb.Series, prefix string, lowest bool) []*consolepb.Series {
	var out []*consolepb.Series
	for _, s := range all {
		if strings.HasPrefix(s.GetName(), prefix) && len(s.GetValues()) > 0 {
			out = append(out, s)
		}
	}
	last := func(s *consolepb.Series) float64 { return s.GetValues()[len(s.GetValues())-1] }
	sort.SliceStable(out, func(i, j int) bool {
		if lowest {
			return last(out[i]) < last(out[j])
		}
		return last(out[i]) > last(out[j])
	})
	if len(out) > 8 {
		out = out[:8]
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func (v *jobView) lineChart(title string, series []*consolepb.Series, prefix string, w, h int) string {
	st := &v.c.st
	if h < 3 || w < 10 {
		return block("", w, h)
	}
	if len(series) == 0 {
		return block(st.title.Render(title)+"\n"+st.muted.Render("no data yet"), w, h)
	}
	scale, unit := 1.0, series[0].GetUnit()
	if unit == "B/s" || unit == "bytes/s" {
		scale, unit = 1e-6, "MB/s"
	}
	cs := make([]chart.Series, len(series))
	var legend []string
	for i, s := range series {
		style := st.series[i%len(st.series)]
		vals := notYet(s.GetValues())
		if scale != 1 {
			for k, x := range vals {
				vals[k] = x * scale
			}
		}
		name := strings.TrimPrefix(s.GetName(), prefix)
		cs[i] = chart.Series{Name: name, Values: vals, Style: style}
		legend = append(legend, style.Render("━ "+name))
	}
	head := st.title.Render(title)
	if unit != "" {
		head += st.muted.Render(" (" + unit + ")")
	}
	lines := chart.Lines(cs, chart.Options{Width: w, Height: h - 2, AxisStyle: st.muted})
	return fit(head, w) + "\n" + lines + "\n" + fit(strings.Join(legend, " "), w)
}

// notYet copies a chart series with its leading zeros made NaN: a node
// added mid-run has no BPT or speed before it existed, and the chart draws
// nothing there instead of a line at 0 (a BPT or speed is never 0 when
// measured).
func notYet(vals []float64) []float64 {
	out := slices.Clone(vals)
	for k, x := range out {
		if x != 0 {
			break
		}
		out[k] = math.NaN()
	}
	return out
}

func (v *jobView) chartsPanel(w, h int, focused bool) string {
	iw, ih := w-2, h-2
	charts := v.job.GetCharts()
	bpt := chartSeries(charts, "bpt/", false)
	speed := chartSeries(charts, "speed/", true)
	var body string
	if iw >= 90 {
		lw := iw / 2
		body = hjoin(block(v.lineChart("BPT per worker", bpt, "bpt/", lw-1, ih), lw-1, ih), " ",
			block(v.lineChart("speed per server", speed, "speed/", iw-lw, ih), iw-lw, ih))
	} else {
		top := ih / 2
		body = v.lineChart("BPT per worker", bpt, "bpt/", iw, top) + "\n" + v.lineChart("speed per server", speed, "speed/", iw, ih-top)
	}
	return v.c.box(v.panelTitle(panelCharts, "charts"), body, w, h, focused)
}

func (v *jobView) psPanel(w, h int, focused bool) string {
	if ex := v.job.GetExchange(); ex != nil {
		return v.allreducePanel(ex, w, h, focused)
	}
	st := &v.c.st
	mon := v.job.GetMonitor()
	sep := st.muted.Render(" · ")
	line1 := strings.Join([]string{
		"mean BPT " + secs(mon.GetMeanBptS()),
		fmt.Sprintf("speed variance %.2f", mon.GetSpeedVariance()),
		fmt.Sprintf("λ %g", mon.GetLambda()),
		fmt.Sprintf("windows %gs / %gs", mon.GetWindowTransientS(), mon.GetWindowPersistentS()),
	}, sep)
	if mon.GetScaleOut() {
		line1 += sep + st.action.Render("scale-out advised")
	}
	var servers []*consolepb.NodeView
	for _, n := range v.job.GetNodes() {
		if n.GetRole() == "server" {
			servers = append(servers, n)
		}
	}
	line2 := fmt.Sprintf("superior set: %s (%d of %d servers)", orNone(strings.Join(mon.GetSuperior(), ", ")), len(mon.GetSuperior()), len(servers))
	lines := []string{line1, line2, ""}
	hdr := fmt.Sprintf("%-10s %9s %8s %11s %6s %5s %3s", "SERVER", "α s/B", "β", "SPEED", "BLOCKS", "×MEAN", "SUP")
	lines = append(lines, st.header.Render(hdr))
	for _, s := range servers {
		sup := ""
		if s.GetSuperior() {
			sup = "★"
		}
		row := fmt.Sprintf("%-10s %9.2e %8s %11s %6d %5.2f %3s", s.GetName(), s.GetAlpha(), secs(s.GetBeta()),
			bytesPerSec(s.GetSpeed()), s.GetBlocks(), s.GetRatio(), sup)
		if s.GetClass() == "persistent" || s.GetClass() == "transient" {
			row = v.c.classStyle(s.GetClass()).Render(row)
		}
		lines = append(lines, row)
	}
	return v.c.box(v.panelTitle(panelPS, "parameter servers"), strings.Join(lines, "\n"), w, h, focused)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// windowSorts is the scheduler's name of each node order (ViewWindow.sort).
var windowSorts = map[string]string{"as reported": "", "ratio": "ratio", "name": "name"}

// wantWindow is the part of the job the view shows, for the subscription
// (ViewWindow): the rows around the table's in pages of its height, with a
// page on either side, sorted and filtered as the view is; as many heatmap
// rows as the screen has lines; the eight series each chart draws.
// Replaying needs no window (the timeline has every node).
func (v *jobView) wantWindow(screenH int) *consolepb.ViewWindow {
	page := max(v.tbl.height, 10)
	off := max(v.tbl.offset/page*page-page, 0)
	return &consolepb.ViewWindow{Sort: windowSorts[nodeSorts[v.sortBy]], Filter: v.filt, Offset: int32(off), Limit: int32(3 * page),
		HeatmapRows: int32(max(screenH, 10)), ChartSeries: 8}
}
