package manager

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkHeatmap builds the heatmap of a job of 5,000 workers over 60
// columns: the part of a view rebuild that runs without the lock.
func BenchmarkHeatmap(b *testing.B) {
	const cols, workers = 120, 5000
	t0 := time.Unix(1000, 0)
	now := t0.Add(cols*time.Second - time.Millisecond)
	m := &Manager{cfg: Config{Columns: cols, Bucket: time.Second}}
	j := &jobState{m: m, bucket0: t0}
	rows := make([]nodeRow, workers)
	for i := range rows {
		rows[i] = nodeRow{name: fmt.Sprintf("worker-%d", i), role: "worker", cells: newBuckets(cols)}
		for c := range cols {
			rows[i].cells.add(c, float64(c+1), 1, 0)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		j.heatmap(rows, 60, now)
	}
}
