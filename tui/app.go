package tui

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/kelpie/kelpie/proto/kelpiepb"
	"github.com/kelpie/kelpie/themes"
	"github.com/kelpie/kelpie/tui/client"
	"github.com/kelpie/kelpie/tui/keys"
)

type viewID int

const (
	viewJobs viewID = iota
	viewJob
	viewActions
	viewPolicies
	viewEvents
	viewLaunch
)

// view is one screen of the console. It reads the shared context's data when it renders and
// caches what it can; update gets the keys the app did not take.
type view interface {
	title() string
	update(msg tea.KeyMsg) tea.Cmd
	render(w, h int) string
	keyMap() helpKeyMap
	filterable() bool
	setFilter(f string)
	filter() string
	capturing() bool // a form that has the keyboard (q and / are text)
	click(x, y int)
}

// refresh rates offered by + and -.
var rates = []float64{0.5, 1, 2, 4, 8, 10, 20}

// config is what newApp needs; Run fills it from Options and the config file, tests directly.
type config struct {
	theme     themes.Theme
	keys      keys.Map
	now       func() time.Time
	backend   Backend
	readOnly  bool
	addr      string
	refreshHz float64
	job       string // open this job first
	mouse     bool
}

// App is the console's root model.
type App struct {
	c        *shared
	live     *store
	frozen   bool
	pending  bool // live holds data not yet shown
	ticking  bool // a throttle tick is on its way
	counting bool // a countdown tick is on its way (while disconnected)
	rate     int  // index into rates
	status   client.StatusMsg
	welcome  *kelpiepb.Welcome
	addr     string
	optRO    bool
	scope    []string
	scoped   bool // scope has been sent at least once
	mouse    bool

	w, h       int
	views      map[viewID]view
	cur        viewID
	stack      []viewID
	showHelp   bool
	quitDialog bool
	prompt     *prompt
	helpModel  help.Model

	cache string
	dirty bool
}

// prompt is the footer's command (:) or filter (/) line.
type prompt struct {
	kind rune // ':' or '/'
	in   input
}

type (
	applyTickMsg     struct{}
	countdownTickMsg struct{}
	// commandDoneMsg is the result of a command sent with send.
	commandDoneMsg struct {
		what string
		res  *kelpiepb.CommandResult
		err  error
		form *form                                 // the form that sent it: a refusal is shown there
		onOK func(*kelpiepb.CommandResult) tea.Cmd // what to do once it succeeded
	}
	subscribeErrMsg struct{ err error }
)

func newApp(cfg config) *App {
	if cfg.now == nil {
		cfg.now = time.Now
	}
	c := &shared{keys: cfg.keys, now: cfg.now, backend: cfg.backend, readOnly: cfg.readOnly, data: newStore()}
	if err := c.setTheme(cfg.theme); err != nil {
		t, _ := themes.Get(themes.Default)
		_ = c.setTheme(t)
	}
	c.keys.SetReadOnly(cfg.readOnly)
	m := &App{
		c: c, live: newStore(), addr: cfg.addr, optRO: cfg.readOnly, mouse: cfg.mouse,
		status: client.StatusMsg{State: client.Connecting, Addr: cfg.addr}, dirty: true,
		helpModel: help.New(),
	}
	m.rate = 3
	best := math.Inf(1)
	if cfg.refreshHz > 0 {
		for i, r := range rates {
			if d := math.Abs(r - cfg.refreshHz); d < best {
				best, m.rate = d, i
			}
		}
	}
	m.views = map[viewID]view{
		viewJobs:     newJobsView(c),
		viewJob:      newJobView(c),
		viewActions:  newActionsView(c),
		viewPolicies: newPoliciesView(c),
		viewEvents:   newEventsView(c),
		viewLaunch:   newLaunchView(c),
	}
	m.styleHelp()
	if cfg.job != "" {
		c.job = cfg.job
		m.stack = []viewID{viewJobs}
		m.cur = viewJob
	}
	m.scope, _ = m.wantScope() // the client's first subscription (see initialScope)
	m.scoped = true
	return m
}

// initialScope is the subscription the client must start with, so the first view has its data
// without a second Subscribe.
func (m *App) initialScope() []string { return m.scope }

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

// Init does nothing: the client subscribes to initialScope when it connects.
func (m *App) Init() tea.Cmd { return nil }

// wantScope is the subscription the current view needs: every job for the jobs list, the open
// job (with its nodes, heatmap and charts) for the job, actions and policies views.
func (m *App) wantScope() ([]string, bool) {
	switch m.cur {
	case viewJobs:
		return nil, true
	case viewJob, viewActions, viewPolicies:
		if m.c.job != "" {
			return []string{m.c.job}, true
		}
		return nil, true
	}
	return nil, false
}

func (m *App) resubscribe() tea.Cmd {
	want, ok := m.wantScope()
	if !ok || (m.scoped && strings.Join(want, "\x00") == strings.Join(m.scope, "\x00")) {
		return nil
	}
	m.scope, m.scoped = want, true
	b := m.c.backend
	if b == nil {
		return nil
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Subscribe(ctx, want); err != nil {
			return subscribeErrMsg{err}
		}
		return nil
	}
}

// send runs a command on the backend and reports it as a commandDoneMsg.
func (c *shared) send(what string, cmd *kelpiepb.Command, f *form, onOK func(*kelpiepb.CommandResult) tea.Cmd) tea.Cmd {
	b := c.backend
	return func() tea.Msg {
		if b == nil {
			return commandDoneMsg{what: what, err: client.ErrNotConnected, form: f}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := b.Send(ctx, cmd)
		return commandDoneMsg{what: what, res: res, err: err, form: f, onOK: onOK}
	}
}

func (m *App) interval() time.Duration {
	return time.Duration(float64(time.Second) / rates[m.rate])
}

// maybeApply shows new data now, unless it was shown less than one refresh interval ago (then the
// pending tick will): the first change after a quiet spell appears at once, a stream at the rate.
func (m *App) maybeApply() tea.Cmd {
	if m.frozen || m.ticking || !m.pending {
		return nil
	}
	m.apply()
	m.ticking = true
	return tea.Tick(m.interval(), func(time.Time) tea.Msg { return applyTickMsg{} })
}

func (m *App) apply() {
	m.c.data = m.live.clone()
	m.c.dataVer++
	m.pending = false
}

func (m *App) setReadOnly() {
	ro := m.optRO || (m.welcome != nil && m.welcome.GetRole() == "viewer")
	m.c.readOnly = ro
	m.c.keys.SetReadOnly(ro)
}

// Update handles one message; see the package doc for the order keys are tried in.
func (m *App) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	m.dirty = true
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.w, m.h = msg.Width, msg.Height
		return m, nil
	case client.WelcomeMsg:
		m.welcome = msg.Welcome
		m.setReadOnly()
		return m, nil
	case client.SnapshotMsg:
		m.live.applySnapshot(msg.Scope, msg.Snapshot)
		m.pending = true
		return m, m.maybeApply()
	case client.DeltaMsg:
		m.live.applyDelta(msg.Delta)
		m.pending = true
		return m, m.maybeApply()
	case client.StatusMsg:
		m.status = msg // after a reconnection the client re-sends the last subscription itself
		if msg.State == client.Disconnected && !m.counting {
			m.counting = true
			return m, tea.Tick(time.Second, func(time.Time) tea.Msg { return countdownTickMsg{} })
		}
		return m, nil
	case applyTickMsg:
		m.ticking = false
		if !m.pending || m.frozen {
			m.dirty = false
			return m, nil
		}
		return m, m.maybeApply()
	case countdownTickMsg:
		m.counting = false
		if m.status.State != client.Disconnected {
			m.dirty = false
			return m, nil
		}
		m.counting = true
		return m, tea.Tick(time.Second, func(time.Time) tea.Msg { return countdownTickMsg{} })
	case commandDoneMsg:
		return m, m.commandDone(msg)
	case subscribeErrMsg:
		m.c.setFlash(flashErr, "subscribe: "+msg.err.Error())
		m.scoped = false
		return m, nil
	case fileLoadedMsg:
		return m, m.views[viewLaunch].(*launchView).fileLoaded(msg)
	case navigateMsg:
		return m, m.goTo(msg.to, msg.job)
	case backMsg:
		return m, m.back()
	case tea.MouseMsg:
		return m, m.mouseMsg(msg)
	case tea.KeyMsg:
		return m, m.key(msg)
	}
	m.dirty = false
	return m, nil
}

// navigateMsg asks the app to open a view (views send it after a command succeeds).
type navigateMsg struct {
	to  viewID
	job string
}

func (m *App) commandDone(msg commandDoneMsg) tea.Cmd {
	failed := msg.err != nil || msg.res == nil || !msg.res.GetOk()
	reason := ""
	switch {
	case msg.err != nil:
		reason = msg.err.Error()
	case msg.res == nil:
		reason = "no result"
	case !msg.res.GetOk():
		reason = msg.res.GetError()
		if reason == "" {
			reason = fmt.Sprintf("refused (code %d)", msg.res.GetCode())
		}
	}
	if msg.form != nil {
		msg.form.busy = false
		if failed {
			msg.form.err = reason // inline, as the API returned it
			return nil
		}
		if d, ok := m.c.modal.(*formDialog); ok && d.form == msg.form {
			m.c.modal = nil
		}
	}
	if failed {
		m.c.setFlash(flashErr, msg.what+": "+reason)
		return nil
	}
	m.c.setFlash(flashOK, msg.what+": done")
	if msg.onOK != nil {
		return msg.onOK(msg.res)
	}
	return nil
}

func (m *App) mouseMsg(msg tea.MouseMsg) tea.Cmd {
	if !m.mouse || m.c.modal != nil || m.showHelp || m.quitDialog {
		m.dirty = false
		return nil
	}
	v := m.views[m.cur]
	switch {
	case msg.Button == tea.MouseButtonWheelUp && msg.Action == tea.MouseActionPress:
		return v.update(keyOf(m.c.keys.Global.Up))
	case msg.Button == tea.MouseButtonWheelDown && msg.Action == tea.MouseActionPress:
		return v.update(keyOf(m.c.keys.Global.Down))
	case msg.Button == tea.MouseButtonLeft && msg.Action == tea.MouseActionPress:
		v.click(msg.X, msg.Y-1-m.bannerLines())
		return nil
	}
	m.dirty = false
	return nil
}

// keyOf makes the KeyMsg of a binding's first key, for the mouse wheel.
func keyOf(b key.Binding) tea.KeyMsg {
	k := b.Keys()[0]
	switch k {
	case "up":
		return tea.KeyMsg{Type: tea.KeyUp}
	case "down":
		return tea.KeyMsg{Type: tea.KeyDown}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

func (m *App) key(msg tea.KeyMsg) tea.Cmd {
	g := m.c.keys.Global
	if m.quitDialog {
		switch {
		case msg.String() == "ctrl+c", key.Matches(msg, m.c.keys.Confirm.Yes):
			return tea.Quit
		case key.Matches(msg, m.c.keys.Confirm.No):
			m.quitDialog = false
		}
		return nil
	}
	m.c.flash = flashLine{}
	if m.prompt != nil {
		return m.promptKey(msg)
	}
	if md := m.c.modal; md != nil {
		cmd, closed := md.update(msg, m.c)
		if closed && m.c.modal == md { // unless it opened the next dialog itself
			m.c.modal = nil
		}
		return cmd
	}
	if m.showHelp {
		if key.Matches(msg, g.Help, g.Back) || key.Matches(msg, g.Quit) {
			m.showHelp = false
		}
		return nil
	}
	v := m.views[m.cur]
	if v.capturing() {
		if msg.String() == "ctrl+c" {
			m.quitDialog = true
			return nil
		}
		return v.update(msg)
	}
	switch {
	case key.Matches(msg, g.Quit):
		m.quitDialog = true
	case key.Matches(msg, g.Help):
		m.showHelp = true
	case key.Matches(msg, g.Command):
		m.prompt = &prompt{kind: ':', in: newInput("")}
		m.prompt.in.focused = true
	case key.Matches(msg, g.Filter) && v.filterable():
		m.prompt = &prompt{kind: '/', in: newInput(v.filter())}
		m.prompt.in.focused = true
	case key.Matches(msg, g.Back):
		return m.back()
	case key.Matches(msg, g.Freeze):
		m.frozen = !m.frozen
		if !m.frozen {
			return m.maybeApply()
		}
	case key.Matches(msg, g.Faster), key.Matches(msg, g.Slower):
		return m.changeRate(key.Matches(msg, g.Faster))
	case key.Matches(msg, g.Jobs):
		return m.goTo(viewJobs, "")
	case key.Matches(msg, g.Actions):
		return m.goTo(viewActions, m.selectedJob())
	case key.Matches(msg, g.Policies):
		return m.goTo(viewPolicies, m.selectedJob())
	case key.Matches(msg, g.Events):
		return m.goTo(viewEvents, "")
	case key.Matches(msg, g.Launch):
		return m.goTo(viewLaunch, "")
	default:
		return v.update(msg)
	}
	return nil
}

// selectedJob is the job a view shortcut is about: the row under the cursor in the jobs list,
// otherwise the open job.
func (m *App) selectedJob() string {
	if m.cur == viewJobs {
		if j := m.views[viewJobs].(*jobsView).selected(); j != "" {
			return j
		}
	}
	return m.c.job
}

func (m *App) changeRate(faster bool) tea.Cmd {
	if faster && m.rate < len(rates)-1 {
		m.rate++
	} else if !faster && m.rate > 0 {
		m.rate--
	}
	hz := rates[m.rate]
	m.c.setFlash(flashInfo, fmt.Sprintf("refresh %s Hz", fmtHz(hz)))
	b := m.c.backend
	if b == nil {
		return nil
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.SetRate(ctx, hz); err != nil {
			return subscribeErrMsg{err}
		}
		return nil
	}
}

func fmtHz(hz float64) string { return strings.TrimSuffix(fmt.Sprintf("%.1f", hz), ".0") }

// goTo opens a view (job: the job it is about, "" keeps the open one) and subscribes to what it needs.
func (m *App) goTo(to viewID, job string) tea.Cmd {
	if job != "" {
		m.c.job = job
	}
	if to != m.cur {
		m.stack = append(m.stack, m.cur)
		if len(m.stack) > 32 {
			m.stack = m.stack[1:]
		}
		m.cur = to
	}
	m.showHelp = false
	return m.resubscribe()
}

func (m *App) back() tea.Cmd {
	v := m.views[m.cur]
	if v.filterable() && v.filter() != "" {
		v.setFilter("")
		return nil
	}
	if len(m.stack) == 0 {
		if m.cur != viewJobs {
			m.cur = viewJobs
			return m.resubscribe()
		}
		return nil
	}
	m.cur = m.stack[len(m.stack)-1]
	m.stack = m.stack[:len(m.stack)-1]
	return m.resubscribe()
}

func (m *App) promptKey(msg tea.KeyMsg) tea.Cmd {
	p := m.prompt
	v := m.views[m.cur]
	switch msg.Type {
	case tea.KeyEsc:
		if p.kind == '/' {
			v.setFilter("")
		}
		m.prompt = nil
		return nil
	case tea.KeyEnter:
		m.prompt = nil
		if p.kind == ':' {
			return m.run(strings.TrimSpace(p.in.text()))
		}
		return nil
	case tea.KeyTab:
		if p.kind == ':' {
			p.in.set(m.complete(p.in.text()))
		}
		return nil
	case tea.KeyCtrlC:
		m.prompt = nil
		m.quitDialog = true
		return nil
	}
	p.in.update(msg)
	if p.kind == '/' {
		v.setFilter(p.in.text())
	}
	return nil
}

// commands are the command mode's verbs, for help and completion.
var commands = []string{"jobs", "job", "actions", "policies", "events", "launch", "theme", "palette", "help", "q"}

func (m *App) candidates() []string {
	var out []string
	for _, c := range commands {
		switch c {
		case "job", "actions", "policies":
			for _, n := range m.c.data.names() {
				out = append(out, c+" "+n)
			}
			out = append(out, c)
		case "theme":
			for _, n := range themes.Names() {
				out = append(out, "theme "+n)
			}
		case "palette":
			for _, n := range themes.PaletteNames() {
				out = append(out, "palette "+n)
			}
		default:
			out = append(out, c)
		}
	}
	return out
}

// complete extends text to the longest prefix shared by the commands it starts.
func (m *App) complete(text string) string {
	var match []string
	for _, c := range m.candidates() {
		if strings.HasPrefix(c, text) {
			match = append(match, c)
		}
	}
	if len(match) == 0 {
		return text
	}
	pre := match[0]
	for _, s := range match[1:] {
		for !strings.HasPrefix(s, pre) {
			pre = pre[:len(pre)-1]
		}
	}
	return pre
}

// run executes a command-mode line.
func (m *App) run(line string) tea.Cmd {
	verb, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	known := func(job string) bool { // before the full list arrives (--job), any name may be right
		_, ok := m.c.data.jobs[job]
		return ok || !m.c.data.complete
	}
	switch verb {
	case "":
		return nil
	case "q", "q!", "quit":
		return tea.Quit
	case "jobs":
		return m.goTo(viewJobs, "")
	case "job", "actions", "policies":
		if arg != "" && !known(arg) {
			m.c.setFlash(flashErr, fmt.Sprintf("no job %q (have %s)", arg, strings.Join(m.c.data.names(), ", ")))
			return nil
		}
		to := map[string]viewID{"job": viewJob, "actions": viewActions, "policies": viewPolicies}[verb]
		if verb == "job" && arg == "" && m.c.job == "" {
			m.c.setFlash(flashErr, ":job needs a name, e.g. :job mnist-mlp")
			return nil
		}
		return m.goTo(to, arg)
	case "events":
		return m.goTo(viewEvents, "")
	case "launch":
		return m.goTo(viewLaunch, "")
	case "help":
		m.showHelp = true
		return nil
	case "theme":
		t, err := themes.Get(arg)
		if err == nil {
			t.Heatmap = m.c.theme.Heatmap
			if err = m.c.setTheme(t); err == nil {
				m.styleHelp()
				m.c.setFlash(flashOK, "theme "+t.Name)
				return nil
			}
		}
		m.c.setFlash(flashErr, err.Error())
		return nil
	case "palette":
		if _, err := themes.Palette(arg); err != nil {
			m.c.setFlash(flashErr, err.Error())
			return nil
		}
		t := m.c.theme
		t.Heatmap = arg
		_ = m.c.setTheme(t)
		m.c.setFlash(flashOK, "heatmap palette "+arg)
		return nil
	}
	m.c.setFlash(flashErr, fmt.Sprintf("unknown command :%s (try %s)", verb, strings.Join(commands, ", ")))
	return nil
}

// ---------------------------------------------------------------- drawing

// View draws the screen; it is cached until a message changes something.
func (m *App) View() string {
	if !m.dirty && m.cache != "" {
		return m.cache
	}
	m.dirty = false
	m.cache = m.render()
	return m.cache
}

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
	bh := h - 2 - m.bannerLines()
	var body string
	switch {
	case m.showHelp:
		body = m.c.box("help", m.helpText(w-2), w, bh, true)
	default:
		body = block(m.views[m.cur].render(w, bh), w, bh)
	}
	switch {
	case m.quitDialog:
		d := &confirmDialog{title: "quit", body: "Quit the kelpie console?\nJobs keep running on the scheduler."}
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
	switch m.cur {
	case viewJob:
		parts = append(parts, m.c.job)
	case viewActions, viewPolicies:
		if m.c.job != "" {
			parts = append(parts, m.c.job)
		}
		parts = append(parts, m.views[m.cur].title())
	case viewEvents, viewLaunch:
		parts = []string{m.views[m.cur].title()}
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
	var km helpKeyMap
	switch {
	case m.quitDialog:
		km = m.c.keys.Confirm
	case m.c.modal != nil:
		km = m.c.modal.keyMap(m.c)
	default:
		km = m.views[m.cur].keyMap()
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
	section(m.views[m.cur].title(), m.views[m.cur].keyMap().FullHelp())
	section("everywhere", m.c.keys.Global.FullHelp())
	b.WriteString(st.title.Render("command mode") + "\n")
	cmds := []string{":jobs", ":job NAME", ":actions [NAME]", ":policies [NAME]", ":events", ":launch",
		":theme " + strings.Join(themes.Names(), "|"), ":palette " + strings.Join(themes.PaletteNames(), "|"), ":help", ":q"}
	b.WriteString(st.muted.Render(strings.Join(cmds, "  ")) + "\n")
	b.WriteString(st.muted.Render("tab completes a command; esc closes this help"))
	return b.String()
}
