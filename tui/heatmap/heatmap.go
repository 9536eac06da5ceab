// Package heatmap draws kelpie's straggler heatmap: one row per node (or per group of nodes), one
// column per time bucket, each cell coloured by the node's BPT relative to the job mean.
//
// It exists because ntcharts' heatmap cannot carry 1,000 nodes (docs/contributing.md, "The console"): it styles every
// cell with lipgloss (40–70 ms a frame) and, with more nodes than rows, keeps whichever point was
// drawn last, so a straggler can vanish. Here:
//   - nodes that share a row are aggregated by max, so the hottest node of a group always shows;
//   - each text line carries two rows with the upper half block ▀ (foreground = upper row,
//     background = lower row), and a line's label names its hottest node;
//   - colour escapes are precomputed per palette entry and emitted only when the colour changes;
//   - without colour (the Ascii profile) cells become a character ramp, one row per line.
//
// The package is pure: no I/O, no clock. A Renderer keeps scratch buffers between frames.
package heatmap

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/muesli/termenv"
)

// Ramp is the Ascii fallback, coolest first; no data is a blank.
const Ramp = ".:-=+*#%@"

// Palette holds the escape sequences of each colour, precomputed for one terminal profile.
type Palette struct {
	fg, bg []string
	ascii  bool
}

// NewPalette precomputes the escapes of colours (hex, cool to hot) for profile. With the Ascii
// profile (or no colours) the palette draws the character Ramp instead.
func NewPalette(colors []string, profile termenv.Profile) *Palette {
	p := &Palette{ascii: profile == termenv.Ascii || len(colors) == 0}
	if p.ascii {
		return p
	}
	for _, c := range colors {
		col := profile.Color(c)
		p.fg = append(p.fg, "\x1b["+col.Sequence(false)+"m")
		p.bg = append(p.bg, "\x1b["+col.Sequence(true)+"m")
	}
	return p
}

// Ascii reports whether the palette draws characters instead of colours.
func (p *Palette) Ascii() bool { return p.ascii }

// Levels is the number of distinct shades.
func (p *Palette) Levels() int {
	if p.ascii {
		return len(Ramp)
	}
	return len(p.fg)
}

// Row is one node's cells, oldest first; a cell is BPT / job mean, 0 for no data.
type Row struct {
	Label string
	Cells []float32
}

// Options sizes and scales one rendering.
type Options struct {
	Width, Height int     // the whole block: labels, cells, time axis and legend
	Lo, Hi        float64 // the ratios at the cool and hot ends of the palette (default 0.5 and 2.5)
	BucketSeconds float64 // seconds per cell, for the time axis (0: no axis labels)
	MaxLabel      int     // widest label column (default 18)
}

// Level maps a ratio to a palette level in [0, levels), or -1 for no data.
func Level(v float32, lo, hi float64, levels int) int {
	if v <= 0 || levels <= 0 || math.IsNaN(float64(v)) {
		return -1
	}
	f := (float64(v) - lo) / (hi - lo)
	l := int(f*float64(levels-1) + 0.5)
	if f < 0 {
		l = 0
	}
	if l < 0 {
		l = 0
	}
	if l >= levels {
		l = levels - 1
	}
	return l
}

// Group is one drawn row: the max over a contiguous run of nodes, resampled to the cell width.
type Group struct {
	First, Last int       // node indices covered, inclusive
	Hottest     int       // index of the node with the highest cell in the group
	Cells       []float32 // len = the cell width
}

// Aggregate folds rows into at most groups rows of width cells each, taking the max over the nodes
// that share a row and over the time buckets that share a column, so the hottest cell of every
// node is always drawn. Columns are stretched when there are fewer buckets than cells.
func Aggregate(rows []Row, groups, width int) []Group {
	var r Renderer
	return append([]Group(nil), r.aggregate(rows, groups, width)...)
}

// Renderer draws heatmaps, reusing its buffers from one frame to the next.
type Renderer struct {
	groups  []Group
	cells   []float32
	nodeMax []float32 // per node: its hottest cell
	bucket  []float32 // per time bucket: the max over the group being folded
	span    []int     // per cell column: its first bucket
	sb      strings.Builder
}

func (r *Renderer) aggregate(rows []Row, groups, width int) []Group {
	n := len(rows)
	if groups > n {
		groups = n
	}
	if groups <= 0 || width <= 0 {
		return nil
	}
	cols := 0
	for _, row := range rows {
		cols = max(cols, len(row.Cells))
	}
	r.nodeMax = grow(r.nodeMax, n)
	r.cells = grow(r.cells, groups*width)
	r.bucket = grow(r.bucket, cols)
	if cap(r.span) < width+1 {
		r.span = make([]int, width+1)
	}
	r.span = r.span[:width+1]
	for x := 0; x <= width; x++ { // column x covers buckets [span[x], max(span[x+1], span[x]+1))
		r.span[x] = x * cols / width
	}
	r.groups = r.groups[:0]
	for g := 0; g < groups; g++ {
		first, last := g*n/groups, (g+1)*n/groups-1
		bucket := r.bucket
		clear(bucket)
		hot, hotMax := first, float32(-1)
		for i := first; i <= last; i++ {
			cells := rows[i].Cells
			b := bucket[cols-len(cells):] // ragged rows are right-aligned: their newest cell is "now"
			m := float32(0)
			for j, v := range cells {
				if v > m {
					m = v
				}
				if v > b[j] {
					b[j] = v
				}
			}
			r.nodeMax[i] = m
			if m > hotMax {
				hot, hotMax = i, m
			}
		}
		out := r.cells[g*width : (g+1)*width]
		for x := range out {
			b0, b1 := r.span[x], r.span[x+1]
			if b1 <= b0 {
				b1 = b0 + 1
			}
			m := float32(0)
			for _, v := range bucket[b0:min(b1, cols)] {
				if v > m {
					m = v
				}
			}
			out[x] = m
		}
		r.groups = append(r.groups, Group{First: first, Last: last, Hottest: hot, Cells: out})
	}
	return r.groups
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// Render draws rows into exactly o.Height lines of o.Width columns: the grid, then a time axis and
// a legend under its last row (those two only when there are at least 4 lines), then blank lines.
func (r *Renderer) Render(rows []Row, o Options, p *Palette) string {
	if o.Width <= 0 || o.Height <= 0 {
		return ""
	}
	if o.Lo == 0 && o.Hi == 0 {
		o.Lo, o.Hi = 0.5, 2.5
	}
	if o.MaxLabel == 0 {
		o.MaxLabel = 18
	}
	gridLines := o.Height
	if o.Height >= 4 {
		gridLines = o.Height - 2
	}
	labelW := 0
	for _, row := range rows {
		labelW = max(labelW, utf8.RuneCountInString(row.Label))
	}
	perLine := 1
	if !p.ascii && len(rows) > gridLines {
		perLine = 2
	}
	if len(rows) > gridLines {
		labelW += len(" +") + len(strconv.Itoa(len(rows))) // a line that holds several nodes says how many
	}
	labelW = min(labelW, o.MaxLabel, o.Width/2)
	cellW := o.Width - labelW - 1
	if labelW == 0 {
		cellW = o.Width
	}
	r.sb.Reset()
	sb := &r.sb
	sb.Grow(o.Height * (o.Width + 16) * 2)
	groups := r.aggregate(rows, gridLines*perLine, max(cellW, 0))
	lines := (len(groups) + perLine - 1) / perLine
	drawn := gridLines // lines of grid before the axis: the axis and legend follow the last row
	if o.Height >= 4 {
		drawn = max(lines, 1)
	}
	for line := 0; line < drawn; line++ {
		if line > 0 {
			sb.WriteByte('\n')
		}
		if line >= lines {
			sb.WriteString(strings.Repeat(" ", o.Width))
			continue
		}
		up := &groups[line*perLine]
		var down *Group
		if perLine == 2 && line*2+1 < len(groups) {
			down = &groups[line*2+1]
		}
		if labelW > 0 {
			writeLabel(sb, rows, up, down, r.nodeMax, labelW)
			sb.WriteByte(' ')
		}
		if cellW <= 0 {
			continue
		}
		switch {
		case p.ascii:
			levels := len(Ramp)
			for _, v := range up.Cells {
				if l := Level(v, o.Lo, o.Hi, levels); l < 0 {
					sb.WriteByte(' ')
				} else {
					sb.WriteByte(Ramp[l])
				}
			}
		case perLine == 1:
			p.writeFull(sb, up.Cells, o)
		default:
			p.writeHalf(sb, up.Cells, down, o)
		}
	}
	if o.Height >= 4 {
		sb.WriteByte('\n')
		writeAxis(sb, o, labelW, cellW, rows)
		sb.WriteByte('\n')
		p.writeLegend(sb, o)
		for i := drawn + 2; i < o.Height; i++ {
			sb.WriteByte('\n')
			sb.WriteString(strings.Repeat(" ", o.Width))
		}
	}
	return sb.String()
}

func writeLabel(sb *strings.Builder, rows []Row, up, down *Group, nodeMax []float32, w int) {
	first, last, hot := up.First, up.Last, up.Hottest
	if down != nil {
		last = down.Last
		if nodeMax[down.Hottest] > nodeMax[hot] {
			hot = down.Hottest
		}
	}
	label := rows[hot].Label
	if n := last - first; n > 0 {
		if suffix := " +" + strconv.Itoa(n); w >= len(suffix)+3 {
			label = truncate(label, w-len(suffix)) + suffix
		}
	}
	label = truncate(label, w)
	sb.WriteString(label)
	if pad := w - utf8.RuneCountInString(label); pad > 0 {
		sb.WriteString(strings.Repeat(" ", pad))
	}
}

func truncate(s string, w int) string {
	if w <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= w {
		return s
	}
	rs := []rune(s)
	return string(rs[:w-1]) + "…"
}

const (
	reset   = "\x1b[0m"
	fgReset = "\x1b[39m"
	bgReset = "\x1b[49m"
)

// writeFull draws one row per line as full blocks.
func (p *Palette) writeFull(sb *strings.Builder, cells []float32, o Options) {
	cur := -2
	n := len(p.fg)
	for _, v := range cells {
		l := Level(v, o.Lo, o.Hi, n)
		if l != cur {
			if l < 0 {
				sb.WriteString(fgReset)
			} else {
				sb.WriteString(p.fg[l])
			}
			cur = l
		}
		if l < 0 {
			sb.WriteByte(' ')
		} else {
			sb.WriteString("█")
		}
	}
	sb.WriteString(reset)
}

// writeHalf draws two rows per line: ▀ with the upper row as foreground and the lower as background
// (▄ when only the lower row has data).
func (p *Palette) writeHalf(sb *strings.Builder, upper []float32, down *Group, o Options) {
	curFg, curBg := -2, -2
	n := len(p.fg)
	for x, v := range upper {
		a := Level(v, o.Lo, o.Hi, n)
		b := -1
		if down != nil {
			b = Level(down.Cells[x], o.Lo, o.Hi, n)
		}
		fg, bg, glyph := a, b, "▀"
		switch {
		case a < 0 && b < 0:
			fg, bg, glyph = curFg, -1, " " // keep the foreground: a blank does not show it
		case a < 0:
			fg, bg, glyph = b, -1, "▄"
		}
		if fg != curFg {
			if fg < 0 {
				sb.WriteString(fgReset)
			} else {
				sb.WriteString(p.fg[fg])
			}
			curFg = fg
		}
		if bg != curBg {
			if bg < 0 {
				sb.WriteString(bgReset)
			} else {
				sb.WriteString(p.bg[bg])
			}
			curBg = bg
		}
		sb.WriteString(glyph)
	}
	sb.WriteString(reset)
}

func writeAxis(sb *strings.Builder, o Options, labelW, cellW int, rows []Row) {
	line := make([]byte, o.Width)
	for i := range line {
		line[i] = ' '
	}
	start := 0
	if labelW > 0 {
		start = labelW + 1
	}
	cols := 0
	for _, row := range rows {
		cols = max(cols, len(row.Cells))
	}
	place := func(at int, s string) {
		if at < 0 || at+len(s) > len(line) {
			return
		}
		copy(line[at:], s)
	}
	if cellW > 0 && o.BucketSeconds > 0 && cols > 0 {
		span := o.BucketSeconds * float64(cols)
		left := "-" + shortDuration(span)
		place(start, left)
		if cellW >= 24 {
			mid := "-" + shortDuration(span/2)
			place(start+cellW/2-len(mid)/2, mid)
		}
		place(start+cellW-3, "now")
	} else if labelW > 0 {
		place(0, "node")
	}
	sb.Write(line)
}

func shortDuration(s float64) string {
	switch {
	case s >= 3600:
		return strconv.FormatFloat(s/3600, 'g', 3, 64) + "h"
	case s >= 120:
		return strconv.FormatFloat(s/60, 'g', 3, 64) + "m"
	default:
		return strconv.FormatFloat(s, 'g', 3, 64) + "s"
	}
}

func (p *Palette) writeLegend(sb *strings.Builder, o Options) {
	lo := strconv.FormatFloat(o.Lo, 'g', 3, 64) + "× "
	hi := " " + strconv.FormatFloat(o.Hi, 'g', 3, 64) + "×"
	note := "  BPT ÷ job mean"
	levels := p.Levels()
	width := utf8.RuneCountInString(lo) + levels + utf8.RuneCountInString(hi)
	if width > o.Width {
		sb.WriteString(strings.Repeat(" ", o.Width))
		return
	}
	sb.WriteString(lo)
	if p.ascii {
		sb.WriteString(Ramp)
	} else {
		for _, fg := range p.fg {
			sb.WriteString(fg)
			sb.WriteString("█")
		}
		sb.WriteString(reset)
	}
	sb.WriteString(hi)
	if width+utf8.RuneCountInString(note) <= o.Width {
		sb.WriteString(note)
		width += utf8.RuneCountInString(note)
	}
	sb.WriteString(strings.Repeat(" ", o.Width-width))
}

// String describes a group, for tests and debugging.
func (g Group) String() string {
	return fmt.Sprintf("nodes %d..%d hottest %d", g.First, g.Last, g.Hottest)
}
