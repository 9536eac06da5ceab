// Package chart draws the console's sparklines and line charts with ntcharts (its sparkline and
// streamlinechart packages), as pure functions from a bounded window of values to a string.
//
// Each call builds a fresh ntcharts model sized to the window, pushes the window and draws it, so
// the chart holds nothing between calls: the caller keeps the window (the scheduler sends the
// newest points of each series) and caches the string until new data arrives (docs/contributing.md, "The console":
// ntcharts renders cell by cell). The y range is set from the window on every call, never the
// ever-growing auto range, and the charts never get focus or messages, so their default keys
// cannot clash with navigation.
package chart

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/NimbleMarkets/ntcharts/canvas"
	"github.com/NimbleMarkets/ntcharts/canvas/runes"
	"github.com/NimbleMarkets/ntcharts/linechart"
	"github.com/NimbleMarkets/ntcharts/linechart/streamlinechart"
	"github.com/NimbleMarkets/ntcharts/sparkline"
	"github.com/charmbracelet/lipgloss"
)

// Sparkline draws the newest w values (oldest first in values) as one row of ntcharts' block
// columns scaled so that max fills a cell (max <= 0: the largest value drawn). Values at or below
// zero, NaN and values under 1/16 of max are blanks, values above max are full blocks, and a
// window shorter than w is right-aligned: the newest value is the rightmost cell. The string is
// unstyled, w cells wide.
func Sparkline(values []float64, w int, max float64) string {
	if w <= 0 {
		return ""
	}
	if len(values) > w {
		values = values[len(values)-w:]
	}
	if max <= 0 {
		for _, v := range values {
			if v > max {
				max = v
			}
		}
	}
	if max <= 0 || math.IsInf(max, 0) {
		return strings.Repeat(" ", w)
	}
	sl := sparkline.New(w, 1, sparkline.WithNoAutoMaxValue(), sparkline.WithMaxValue(max))
	for _, v := range values {
		if math.IsNaN(v) || v < 0 {
			v = 0
		}
		sl.Push(math.Min(v, max)) // above max: a full block, not a column off the canvas
	}
	sl.Draw()
	return sl.View()
}

// Series is one line: values oldest first, one per interval, drawn in Style's colour.
type Series struct {
	Name   string
	Values []float64
	Style  lipgloss.Style
}

// Options sizes and scales a line chart.
type Options struct {
	Width, Height int
	Min, Max      float64                // the y range; Max <= Min: from 0 to 1.1 × the data's max
	Format        func(v float64) string // y-axis labels, ASCII (default: 3 significant digits or so)
	AxisStyle     lipgloss.Style         // the y axis and its labels
}

// Lines draws series with ntcharts' streamlinechart in exactly Height lines of Width columns: a
// y axis with labels on the left, then one column per value with the newest on the right (a
// series longer than the plot keeps its newest values; a shorter one starts part-way across).
// Values outside the range are drawn on its edge; a NaN repeats the value before it (leading NaNs
// are dropped). Where lines cross, the later series' style wins the cell.
func Lines(series []Series, o Options) string {
	if o.Width <= 0 || o.Height <= 0 {
		return ""
	}
	defaultFormat := o.Format == nil
	if defaultFormat {
		o.Format = trimFloat
	}
	lo, hi := o.Min, o.Max
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		lo, hi = 0, 0
		for _, s := range series {
			for _, v := range s.Values {
				if !math.IsNaN(v) && !math.IsInf(v, 0) && v > hi {
					hi = v
				}
			}
		}
		if hi <= 0 {
			hi = 1
		}
		hi *= 1.1
	}
	h := o.Height
	// The streamlinechart puts a value on row (v-lo)/(hi-lo)·(h-1), counted up from the bottom;
	// label row i with that row's value (ntcharts' own labels divide by h instead), right-aligned
	// to one width so that the top label, drawn below, fits too.
	value := func(i int) string {
		if h <= 1 {
			return o.Format(lo)
		}
		return o.Format(lo + float64(i)*(hi-lo)/float64(h-1))
	}
	step := labelStep(h - 1)
	if defaultFormat {
		o.Format = distinctFormat(h, step, func(i int) float64 { return lo + float64(i)*(hi-lo)/float64(max(h-1, 1)) })
	}
	lw := len(value(h - 1))
	for i := 0; i < h; i += step {
		lw = max(lw, len(value(i)))
	}
	label := func(i int, _ float64) string { return fmt.Sprintf("%*s", lw, value(i)) }
	if o.Width-lw-1 < 2 { // no room for labels: plot only
		step = 0
	}
	lc := linechart.New(o.Width, h, 0, 1, lo, hi,
		linechart.WithXYSteps(0, step),
		linechart.WithYLabelFormatter(label),
		linechart.WithStyles(o.AxisStyle, o.AxisStyle, lipgloss.NewStyle()))
	c := streamlinechart.New(o.Width, h, streamlinechart.WithLineChart(&lc))
	plotW := c.Width() - c.Origin().X // the stream buffers' size: the axis column holds the oldest point
	var names []string
	for i, s := range series {
		vals := s.Values
		if len(vals) > plotW {
			vals = vals[len(vals)-plotW:]
		}
		name := fmt.Sprint(i) // unique per series; DrawDataSets draws them in the order given
		pushed := false
		prev := math.NaN()
		for _, v := range vals {
			if math.IsNaN(v) {
				v = prev
			}
			if math.IsNaN(v) {
				continue
			}
			prev = v
			if !pushed {
				c.SetDataSetStyles(name, runes.ArcLineStyle, s.Style)
				pushed = true
			}
			c.PushDataSet(name, math.Max(lo, math.Min(hi, v)))
		}
		if pushed {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		c.Clear()
		c.DrawXYAxisAndLabel()
	} else {
		c.DrawDataSets(names)
	}
	if step > 0 && (h-1)%step != 0 { // ntcharts labels every step rows from the bottom: label the top too
		c.Canvas.SetStringWithStyle(canvas.Point{X: 0, Y: 0}, label(h-1, 0), o.AxisStyle)
	}
	return c.View()
}

// distinctFormat is the default label format with as many decimals as it
// takes for the labels drawn (every step rows from the bottom, and the
// top) to differ: two rows labelled "0.03" tell nothing apart.
func distinctFormat(h, step int, value func(i int) float64) func(float64) string {
	rows := []int{h - 1}
	for i := 0; step > 0 && i < h-1; i += step {
		rows = append(rows, i)
	}
	distinct := func(f func(float64) string) bool {
		seen := map[string]bool{}
		for _, i := range rows {
			l := f(value(i))
			if seen[l] {
				return false
			}
			seen[l] = true
		}
		return true
	}
	if distinct(trimFloat) {
		return trimFloat
	}
	for d := 2; d <= 8; d++ {
		f := func(v float64) string { return trimDecimals(strconv.FormatFloat(v, 'f', d, 64)) }
		if distinct(f) {
			return f
		}
	}
	return trimFloat
}

// trimDecimals drops trailing zeros after a decimal point ("0.0300" → "0.03").
func trimDecimals(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-" || s == "-0" {
		return "0"
	}
	return s
}

// labelStep is how many rows apart the y labels are on a chart whose top row is n rows above
// the bottom one: about five labels, evenly spaced when n allows, otherwise spaced so that the
// top label (drawn separately) is not on the row just above another.
func labelStep(n int) int {
	if n <= 2 {
		return 1
	}
	for _, k := range []int{4, 5, 3, 6, 2} {
		if n%k == 0 && n/k >= 2 {
			return n / k
		}
	}
	if n <= 4 {
		return n
	}
	for s := max(n/4, 2); ; s++ {
		if n%s == 0 || n%s >= 2 {
			return s
		}
	}
}
func trimFloat(v float64) string {
	s := strconvFormat(v)
	if strings.Contains(s, "e") || !strings.Contains(s, ".") {
		return s
	}
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" || s == "-" {
		return "0"
	}
	return s
}
