package spec

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits are the size units accepted in sizes and rates, matched without
// regard to case: KB is 1000 bytes, KiB 1024.
var byteUnits = map[string]float64{
	"":    1,
	"b":   1,
	"kb":  1e3,
	"mb":  1e6,
	"gb":  1e9,
	"tb":  1e12,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
	"tib": 1 << 40,
}

// formatUnits are tried in order by FormatRate and FormatSize.
var formatUnits = []struct {
	name string
	size float64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
}

// ParseSize parses a byte count such as "4MiB", "500KB", "1.5GB" or "4096".
func ParseSize(s string) (float64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && strings.IndexByte("0123456789.eE+-", t[i]) >= 0 {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", strings.TrimSpace(t[i:]))
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a size like 4MiB", s)
	}
	v *= mult
	if math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return v, nil
}

// ParseRate parses a bandwidth in bytes per second such as "20MiB/s",
// "500KB/s" or "1GB/s". A bare number is bytes per second.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if strings.HasSuffix(t, "/s") {
		t = strings.TrimSuffix(t, "/s")
	} else if _, err := strconv.ParseFloat(t, 64); err != nil {
		return 0, errors.New("want a rate like 20MiB/s")
	}
	v, err := ParseSize(t)
	if err != nil {
		return 0, fmt.Errorf("want a rate like 20MiB/s: %v", err)
	}
	return v, nil
}

// FormatSize formats a byte count with the largest unit that keeps it whole,
// so that ParseSize gives back exactly b.
func FormatSize(b float64) string {
	for _, u := range formatUnits {
		q := b / u.size
		if q >= 1 && q < 1e15 && q == math.Trunc(q) && q*u.size == b {
			return strconv.FormatFloat(q, 'f', -1, 64) + u.name
		}
	}
	return strconv.FormatFloat(b, 'g', -1, 64) + "B"
}

// FormatRate formats bytes per second so that ParseRate gives back exactly r.
func FormatRate(r float64) string { return FormatSize(r) + "/s" }
