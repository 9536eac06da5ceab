package themes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	good := `theme: light
palette: viridis
refresh_hz: 2
scheduler: 10.0.0.1:7080
token: abc
mouse: true
colors: {straggler: "#ff0000", ok: "46"}
keys:
  quit: [q, ctrl+c]
  approve: [a, y]
`
	c, err := ParseConfig([]byte(good))
	if err != nil {
		t.Fatalf("ParseConfig(good) = %v", err)
	}
	if c.Theme != "light" || c.Palette != "viridis" || c.RefreshHz != 2 || c.Scheduler != "10.0.0.1:7080" ||
		c.Token != "abc" || !c.Mouse || c.Colors["straggler"] != "#ff0000" || len(c.Keys["approve"]) != 2 {
		t.Errorf("ParseConfig(good) = %+v", c)
	}
	th, err := c.Resolve("")
	if err != nil {
		t.Fatal(err)
	}
	if th.Name != "light" || th.Straggler != "#ff0000" || th.OK != "46" || th.Heatmap != "viridis" {
		t.Errorf("Resolve = %+v; want light with straggler #ff0000, ok 46, heatmap viridis", th)
	}
	th, err = c.Resolve("high-contrast")
	if err != nil || th.Name != "high-contrast" {
		t.Errorf("Resolve(high-contrast) = %v, %v", th.Name, err)
	}

	bad := []struct{ text, want string }{
		{"theme: neon\n", `unknown theme "neon"`},
		{"palette: rainbow\n", `unknown heatmap palette "rainbow"`},
		{"refresh_hz: 100\n", "refresh_hz 100 is outside"},
		{"colors: {ok: green}\n", `colour ok: "green"`},
		{"colors: {fizz: \"#000000\"}\n", `unknown colour "fizz"`},
		{"theme: dark\nthemes: light\n", "themes"},
		{"refresh_hz: fast\n", "[1:13]"},
	}
	for _, b := range bad {
		_, err := ParseConfig([]byte(b.text))
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("ParseConfig(%q) = %v; want an error containing %q", b.text, err, b.want)
		}
	}
}

func TestUnknownKeyNamesLine(t *testing.T) {
	_, err := ParseConfig([]byte("theme: dark\nrefresh_hz: 4\nthemez: light\n"))
	if err == nil || !strings.Contains(err.Error(), "[3:") {
		t.Errorf("ParseConfig(unknown key on line 3) = %v; want the line number 3", err)
	}
}

func TestConfigPath(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/kelpie/config.yaml"},
		{map[string]string{"HOME": "/h"}, "/h/.config/kelpie/config.yaml"},
		{map[string]string{}, ""},
	}
	for _, c := range cases {
		if got := ConfigPath(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("ConfigPath(%v) = %q; want %q", c.env, got, c.want)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	c, err := LoadConfig(filepath.Join(dir, "missing.yaml"))
	if err != nil || c.Theme != "" {
		t.Errorf("LoadConfig(missing) = %+v, %v; want the zero config", c, err)
	}
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte("theme: high-contrast\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err = LoadConfig(p); err != nil || c.Theme != "high-contrast" {
		t.Errorf("LoadConfig = %+v, %v", c, err)
	}
	if err := os.WriteFile(p, []byte("theme: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err = LoadConfig(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("LoadConfig(broken) = %v; want an error naming the file", err)
	}
}

func TestThemesAndPalettes(t *testing.T) {
	for _, n := range Names() {
		th, err := Get(n)
		if err != nil {
			t.Fatalf("Get(%q) = %v", n, err)
		}
		for name, c := range map[string]string{"fg": th.Fg, "muted": th.Muted, "accent": th.Accent, "ok": th.OK,
			"warn": th.Warn, "straggler": th.Straggler, "action": th.Action, "select_fg": th.SelectFg, "select_bg": th.SelectBg} {
			if !validColor(c) {
				t.Errorf("theme %s colour %s = %q; want a valid colour", n, name, c)
			}
		}
		if _, err := Palette(th.Heatmap); err != nil {
			t.Errorf("theme %s heatmap palette: %v", n, err)
		}
		if len(th.Series) < 4 {
			t.Errorf("theme %s has %d series colours; want at least 4", n, len(th.Series))
		}
	}
	if want := []string{"dark", "high-contrast", "light"}; strings.Join(Names(), ",") != strings.Join(want, ",") {
		t.Errorf("Names() = %v; want %v", Names(), want)
	}
	if th, _ := Get(""); th.Name != Default {
		t.Errorf("Get(\"\") = %s; want %s", th.Name, Default)
	}
	for _, n := range PaletteNames() {
		p, _ := Palette(n)
		if len(p) < 8 {
			t.Errorf("palette %s has %d entries; want at least 8", n, len(p))
		}
		for _, c := range p {
			if !validColor(c) {
				t.Errorf("palette %s entry %q is not a colour", n, c)
			}
		}
	}
	if _, err := Palette(ColorBlindSafe); err != nil {
		t.Errorf("colour-blind-safe palette missing: %v", err)
	}
}
