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

	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
	"github.com/kelpie/kelpie/themes"
	"github.com/kelpie/kelpie/tui/forms"
	"github.com/kelpie/kelpie/tui/keys"
)

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
	quitNote  string // what quitting does besides closing the console ("" : DefaultQuitNote)
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
	welcome  *consolepb.Welcome
	addr     string
	optRO    bool
	scope    []string
	scoped   bool                  // scope has been sent at least once
	window   *consolepb.ViewWindow // the job view's window as last sent (nil: whole views)
	mouse    bool

	w, h       int
	views      map[viewID]component
	cur        viewID
	showHelp   bool
	quitDialog bool
	quitNote   string
	prompt     *prompt
	helpModel  help.Model

	cache string
	dirty bool
}

type (
	applyTickMsg     struct{}
	countdownTickMsg struct{}
	// commandDoneMsg is the result of a command sent with send.
	commandDoneMsg struct {
		what string
		res  *consolepb.CommandResult
		err  error
		form *form                                  // the form that sent it: a refusal is shown there
		onOK func(*consolepb.CommandResult) tea.Cmd // what to do once it succeeded
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
	if cfg.quitNote == "" {
		cfg.quitNote = DefaultQuitNote
	}
	m := &App{
		c: c, live: newStore(), addr: cfg.addr, optRO: cfg.readOnly, mouse: cfg.mouse, quitNote: cfg.quitNote,
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
	m.views = map[viewID]component{}
	for id, d := range viewDefs {
		m.views[viewID(id)] = d.new(c)
	}
	m.styleHelp()
	if cfg.job != "" {
		c.job = cfg.job
		m.cur = viewJob
	}
	m.scope, _ = m.wantScope() // the client's first subscription (see initialScope)
	m.scoped = true
	return m
}

// initialScope is the subscription the client must start with, so the first view has its data
// without a second Subscribe.
func (m *App) initialScope() []string { return m.scope }

// Init does nothing: the client subscribes to initialScope when it connects.
func (m *App) Init() tea.Cmd { return nil }

// wantScope is the subscription the current view needs: every job for the jobs list, the open
// job (with its nodes, heatmap and charts) for the job, actions and policies views.
func (m *App) wantScope() ([]string, bool) {
	switch viewDefs[m.cur].scope {
	case scopeAllJobs:
		return nil, true
	case scopeOpenJob:
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
func (c *shared) send(what string, cmd *consolepb.Command, f *form, onOK func(*consolepb.CommandResult) tea.Cmd) tea.Cmd {
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
	model, cmd := m.update(msg)
	if w := m.syncWindow(); w != nil {
		return model, tea.Batch(cmd, w)
	}
	return model, cmd
}

// syncWindow asks the scheduler for the window the job view now shows
// (rows, sort, filter, heatmap rows), when that changed: it sends the rows
// the console draws, not every node of a large job.
func (m *App) syncWindow() tea.Cmd {
	var want *consolepb.ViewWindow
	if v, ok := m.views[viewJob].(*jobView); ok && m.cur == viewJob && m.c.replaying(m.c.job) == nil {
		want = v.wantWindow(m.h)
	}
	if proto.Equal(want, m.window) && (want == nil) == (m.window == nil) {
		return nil
	}
	m.window = want
	b := m.c.backend
	if b == nil {
		return nil
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.SetWindow(ctx, want); err != nil {
			return subscribeErrMsg{err}
		}
		return nil
	}
}

func (m *App) update(msg tea.Msg) (tea.Model, tea.Cmd) {
	m.dirty = true
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.w, m.h = msg.Width, msg.Height
		m.resize()
		return m, nil
	case client.WelcomeMsg:
		m.welcome = msg.Welcome
		m.c.policies = forms.Catalog(msg.Welcome.GetPolicies())
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
	case historyMsg:
		m.c.historyArrived(msg)
		return m, nil
	case triageDoneMsg:
		m.c.triageDone(msg)
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
	switch {
	case msg.Button == tea.MouseButtonWheelUp && msg.Action == tea.MouseActionPress:
		return m.updateView(keyOf(m.c.keys.Global.Up))
	case msg.Button == tea.MouseButtonWheelDown && msg.Action == tea.MouseActionPress:
		return m.updateView(keyOf(m.c.keys.Global.Down))
	case msg.Button == tea.MouseButtonLeft && msg.Action == tea.MouseActionPress:
		msg.Y -= 1 + m.bannerLines() // the view's own coordinates: below the header and banner
		return m.updateView(msg)
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
	if capturing(v) {
		if msg.String() == "ctrl+c" {
			m.quitDialog = true
			return nil
		}
		return m.updateView(msg)
	}
	f, filterable := filterOf(v)
	switch {
	case key.Matches(msg, g.Quit):
		m.quitDialog = true
	case key.Matches(msg, g.Help):
		m.showHelp = true
	case key.Matches(msg, g.Command):
		m.prompt = &prompt{kind: ':', in: newInput("")}
		m.prompt.in.focused = true
	case key.Matches(msg, g.Filter) && filterable:
		m.prompt = &prompt{kind: '/', in: newInput(f.Filter())}
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
	default:
		for id, d := range viewDefs {
			if d.key != nil && key.Matches(msg, d.key(g)) {
				return m.openByKey(viewID(id))
			}
		}
		return m.updateView(msg)
	}
	return nil
}

// openByKey opens a view its global key names: one about a job for the job under the cursor.
func (m *App) openByKey(id viewID) tea.Cmd {
	d, job := viewDefs[id], ""
	if d.ofJob {
		job = m.selectedJob()
	}
	cmd := m.goTo(id, job)
	if d.opened != nil {
		d.opened(m.views[id])
	}
	return cmd
}

// updateView hands a message the root did not take to the current view.
func (m *App) updateView(msg tea.Msg) tea.Cmd {
	v, cmd := m.views[m.cur].Update(msg)
	m.views[m.cur] = v.(component)
	return cmd
}

// resize gives every view the area the chrome leaves it.
func (m *App) resize() {
	w, h := m.bodySize()
	for _, v := range m.views {
		v.SetSize(w, h)
	}
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

// goTo opens a view (job: the job it is about, "" keeps the open one) and subscribes to what it needs.
func (m *App) goTo(to viewID, job string) tea.Cmd {
	m.leave(to, job)
	if job != "" {
		m.c.job = job
	}
	m.cur = to
	m.showHelp = false
	return m.resubscribe()
}

// leave ends a replay when its job view is left for another view or
// another job: coming back shows the job live, not the moment it was
// paused at with the pending actions and nodes of then.
func (m *App) leave(to viewID, job string) {
	if m.c.replay != nil && (to != viewJob || job != "" && job != m.c.replay.job) {
		m.c.stopReplay()
	}
}

func (m *App) back() tea.Cmd {
	if f, ok := filterOf(m.views[m.cur]); ok && f.Filter() != "" {
		f.SetFilter("")
		return nil
	}
	up := m.parent(m.cur)
	if up == m.cur {
		return nil
	}
	m.leave(up, "")
	m.cur = up
	return m.resubscribe()
}

// parent is the view one level up from v (esc goes there, never back
// through the views visited): a job's actions and policies belong to the
// open job, the job to the jobs list; events and launch hang off the list.
func (m *App) parent(v viewID) viewID {
	if viewDefs[v].inJob && m.c.job != "" {
		return viewJob
	}
	return viewJobs
}
