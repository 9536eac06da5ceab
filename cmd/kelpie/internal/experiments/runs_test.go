package experiments

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/kelpie/kelpie/scheduler/manager"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 1, 1}, 1},
	} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v; want %v", c.xs, got, c.want)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v; want NaN", got)
	}
}

// TestValueSpread: a figure's median and min–max over the rounds, leaving
// out runs that measured nothing, and its text.
func TestValueSpread(t *testing.T) {
	v := newValue("JCT", "s", []float64{10, 12, math.NaN(), 11, 30})
	if v.Median != 11.5 || v.Min != 10 || v.Max != 30 || len(v.Runs) != 5 {
		t.Errorf("newValue = %+v; want median 11.5, min 10, max 30 over 5 runs", v)
	}
	if got, want := v.String(), "JCT 11.5 s [10.0–30.0]"; got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
	if got, want := newValue("x", "×", []float64{0.61}).String(), "x 0.61 ×"; got != want {
		t.Errorf("one run: String() = %q; want %q", got, want)
	}
	if v := newValue("x", "", []float64{math.NaN()}); !math.IsNaN(v.Median) || v.String() != "x –" {
		t.Errorf("nothing measured: %+v, %q", v, v.String())
	}
}

// rounds of an AntDT worker row: BSP's and AntDT-ND's JCT per round.
func antdtRounds(bsp, nd string, pairs ...[2]float64) []map[string]*manager.Result {
	var out []map[string]*manager.Result
	for _, p := range pairs {
		out = append(out, jcts(bsp, nd, p[0], p[1]))
	}
	return out
}

// TestJudgedOnTheMedian: one round far off either way does not decide a
// row; the median does.
func TestJudgedOnTheMedian(t *testing.T) {
	e := antdtWorker("0.8", 0.6)
	bsp, nd := e.Specs[0], e.Specs[1]
	e.Premise = func(map[string]*manager.Result) (string, bool) { return "", true }
	for _, c := range []struct {
		name   string
		rounds []map[string]*manager.Result
		want   bool
	}{
		{"two good rounds, one bad", antdtRounds(bsp, nd, [2]float64{10, 5}, [2]float64{10, 12}, [2]float64{10, 5.5}), true},
		{"one lucky round", antdtRounds(bsp, nd, [2]float64{10, 9}, [2]float64{10, 4}, [2]float64{10, 9.5}), false},
		{"one round, good", antdtRounds(bsp, nd, [2]float64{10, 5}), true},
	} {
		row := judgeRow(e, c.rounds, nil)
		if row.Holds != c.want {
			t.Errorf("%s: holds %v (%s); want %v", c.name, row.Holds, row.Ours, c.want)
		}
		if len(row.Rounds) != len(c.rounds) {
			t.Errorf("%s: %d rounds reported; want %d", c.name, len(row.Rounds), len(c.rounds))
		}
	}
	// The spread: both sides and the ratio, per round.
	row := judgeRow(e, antdtRounds(bsp, nd, [2]float64{10, 5}, [2]float64{20, 12}, [2]float64{10, 5.5}), nil)
	if len(row.Values) != 3 {
		t.Fatalf("values %+v; want BSP, AntDT-ND and the ratio", row.Values)
	}
	if r := row.Values[2]; r.Median != 0.55 || r.Min != 0.5 || r.Max != 0.6 {
		t.Errorf("ratio %+v; want median 0.55 [0.5–0.6]", r)
	}
	if b := row.Values[0]; b.Median != 10 || b.Max != 20 {
		t.Errorf("BSP %+v; want median 10, max 20", b)
	}
}

// TestPremiseFailsRow: a row whose target holds on the medians but whose
// premise does not, does not hold; a run that failed fails its row.
func TestPremiseFailsRow(t *testing.T) {
	e := antdtWorker("0.8", 0.6)
	bsp, nd := e.Specs[0], e.Specs[1]
	rounds := antdtRounds(bsp, nd, [2]float64{10, 5}) // no node BPTs: the straggler is not shown slow
	if row := judgeRow(e, rounds, nil); row.Holds || row.PremiseOK {
		t.Errorf("premise unmet: holds %v, premise %v (%s)", row.Holds, row.PremiseOK, row.Premise)
	}
	e.Premise = func(map[string]*manager.Result) (string, bool) { return "", true }
	row := judgeRow(e, rounds, errTest)
	if row.Holds || row.Error == "" {
		t.Errorf("a failed run: holds %v, error %q", row.Holds, row.Error)
	}
	var b bytes.Buffer
	if failed := writeTable(&b, Report{Runs: 1, Rows: []RowReport{row, judgeRow(e, rounds, nil)}}); failed != 1 {
		t.Errorf("writeTable counted %d failures; want 1\n%s", failed, b.String())
	}
	if !strings.Contains(b.String(), "failed: "+errTest.Error()) || !strings.Contains(b.String(), "| yes |") {
		t.Errorf("table:\n%s", b.String())
	}
}

var errTest = errString("round 2: boom")

type errString string

func (e errString) Error() string { return string(e) }

// TestMedianResult: figures are medians; stalls are medians per applied
// action when every run applied the same ones, and none when one run's
// stall was not measured.
func TestMedianResult(t *testing.T) {
	one := []string{"DEL_SERVER"}
	a, b, c := stalled(one, 0.2), stalled(one, 0.9), stalled(one, 0.3)
	a.JCTSeconds, b.JCTSeconds, c.JCTSeconds = 10, 30, 20
	a.Throughput, b.Throughput, c.Throughput = 100, 50, 80
	m := medianResult([]*manager.Result{a, b, c})
	if m.JCTSeconds != 20 || m.Throughput != 80 {
		t.Errorf("JCT %v, throughput %v; want 20, 80", m.JCTSeconds, m.Throughput)
	}
	if s := m.Actions[0].StallSeconds; s == nil || *s != 0.3 {
		t.Errorf("stall %v; want 0.3", s)
	}
	if a.JCTSeconds != 10 || *a.Actions[0].StallSeconds != 0.2 {
		t.Error("medianResult changed a run")
	}
	m = medianResult([]*manager.Result{a, stalled(one, math.NaN()), c})
	if s := m.Actions[0].StallSeconds; s != nil {
		t.Errorf("stall %v with one run unmeasured; want none", *s)
	}
}
