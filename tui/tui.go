// Package tui is kelpie's console: a Bubble Tea program to launch, watch and steer PS training
// jobs. It is a client of the scheduler's console API only (scheduler/console/client, WebSocket +
// protojson), so it works the same against `kelpie demo`'s embedded cluster and a remote scheduler.
//
// Views: jobs (sort, filter, enter opens), job (node table with sparklines, straggler heatmap,
// BPT and speed charts, PS panel, shard progress), actions (the pending queue with approve and
// reject; restart, batch sizes, add/remove server or worker by hand), policies (modes and
// parameters, live), launch (a form or a spec file), events (the audit log). k9s and lazygit
// conventions: ? help, : command mode, / filter, esc back, q quit (confirmed), vim keys and
// arrows, f freeze, +/- refresh rate, tab and z to move between and maximise panels.
//
// How it stays cheap with 1,000 nodes (docs/contributing.md, "The console"): frames from the client arrive
// through Program.Send and are merged into a store; they are shown at most at the refresh rate
// (the first change after a quiet spell at once); View() returns a cached string until a message
// changes something, and the job view caches each panel by data version, size and theme; the
// heatmap is kelpie's own (tui/heatmap); nothing ticks while nothing changes, except a 1 Hz
// countdown while the scheduler is unreachable.
//
// Keys are tried in this order: the quit dialog, the footer prompt (: or /), an open dialog or
// form, the help screen, a view that has the keyboard (the launch form), the global keys, then
// the current view's keys.
//
// Layout: every view is a component (component.go: tea.Model + help.KeyMap + SetSize, in
// soft-serve's shape) in its own file (jobs.go, job.go, actions.go, policies.go, events.go,
// launch.go) reading the shared context (context.go); app.go is the root model (messages, key
// routing, navigation, subscriptions), command.go the : and / prompt, chrome.go the header,
// banner, footer, help page and dialog overlay around the current view.
package tui

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/kelpie/kelpie/scheduler/console/client"
	"github.com/kelpie/kelpie/themes"
	"github.com/kelpie/kelpie/tui/keys"
)

// Options configures Run; empty fields fall back to the config file, then to defaults.
type Options struct {
	Scheduler string    // HOST:PORT or a ws(s):// / http(s):// URL (default: config, then 127.0.0.1:7080)
	Token     string    // bearer token for the console API (default: config)
	ReadOnly  bool      // hide every control that changes the cluster
	Job       string    // open this job first
	Theme     string    // dark | light | high-contrast (default: config, then dark)
	In        io.Reader // default os.Stdin
	Out       io.Writer // default os.Stdout
	// Config is the config file (default $XDG_CONFIG_HOME/kelpie/config.yaml); "-" reads none.
	Config string
	// Width and Height are the screen size until the terminal reports its own, which it does
	// only when Out is a terminal (default 80×24, for recordings and tests).
	Width, Height int
	// TLS connects over wss:// with this configuration (client.TLSConfig
	// pins a fingerprint); nil: as the address says.
	TLS *tls.Config
	// QuitNote says, in the quit dialog, what quitting does besides
	// closing the console (kelpie demo: it stops the demo's scheduler and
	// jobs); empty: DefaultQuitNote.
	QuitNote string
}

// DefaultQuitNote is the quit dialog's note for a console attached to a
// scheduler that outlives it.
const DefaultQuitNote = "Jobs keep running on the scheduler."

// DefaultScheduler is the address used when neither the options nor the config name one.
const DefaultScheduler = "127.0.0.1:7080"

// FPS caps how often the terminal is repainted; View() is cached, so idle frames cost a string compare.
const FPS = 30

// Run opens the console and returns when the user quits or ctx is done.
func Run(ctx context.Context, opts Options) error {
	cfgPath := opts.Config
	if cfgPath == "" {
		cfgPath = themes.ConfigPath(os.Getenv)
	}
	var cfg themes.Config
	if cfgPath != "-" {
		var err error
		if cfg, err = themes.LoadConfig(cfgPath); err != nil {
			return fmt.Errorf("tui: %v", err)
		}
	}
	theme, err := cfg.Resolve(opts.Theme)
	if err != nil {
		return fmt.Errorf("tui: %v", err)
	}
	km := keys.Default()
	if err := km.Rebind(cfg.Keys); err != nil {
		return fmt.Errorf("tui: config %s: %v", cfgPath, err)
	}
	addr := firstOf(opts.Scheduler, cfg.Scheduler, DefaultScheduler)
	token := firstOf(opts.Token, cfg.Token)
	if _, err := client.URL(addr); err != nil {
		return fmt.Errorf("tui: %v", err)
	}
	in, out := opts.In, opts.Out
	if in == nil {
		in = os.Stdin
	}
	if out == nil {
		out = os.Stdout
	}

	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	app := newApp(config{
		theme: theme, keys: km, now: time.Now, readOnly: opts.ReadOnly,
		addr: addr, refreshHz: cfg.RefreshHz, job: opts.Job, mouse: cfg.Mouse, quitNote: opts.QuitNote,
	})
	popts := []tea.ProgramOption{tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out), tea.WithAltScreen(), tea.WithFPS(FPS)}
	if cfg.Mouse {
		popts = append(popts, tea.WithMouseCellMotion())
	}
	app.w, app.h = 80, 24
	if opts.Width > 0 && opts.Height > 0 {
		app.w, app.h = opts.Width, opts.Height
	}
	p := tea.NewProgram(app, popts...)
	// Program.Send blocks until the program runs, and returns at once after it ended.
	copts := []client.Option{client.WithHandler(func(m any) { p.Send(m) }),
		client.WithSubscription(app.initialScope(), rates[app.rate], 0)}
	if opts.TLS != nil {
		copts = append(copts, client.WithTLS(opts.TLS))
	}
	c, err := client.Dial(ctx, addr, token, copts...)
	if err != nil {
		return fmt.Errorf("tui: %v", err)
	}
	app.c.backend = c // before Run: nothing reads it concurrently yet
	_, err = p.Run()
	cancel()
	c.Close()
	if errors.Is(err, tea.ErrProgramKilled) && parent.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tui: %v", err)
	}
	return nil
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
