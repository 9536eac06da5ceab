package heatmap

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"testing/quick"

	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"
)

var viridis = []string{"#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c",
	"#22a884", "#44bf70", "#7ad151", "#bddf26", "#fde725"}

func TestLevel(t *testing.T) {
	cases := []struct {
		v      float32
		levels int
		want   int
	}{
		{0, 11, -1}, {-1, 11, -1}, {0.1, 11, 0}, {0.5, 11, 0}, {1.0, 11, 3}, {1.5, 11, 5},
		{2.5, 11, 10}, {9, 11, 10}, {1.5, 9, 4}, {1, 0, -1},
	}
	for _, c := range cases {
		if got := Level(c.v, 0.5, 2.5, c.levels); got != c.want {
			t.Errorf("Level(%v, 0.5, 2.5, %d) = %d; want %d", c.v, c.levels, got, c.want)
		}
	}
}

// nodes builds n rows of cols cells at the job mean (1.0), with hot[i] = ratio at node i's last cells.
func nodes(n, cols int, hot map[int]float32) []Row {
	rows := make([]Row, n)
	for i := range rows {
		cells := make([]float32, cols)
		for j := range cells {
			cells[j] = 0.9 + 0.2*float32((i*7+j*3)%10)/10
		}
		if v, ok := hot[i]; ok {
			cells[cols-5] = v
		}
		rows[i] = Row{Label: fmt.Sprintf("worker-%d", i), Cells: cells}
	}
	return rows
}

// A hot node among 1,000 never disappears, whatever the size of the drawing.
func TestHotNodeNeverDisappears(t *testing.T) {
	rows := nodes(1000, 60, map[int]float32{637: 3})
	for _, groups := range []int{1, 7, 10, 48, 100, 999, 1000} {
		for _, width := range []int{1, 13, 60, 150} {
			gs := Aggregate(rows, groups, width)
			found := false
			for _, g := range gs {
				if g.First <= 637 && 637 <= g.Last {
					found = true
					if g.Hottest != 637 {
						t.Errorf("Aggregate(1000 nodes, %d, %d): group %v; want hottest 637", groups, width, g)
					}
					m := float32(0)
					for _, v := range g.Cells {
						m = max(m, v)
					}
					if m != 3 {
						t.Errorf("Aggregate(1000 nodes, %d, %d): group %v max %v; want 3", groups, width, g, m)
					}
				}
			}
			if !found {
				t.Errorf("Aggregate(1000 nodes, %d, %d) lost node 637", groups, width)
			}
		}
	}
	var r Renderer
	for _, size := range [][2]int{{80, 10}, {150, 50}, {40, 6}} {
		ascii := r.Render(rows, Options{Width: size[0], Height: size[1], BucketSeconds: 1}, NewPalette(viridis, termenv.Ascii))
		if !strings.Contains(ascii, "@") || !strings.Contains(ascii, "worker-637") {
			t.Errorf("Render(Ascii %v) lost the hot node:\n%s", size, ascii)
		}
		p := NewPalette(viridis, termenv.TrueColor)
		color := r.Render(rows, Options{Width: size[0], Height: size[1], BucketSeconds: 1}, p)
		grid := color[:strings.LastIndex(color[:strings.LastIndex(color, "\n")], "\n")] // without axis and legend
		hot := len(p.fg) - 1
		if !(strings.Contains(grid, p.fg[hot]) || strings.Contains(grid, p.bg[hot])) || !strings.Contains(grid, "worker-637") {
			t.Errorf("Render(TrueColor %v) lost the hot node", size)
		}
	}
}

// Aggregate agrees with a brute-force max over the nodes and buckets of each cell.
func TestAggregateQuick(t *testing.T) {
	f := func(seed int64, n8, cols8, groups8, width8 uint8) bool {
		n, cols := int(n8%40)+1, int(cols8%30)+1
		groups, width := int(groups8%45)+1, int(width8%50)+1
		rng := rand.New(rand.NewSource(seed))
		rows := make([]Row, n)
		for i := range rows {
			c := make([]float32, cols)
			for j := range c {
				if rng.Intn(4) > 0 {
					c[j] = rng.Float32() * 3
				}
			}
			rows[i] = Row{Cells: c}
		}
		gs := Aggregate(rows, groups, width)
		if len(gs) != min(groups, n) || gs[0].First != 0 || gs[len(gs)-1].Last != n-1 {
			return false
		}
		for gi, g := range gs {
			if gi > 0 && g.First != gs[gi-1].Last+1 {
				return false
			}
			for x := 0; x < width; x++ {
				b0, b1 := x*cols/width, max((x+1)*cols/width, x*cols/width+1)
				want := float32(0)
				for i := g.First; i <= g.Last; i++ {
					for b := b0; b < b1; b++ {
						want = max(want, rows[i].Cells[b])
					}
				}
				if g.Cells[x] != want {
					t.Logf("n=%d cols=%d groups=%d width=%d group %d cell %d = %v; want %v", n, cols, groups, width, gi, x, g.Cells[x], want)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 300}); err != nil {
		t.Error(err)
	}
}

// Every rendering is exactly Height lines of Width columns, in colour and in Ascii.
func TestRenderSize(t *testing.T) {
	var r Renderer
	for _, prof := range []termenv.Profile{termenv.Ascii, termenv.ANSI256, termenv.TrueColor} {
		p := NewPalette(viridis, prof)
		for _, n := range []int{0, 1, 4, 30, 1000} {
			rows := nodes(n, 60, map[int]float32{0: 2})
			for _, size := range [][2]int{{80, 24}, {30, 3}, {150, 50}, {12, 5}} {
				out := r.Render(rows, Options{Width: size[0], Height: size[1], BucketSeconds: 2}, p)
				lines := strings.Split(out, "\n")
				if len(lines) != size[1] {
					t.Errorf("Render(%d nodes, %v, profile %d) has %d lines; want %d", n, size, prof, len(lines), size[1])
				}
				for i, l := range lines {
					if w := ansi.StringWidth(l); w != size[0] {
						t.Errorf("Render(%d nodes, %v, profile %d) line %d is %d wide; want %d: %q", n, size, prof, i, w, size[0], l)
					}
				}
			}
		}
	}
}

func TestRenderAscii(t *testing.T) {
	rows := []Row{
		{Label: "server-0", Cells: []float32{1, 1, 1, 1, 1, 1, 1, 1}},
		{Label: "worker-0", Cells: []float32{1, 1, 1, 1, 0.9, 1, 1, 1}},
		{Label: "worker-1", Cells: []float32{0, 0, 1, 1, 1, 1, 1, 1}},
		{Label: "worker-2", Cells: []float32{1, 1.5, 2, 2.5, 3, 3, 3, 3}},
	}
	var r Renderer
	got := r.Render(rows, Options{Width: 40, Height: 6, BucketSeconds: 5}, NewPalette(nil, termenv.Ascii))
	want := strings.Join([]string{
		"server-0 -------------------------------",
		"worker-0 -------------------------------",
		"worker-1         -----------------------",
		"worker-2 ----++++####@@@@@@@@@@@@@@@@@@@",
		"         -40s         -20s           now",
		"0.5× .:-=+*#%@ 2.5×  BPT ÷ job mean     ",
	}, "\n")
	if got != want {
		t.Errorf("Render(4 nodes) =\n%s\nwant\n%s", got, want)
	}
	// Two lines for four nodes: aggregated, each line named after its hottest node.
	got = r.Render(rows, Options{Width: 30, Height: 2}, NewPalette(nil, termenv.Ascii))
	want = "server-0 +1 ------------------\nworker-2 +1 ---++##@@@@@@@@@@@"
	if got != want {
		t.Errorf("Render(4 nodes in 2 lines) =\n%s\nwant\n%s", got, want)
	}
}

func TestRenderHalfBlocks(t *testing.T) {
	rows := []Row{
		{Label: "a", Cells: []float32{1, 0}},
		{Label: "b", Cells: []float32{2.5, 0}},
		{Label: "c", Cells: []float32{0, 2.5}},
	}
	p := NewPalette([]string{"#000000", "#ffffff"}, termenv.TrueColor)
	var r Renderer
	got := r.Render(rows, Options{Width: 9, Height: 2, Lo: 1, Hi: 2.5}, p)
	// Three nodes in two lines: a over b (named after b, the hotter; no room for "+1"), then c alone.
	want := "b    " + p.fg[0] + p.bg[1] + "▀▀" + bgReset + "  " + reset + "\n" +
		"c    " + bgReset + "  " + p.fg[1] + "▀▀" + reset
	if got != want {
		t.Errorf("Render(half blocks) = %q; want %q", got, want)
	}
}

func BenchmarkHeatmap1000(b *testing.B) {
	rows := nodes(1000, 60, map[int]float32{637: 3, 12: 2})
	p := NewPalette(viridis, termenv.TrueColor)
	var r Renderer
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Render(rows, Options{Width: 150, Height: 50, BucketSeconds: 1}, p)
	}
}
