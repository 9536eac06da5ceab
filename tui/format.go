package tui

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// age is a short duration: 45s, 3m12s, 2h05m, 3d04h.
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// since is the age of a timestamp at now ("" when unset).
func since(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil || (t.Seconds == 0 && t.Nanos == 0) {
		return ""
	}
	return age(now.Sub(t.AsTime()))
}

// secs formats seconds as s or ms.
func secs(v float64) string {
	switch {
	case v <= 0 || math.IsNaN(v):
		return "–"
	case v < 0.01:
		return strconv.FormatFloat(v*1000, 'f', 1, 64) + "ms"
	case v < 1:
		return strconv.FormatFloat(v*1000, 'f', 0, 64) + "ms"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64) + "s"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "s"
}

// si formats v with k, M, G suffixes.
func si(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 1, 64) + "G"
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a == 0:
		return "0"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// rate is samples per second.
func rate(v float64) string {
	if v <= 0 {
		return "–"
	}
	return si(v) + "/s"
}

// bytesPerSec is a speed in B/s, KB/s, MB/s.
func bytesPerSec(v float64) string {
	switch {
	case v <= 0:
		return "–"
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 2, 64) + " GB/s"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + " MB/s"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + " KB/s"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " B/s"
}

// bar is a progress bar of w cells for done of total.
func bar(done, total int64, w int) string {
	if w <= 0 {
		return ""
	}
	if total <= 0 {
		return strings.Repeat("░", w)
	}
	n := int(float64(w) * float64(done) / float64(total))
	n = max(0, min(n, w))
	return strings.Repeat("█", n) + strings.Repeat("░", w-n)
}

func pct(done, total int64) string {
	if total <= 0 {
		return "–"
	}
	return strconv.Itoa(int(100*done/total)) + "%"
}

// lossText formats a training loss: "" before any was reported, NaN and
// ±Inf as such (a diverged job's loss is not a number, never 0).
func lossText(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v <= 0:
		return ""
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// plural is "1 server", "2 servers".
func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}

// evidenceNames are the readable names of a policy's evidence keys (the
// part after "node/"; a trailing _s, seconds, is taken off first).
var evidenceNames = map[string]string{
	"bpt_per":                "BPT long",
	"bpt_trans":              "BPT short",
	"mean_bpt_per":           "mean BPT long",
	"mean_bpt_trans":         "mean BPT short",
	"window_per":             "long window",
	"window_trans":           "short window",
	"ratio_per":              "ratio long",
	"ratio_trans":            "ratio short",
	"comm_per":               "push/pull long",
	"mean_comm_per":          "mean push/pull long",
	"current_bpt":            "BPT now (model)",
	"predicted_bpt":          "predicted BPT",
	"others_mean_bpt":        "others' mean BPT",
	"throughput":             "throughput",
	"throughput_now":         "throughput now",
	"lambda":                 "λ",
	"global_batch":           "global batch",
	"escalated_from_seconds": "escalated from",
}

// evidenceText writes a policy's evidence for people, sorted by key: times
// (keys ending in _s) in ms or s at three significant digits, throughputs
// as rates, other numbers at three significant digits — never the
// sixteen digits of a float64.
func evidenceText(m map[string]float64) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		v := m[k]
		node, field, ok := strings.Cut(k, "/")
		if !ok {
			node, field = "", k
		}
		val := strconv.FormatFloat(v, 'g', 3, 64)
		if field == "escalated_from_seconds" {
			val = time.Unix(int64(v), 0).UTC().Format("15:04:05 UTC")
		} else if f, isTime := strings.CutSuffix(field, "_s"); isTime {
			field, val = f, duration(v)
		} else if strings.Contains(field, "throughput") {
			val = rate(v)
		}
		name := field
		if n, known := evidenceNames[field]; known {
			name = n
		} else {
			name = strings.ReplaceAll(field, "_", " ")
		}
		if node != "" {
			name = node + " " + name
		}
		parts = append(parts, name+" "+val)
	}
	return strings.Join(parts, " · ")
}

// duration writes seconds with three significant digits in ms below a
// second ("2.49ms", "27.1ms", "412ms"), else in s ("1.25s", "20s").
func duration(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.Abs(v) < 1:
		return strconv.FormatFloat(v*1000, 'g', 3, 64) + "ms"
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + "s"
}
