package themes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/goccy/go-yaml"
)

// Config is the user's console config file. Every field is optional; command-line flags win over it.
//
//	theme: dark                  # dark | light | high-contrast
//	palette: viridis             # heatmap palette: heat | viridis | gray (default: the theme's)
//	refresh_hz: 4                # how often new data is drawn, 0.5..20
//	scheduler: 127.0.0.1:7080    # default scheduler address
//	token: s3cret                # bearer token for the console API
//	mouse: true                  # wheel scrolling and click to select
//	colors: {straggler: "#ff5f87"}
//	keys: {quit: [q, ctrl+c], approve: [a, y]}
type Config struct {
	Theme     string              `yaml:"theme"`
	Palette   string              `yaml:"palette"`
	RefreshHz float64             `yaml:"refresh_hz"`
	Scheduler string              `yaml:"scheduler"`
	Token     string              `yaml:"token"`
	Mouse     bool                `yaml:"mouse"`
	Colors    map[string]string   `yaml:"colors"`
	Keys      map[string][]string `yaml:"keys"`
}

// MinRefreshHz and MaxRefreshHz bound the refresh rate the console accepts.
const (
	MinRefreshHz = 0.5
	MaxRefreshHz = 20
)

// ParseConfig decodes a config file; unknown keys and bad values are errors naming the key and line.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalWithOptions(data, &c, yaml.Strict()); err != nil {
		return Config{}, fmt.Errorf("themes: config: %v", yaml.FormatError(err, false, false))
	}
	if c.Theme != "" {
		if _, err := Get(c.Theme); err != nil {
			return Config{}, err
		}
	}
	if c.Palette != "" {
		if _, err := Palette(c.Palette); err != nil {
			return Config{}, err
		}
	}
	if c.RefreshHz != 0 && (c.RefreshHz < MinRefreshHz || c.RefreshHz > MaxRefreshHz) {
		return Config{}, fmt.Errorf("themes: config: refresh_hz %g is outside %g..%g", c.RefreshHz, float64(MinRefreshHz), float64(MaxRefreshHz))
	}
	if _, err := (Theme{}).WithColors(c.Colors); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ConfigPath is $XDG_CONFIG_HOME/kelpie/config.yaml, or ~/.config/kelpie/config.yaml when
// XDG_CONFIG_HOME is unset; getenv is os.Getenv outside tests.
func ConfigPath(getenv func(string) string) string {
	if dir := getenv("XDG_CONFIG_HOME"); dir != "" {
		return filepath.Join(dir, "kelpie", "config.yaml")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".config", "kelpie", "config.yaml")
	}
	return ""
}

// LoadConfig reads and parses the config file at path. A missing file is no error: it yields the
// zero Config, so the console runs with its defaults.
func LoadConfig(path string) (Config, error) {
	if path == "" {
		return Config{}, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("themes: config: %v", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %v", path, err)
	}
	return c, nil
}

// Resolve returns the theme the config asks for (name overrides c.Theme when set), with the
// config's colour overrides applied and its palette choice recorded in Theme.Heatmap.
func (c Config) Resolve(name string) (Theme, error) {
	if name == "" {
		name = c.Theme
	}
	t, err := Get(name)
	if err != nil {
		return Theme{}, err
	}
	if t, err = t.WithColors(c.Colors); err != nil {
		return Theme{}, err
	}
	if c.Palette != "" {
		if _, err := Palette(c.Palette); err != nil {
			return Theme{}, err
		}
		t.Heatmap = c.Palette
	}
	return t, nil
}
