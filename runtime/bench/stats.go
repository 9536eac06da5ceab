package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Op is one data-plane operation the benchmark times.
type Op string

// The operations. A pushpull op pushes a block and pulls it back in one
// request; it moves the block's bytes twice.
const (
	Push     Op = "push"
	Pull     Op = "pull"
	PushPull Op = "pushpull"
)

// ParseOp checks an operation name.
func ParseOp(s string) (Op, error) {
	switch o := Op(s); o {
	case Push, Pull, PushPull:
		return o, nil
	}
	return "", fmt.Errorf("bench: unknown op %q (want push, pull or pushpull)", s)
}

// Moved is the value bytes one operation carries on a block of size bytes:
// the pushed bytes plus the pulled bytes. Headers and acks do not count.
func (o Op) Moved(size int) int64 {
	if o == PushPull {
		return 2 * int64(size)
	}
	return int64(size)
}

// Topology is a number of server processes and worker goroutines; every
// worker has its own connection to every server.
type Topology struct {
	Servers, Workers int
}

func (t Topology) String() string { return fmt.Sprintf("%ds%dw", t.Servers, t.Workers) }

// ParseTopology reads "1x1" or "2s2w" (servers first).
func ParseTopology(s string) (Topology, error) {
	var t Topology
	if _, err := fmt.Sscanf(s, "%dx%d", &t.Servers, &t.Workers); err != nil {
		if _, err := fmt.Sscanf(s, "%ds%dw", &t.Servers, &t.Workers); err != nil {
			return Topology{}, fmt.Errorf("bench: config %q: want SERVERSxWORKERS, e.g. 2x2", s)
		}
	}
	if t.Servers < 1 || t.Workers < 1 {
		return Topology{}, fmt.Errorf("bench: config %q needs at least one server and one worker", s)
	}
	return t, nil
}

// ParseSize reads a byte count with an optional binary suffix: "4096",
// "4K", "64KB", "1M", "4MiB". K and M are powers of two (ps-lite's sizes).
// The result must be a positive multiple of 4 (whole float32 values).
func ParseSize(s string) (int, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := 1
	for _, suf := range []struct {
		s string
		m int
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}} {
		if strings.HasSuffix(u, suf.s) {
			u, mult = strings.TrimSuffix(u, suf.s), suf.m
			break
		}
	}
	n, err := strconv.Atoi(u)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bench: size %q: want a positive byte count like 4096, 64K or 1M", s)
	}
	n *= mult
	if n%4 != 0 {
		return 0, fmt.Errorf("bench: size %q is %d bytes, not a whole number of float32 values", s, n)
	}
	return n, nil
}

// FormatSize prints a size the way ParseSize reads it back.
func FormatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.Itoa(n)
}

// Percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted
// durations, or 0 for none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// MedianRun picks the run whose throughput is the median of rates (the
// lower middle one for an even count) and returns its index.
func MedianRun(rates []float64) int {
	idx := make([]int, len(rates))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case rates[a] < rates[b]:
			return -1
		case rates[a] > rates[b]:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

// OpsFor is how many operations per stream a timed run needs to last about
// target when one operation took perOp in calibration, within [lo, hi].
func OpsFor(perOp, target time.Duration, lo, hi int) int {
	if perOp <= 0 {
		return hi
	}
	n := int(math.Ceil(float64(target) / float64(perOp)))
	return min(max(n, lo), hi)
}

// MBPerSecond is bytes over d in MB/s (MB = 10^6 bytes).
func MBPerSecond(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / d.Seconds() / 1e6
}

func micros(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)*10) / 10 }
