package timeline

import (
	"testing"
	"time"
)

var s0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// steady is a worker completing iterations first+1.. every step from
// start, n of them.
func steady(first int64, start time.Time, step time.Duration, n int) []Mark {
	out := make([]Mark, n)
	for i := range out {
		out[i] = Mark{Iteration: first + int64(i) + 1, At: start.Add(time.Duration(i+1) * step)}
	}
	return out
}

func TestAddReport(t *testing.T) {
	at := s0.Add(time.Second)
	m := NewMarks(10)
	m.AddReport(at, 12, []float64{0.010, 0.020, 0.030}, []float64{0.005, 0, 0.001})
	got := m.All()
	want := []Mark{
		{10, at.Add(-ms(31) - ms(20))},
		{11, at.Add(-ms(31))},
		{12, at},
	}
	if len(got) != len(want) {
		t.Fatalf("AddReport gave %v; want %v", got, want)
	}
	for i := range want {
		if got[i].Iteration != want[i].Iteration || !got[i].At.Equal(want[i].At) {
			t.Errorf("mark %d = %+v; want %+v", i, got[i], want[i])
		}
	}
	// Missing waits and negative values count as zero.
	m = NewMarks(10)
	m.AddReport(at, 2, []float64{0.01, -1}, nil)
	got = m.All()
	if len(got) != 2 || !got[0].At.Equal(at) || !got[1].At.Equal(at) {
		t.Errorf("AddReport with a negative BPT and no waits = %v; want both at %v", got, at)
	}
	// A report without BPTs places nothing.
	m.AddReport(at, 3, nil, nil)
	if n := len(m.All()); n != 2 {
		t.Errorf("a report without BPTs added marks: %d kept; want 2", n)
	}
}

func TestMarksBounded(t *testing.T) {
	m := NewMarks(3)
	for i := range 5 {
		m.AddReport(time.Unix(0, 0), int64(i), []float64{0}, nil)
	}
	got := m.All()
	if len(got) != 3 || got[0].Iteration != 2 || got[2].Iteration != 4 {
		t.Fatalf("All after 5 adds into 3 = %v; want iterations 2, 3, 4", got)
	}
}

// TestStall measures hot changes and checkpoint-and-restart alike on
// crafted timelines.
func TestStall(t *testing.T) {
	step := ms(10)
	// 50 iterations at 10 ms, then the change.
	before := steady(0, s0, step, 50)
	last := before[len(before)-1]
	change := last.At.Add(ms(2)) // dispatched just after iteration 50
	for _, c := range []struct {
		name     string
		marks    []Mark
		from, to time.Time
		want     time.Duration
		ok       bool
	}{
		{
			// Iteration 51 waits 300 ms for blocks in transit.
			name:  "hot: one long iteration",
			marks: append(append(before[:50:50], Mark{51, last.At.Add(ms(310))}), steady(51, last.At.Add(ms(310)), step, 20)...),
			from:  change, to: change.Add(ms(300)),
			want: ms(300), ok: true,
		},
		{
			// The worker is stopped after iteration 50 and its new process
			// completes iteration 51 two seconds later.
			name:  "restart: the gap across processes",
			marks: append(append(before[:50:50], Mark{51, last.At.Add(ms(2010))}), steady(51, last.At.Add(ms(2010)), step, 20)...),
			from:  change, to: change.Add(3 * time.Second),
			want: 2 * time.Second, ok: true,
		},
		{
			// The old process completed 51..55 without reporting them;
			// the new one resumes at 56: those five are credited.
			name:  "restart past unreported iterations",
			marks: append(append(before[:50:50], Mark{56, last.At.Add(ms(2060))}), steady(56, last.At.Add(ms(2060)), step, 20)...),
			from:  change, to: change.Add(3 * time.Second),
			want: 2 * time.Second, ok: true,
		},
		{
			// The new process recomputes iteration 50: it spans one.
			name:  "restart that recomputes its last iteration",
			marks: append(append(before[:50:50], Mark{50, last.At.Add(ms(1010))}), steady(50, last.At.Add(ms(1010)), step, 20)...),
			from:  change, to: change.Add(3 * time.Second),
			want: time.Second, ok: true,
		},
		{
			name:  "no pause at all",
			marks: steady(0, s0, step, 100),
			from:  change, to: change.Add(ms(50)),
			want: 0, ok: true,
		},
		{
			// The long gap is outside the change's window: not its pause.
			name:  "a gap before the change does not count",
			marks: append(append(before[:10:10], Mark{11, before[9].At.Add(ms(510))}), steady(11, before[9].At.Add(ms(510)), step, 80)...),
			from:  before[9].At.Add(time.Second), to: before[9].At.Add(time.Second + ms(30)),
			want: 0, ok: true,
		},
		{
			name:  "no mark around the change",
			marks: before,
			from:  last.At.Add(time.Second), to: last.At.Add(2 * time.Second),
			ok: false,
		},
		{
			name:  "too few marks to know a normal iteration",
			marks: steady(0, s0, step, 3),
			from:  s0, to: s0.Add(time.Second),
			ok: false,
		},
	} {
		got, ok := Stall(c.marks, c.from, c.to)
		if ok != c.ok || (ok && (got-c.want).Abs() > time.Microsecond) {
			t.Errorf("%s: Stall = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// TestJobStalls: the job paused until its most paused worker went on; a
// gap that overlaps two changes belongs to the one whose window holds its
// end, else the first (a change made while another's restart went on is
// not charged with it; back-to-back restarts each get their own).
func TestJobStalls(t *testing.T) {
	step := ms(10)
	a := steady(0, s0, step, 50)
	b := append(steady(0, s0, step, 50), Mark{51, s0.Add(ms(500) + ms(200))})
	first := Window{s0.Add(ms(505)), s0.Add(ms(720))}
	second := Window{s0.Add(ms(550)), s0.Add(ms(800))}
	after := Window{s0.Add(time.Second), s0.Add(2 * time.Second)}
	got, ok := JobStalls(map[string][]Mark{"worker-0": a, "worker-1": b}, []Window{first, second, after})
	if !ok[0] || (got[0]-ms(190)).Abs() > time.Microsecond {
		t.Errorf("first change: JobStalls = %v, %v; want 190ms, true", got[0], ok[0])
	}
	if ok[1] {
		t.Errorf("second change, under way inside the first's gap: JobStalls = %v, %v; want not covered", got[1], ok[1])
	}
	if ok[2] {
		t.Errorf("a change after every timeline: JobStalls = %v, %v; want not covered", got[2], ok[2])
	}
	// Back to back: the second change's own gap starts before the first
	// was applied (its last mark) and ends in the second's window only.
	c := append(steady(0, s0, step, 50), Mark{51, s0.Add(ms(1500))}, Mark{52, s0.Add(ms(1510))}, Mark{53, s0.Add(ms(1520))},
		Mark{54, s0.Add(ms(3020))}, Mark{55, s0.Add(ms(3030))})
	remove := Window{s0.Add(ms(505)), s0.Add(ms(1505))}
	reassign := Window{s0.Add(ms(700)), s0.Add(ms(3025))}
	got, ok = JobStalls(map[string][]Mark{"worker-0": c}, []Window{remove, reassign})
	if !ok[0] || !ok[1] || (got[0]-ms(990)).Abs() > time.Microsecond || (got[1]-ms(1490)).Abs() > time.Microsecond {
		t.Errorf("back-to-back restarts: JobStalls = %v, %v; want [990ms 1.49s], both covered", got, ok)
	}
	// Alone, the second change is charged with the gap it overlaps.
	if got, ok := JobStalls(map[string][]Mark{"worker-1": b}, []Window{second}); !ok[0] || (got[0]-ms(190)).Abs() > time.Microsecond {
		t.Errorf("second change alone: JobStalls = %v, %v; want 190ms, true", got[0], ok[0])
	}
}
