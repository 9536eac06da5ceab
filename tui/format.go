package tui

import (
	"fmt"
	"math"
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
