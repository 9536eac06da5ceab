// Package themes holds the console's colour themes (dark, light, high-contrast) as semantic colours,
// the heatmap palettes (including the colour-blind-safe viridis), and the user's config file
// ($XDG_CONFIG_HOME/kelpie/config.yaml) that picks a theme, overrides colours, remaps keys and sets
// the refresh rate and default scheduler. Styles are built from a Theme by the TUI, once per theme
// change, never per cell.
package themes

import (
	"fmt"
	"sort"
	"strings"
)

// Theme is a set of semantic colours, each a "#rrggbb" hex string or an ANSI colour number.
type Theme struct {
	Name      string
	Fg        string // body text
	Muted     string // secondary text, borders of unfocused panels, "no data"
	Accent    string // titles, focused panel borders, the selected row marker
	OK        string // healthy nodes, running jobs, successful commands
	Warn      string // transient stragglers, pending work, degraded connection
	Straggler string // persistent stragglers, failures, refused commands
	Action    string // pending actions awaiting an operator
	SelectFg  string // selected row foreground
	SelectBg  string // selected row background
	// Heatmap names the default heatmap palette for this theme (see Palettes).
	Heatmap string
	// Series are the line colours of chart series, in order.
	Series []string
}

// Default is the theme used when none is configured.
const Default = "dark"

var builtin = map[string]Theme{
	"dark": {
		Name: "dark", Fg: "#cdd6f4", Muted: "#6c7086", Accent: "#89b4fa",
		OK: "#a6e3a1", Warn: "#f9e2af", Straggler: "#f38ba8", Action: "#cba6f7",
		SelectFg: "#1e1e2e", SelectBg: "#89b4fa", Heatmap: "heat",
		Series: []string{"#89b4fa", "#a6e3a1", "#f9e2af", "#f38ba8", "#cba6f7", "#94e2d5", "#fab387", "#f5c2e7"},
	},
	"light": {
		Name: "light", Fg: "#4c4f69", Muted: "#8c8fa1", Accent: "#1e66f5",
		OK: "#40a02b", Warn: "#df8e1d", Straggler: "#d20f39", Action: "#8839ef",
		SelectFg: "#eff1f5", SelectBg: "#1e66f5", Heatmap: "heat",
		Series: []string{"#1e66f5", "#40a02b", "#df8e1d", "#d20f39", "#8839ef", "#179299", "#fe640b", "#ea76cb"},
	},
	"high-contrast": {
		Name: "high-contrast", Fg: "#ffffff", Muted: "#c0c0c0", Accent: "#00ffff",
		OK: "#00ff00", Warn: "#ffff00", Straggler: "#ff0000", Action: "#ff00ff",
		SelectFg: "#000000", SelectBg: "#ffffff", Heatmap: "viridis",
		Series: []string{"#00ffff", "#00ff00", "#ffff00", "#ff0000", "#ff00ff", "#ffffff", "#ff8000", "#8080ff"},
	},
}

// Names lists the built-in themes, sorted.
func Names() []string {
	names := make([]string, 0, len(builtin))
	for n := range builtin {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the built-in theme called name ("" is the default).
func Get(name string) (Theme, error) {
	if name == "" {
		name = Default
	}
	t, ok := builtin[strings.ToLower(name)]
	if !ok {
		return Theme{}, fmt.Errorf("themes: unknown theme %q (have %s)", name, strings.Join(Names(), ", "))
	}
	t.Series = append([]string(nil), t.Series...)
	return t, nil
}

// WithColors returns t with the named semantic colours replaced; names are the config keys
// fg, muted, accent, ok, warn, straggler, action, select_fg, select_bg.
func (t Theme) WithColors(colors map[string]string) (Theme, error) {
	keys := make([]string, 0, len(colors))
	for k := range colors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := colors[k]
		if !validColor(v) {
			return t, fmt.Errorf("themes: colour %s: %q is neither #rrggbb nor an ANSI number 0-255", k, v)
		}
		switch k {
		case "fg":
			t.Fg = v
		case "muted":
			t.Muted = v
		case "accent":
			t.Accent = v
		case "ok":
			t.OK = v
		case "warn":
			t.Warn = v
		case "straggler":
			t.Straggler = v
		case "action":
			t.Action = v
		case "select_fg":
			t.SelectFg = v
		case "select_bg":
			t.SelectBg = v
		default:
			return t, fmt.Errorf("themes: unknown colour %q (fg, muted, accent, ok, warn, straggler, action, select_fg, select_bg)", k)
		}
	}
	return t, nil
}

func validColor(s string) bool {
	if len(s) == 7 && s[0] == '#' {
		for _, c := range s[1:] {
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
		return true
	}
	if len(s) == 0 || len(s) > 3 {
		return false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 255
}
