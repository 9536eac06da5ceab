package chart

import (
	"math"
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
)

func TestSparkline(t *testing.T) {
	cases := []struct {
		values []float64
		w      int
		max    float64
		want   string
	}{
		{[]float64{1, 2, 4, 8}, 4, 8, "▁▂▄█"},
		{[]float64{1, 2, 4, 8}, 6, 8, "  ▁▂▄█"},              // right-aligned: the newest on the right
		{[]float64{1, 2, 4, 8}, 2, 8, "▄█"},                  // only the newest that fit
		{[]float64{0, 2, 16}, 3, 8, " ▂█"},                   // zero is blank, above max is full
		{[]float64{-1, math.NaN(), 8}, 3, 8, "  █"},          // negative and NaN are blank
		{[]float64{1, 1}, 2, 0, "██"},                        // max from the data
		{[]float64{0.4, 8}, 2, 8, " █"},                      // under 1/16 of max: blank
		{nil, 3, 1, "   "},                                   // no data
		{[]float64{0, 0}, 2, 0, "  "},                        // nothing above zero
		{[]float64{0.21, 0.22, 0.61, 0.63}, 4, 0.63, "▃▃██"}, // a straggler stands out
		{[]float64{1}, 0, 1, ""},
	}
	for _, c := range cases {
		if got := Sparkline(c.values, c.w, c.max); got != c.want {
			t.Errorf("Sparkline(%v, %d, %v) = %q; want %q", c.values, c.w, c.max, got, c.want)
		}
	}
}

func TestLines(t *testing.T) {
	cases := []struct {
		name   string
		series []Series
		o      Options
		want   string
	}{
		{"ramp", []Series{{Values: []float64{0, 1, 2, 3}}}, Options{Width: 8, Height: 4, Min: 0, Max: 3},
			"3│     ╭\n" +
				" │    ╭╯\n" +
				" │   ╭╯ \n" +
				"0│  ─╯  "},
		{"clamped to the range, NaN repeats", []Series{{Values: []float64{math.NaN(), 5, -1, math.NaN(), 1}}}, Options{Width: 7, Height: 3, Min: 0, Max: 2},
			"2│ ─╮  \n" +
				"1│  │ ╭\n" +
				"0│  ╰─╯"},
		{"range from the data: 0 to 1.1 × max", []Series{{Values: []float64{10, 10}}}, Options{Width: 6, Height: 2},
			"11│ ──\n" + // 10 is nearer the top row (11) than the bottom one (0)
				" 0│   "},
		{"no data: axis only", []Series{{Name: "empty"}}, Options{Width: 6, Height: 3, Min: 0, Max: 4},
			"4│    \n" +
				"2│    \n" +
				"0│    "},
		{"too narrow for labels", []Series{{Values: []float64{0, 1}}}, Options{Width: 3, Height: 2, Min: 0, Max: 1},
			"  ╭\n" +
				" ─╯"},
	}
	for _, c := range cases {
		if got := Lines(c.series, c.o); got != c.want {
			t.Errorf("Lines(%s) =\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}

// Every row of the y axis that carries a label names the value a point on that row has.
func TestLinesLabels(t *testing.T) {
	for _, h := range []int{2, 3, 5, 12, 14, 30, 48} {
		vals := make([]float64, h)
		for i := range vals {
			vals[i] = float64(i) // value i on row i
		}
		out := Lines([]Series{{Values: vals}}, Options{Width: 80, Height: h, Min: 0, Max: float64(h - 1), Format: func(v float64) string { return trimFloat(math.Round(v)) }})
		lines := strings.Split(out, "\n")
		labels := 0
		for row, l := range lines {
			lab := strings.TrimSpace(l[:strings.Index(l, "│")])
			if lab == "" {
				continue
			}
			labels++
			if want := trimFloat(float64(h - 1 - row)); lab != want {
				t.Errorf("Lines(height %d) labels row %d %q; want %q", h, row, lab, want)
			}
		}
		if !strings.HasPrefix(strings.TrimSpace(lines[0]), trimFloat(float64(h-1))) || !strings.HasPrefix(strings.TrimSpace(lines[h-1]), "0") {
			t.Errorf("Lines(height %d) does not label the top and bottom rows:\n%s", h, out)
		}
		if labels > 7 {
			t.Errorf("Lines(height %d) has %d labels; want at most 7", h, labels)
		}
	}
}

// The chart is exactly Width × Height whatever the data, colours and sizes, and coloured only
// outside the Ascii profile.
func TestLinesSize(t *testing.T) {
	long := make([]float64, 500)
	for i := range long {
		long[i] = float64(i % 37)
	}
	defer lipgloss.SetColorProfile(lipgloss.ColorProfile())
	for _, prof := range []termenv.Profile{termenv.Ascii, termenv.TrueColor} {
		lipgloss.SetColorProfile(prof)
		red := lipgloss.NewStyle().Foreground(lipgloss.Color("#ff0000"))
		for _, size := range [][2]int{{80, 10}, {20, 3}, {5, 1}, {1, 1}, {2, 5}, {100, 15}} {
			series := []Series{
				{Name: "x", Values: long, Style: red},
				{Name: "y", Values: []float64{5, 5, 5, math.Inf(1)}, Style: lipgloss.NewStyle().Foreground(lipgloss.Color("#00ff00"))},
				{Name: "empty"},
			}
			out := Lines(series, Options{Width: size[0], Height: size[1], AxisStyle: lipgloss.NewStyle().Foreground(lipgloss.Color("#888888"))})
			lines := strings.Split(out, "\n")
			if len(lines) != size[1] {
				t.Fatalf("Lines(%v) has %d lines; want %d", size, len(lines), size[1])
			}
			for i, l := range lines {
				if w := ansi.StringWidth(l); w != size[0] {
					t.Errorf("Lines(%v, profile %d) line %d is %d wide; want %d: %q", size, prof, i, w, size[0], l)
				}
			}
			if colored := strings.Contains(out, "\x1b["); colored != (prof == termenv.TrueColor) {
				t.Errorf("Lines(%v, profile %d) coloured = %v", size, prof, colored)
			}
		}
	}
}

func TestLabelStep(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 5, 7, 11, 13, 23, 47, 50} {
		s := labelStep(n)
		if s < 1 || (n > 1 && s < 2 && n%s != 0) {
			t.Errorf("labelStep(%d) = %d; want ≥ 1", n, s)
		}
		if n > 1 && n%s == 1 {
			t.Errorf("labelStep(%d) = %d: the top label would sit on the row above another", n, s)
		}
		if labels := n/s + 1; n >= 8 && (labels < 3 || labels > 7) {
			t.Errorf("labelStep(%d) = %d gives %d labels; want 3 to 7", n, s, labels)
		}
	}
}

func BenchmarkSparkline16(b *testing.B) {
	v := make([]float64, 30)
	for i := range v {
		v[i] = 0.2 + 0.01*float64(i%11)
	}
	for b.Loop() {
		_ = Sparkline(v, 16, 0.3)
	}
}

func BenchmarkLines8x60(b *testing.B) {
	defer lipgloss.SetColorProfile(lipgloss.ColorProfile())
	lipgloss.SetColorProfile(termenv.TrueColor)
	var series []Series
	for s := 0; s < 8; s++ {
		v := make([]float64, 60)
		for i := range v {
			v[i] = 0.2 + 0.01*float64((i*(s+3))%11)
		}
		series = append(series, Series{Values: v, Style: lipgloss.NewStyle().Foreground(lipgloss.Color("#ff0000"))})
	}
	for b.Loop() {
		_ = Lines(series, Options{Width: 100, Height: 15})
	}
}
