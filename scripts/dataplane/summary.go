//go:build ignore

// Summary prints the medians (and the spread over runs) of what
// scripts/dataplane/run.sh measured, each figure a ratio taken within one
// run, and checks them against issue 15's bounds. With -markdown it prints
// instead the README's data-plane tables of the session (1 server × 1
// worker over TCP and the Unix socket, each against its raw baseline of the
// same run, ps-lite beside them), which record.go puts in the record.
//
//	go run scripts/dataplane/summary.go [-markdown] OUT
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

type result struct {
	Op       string  `json:"op"`
	Servers  int     `json:"servers"`
	Workers  int     `json:"workers"`
	Bytes    int     `json:"bytes"`
	Inflight int     `json:"inflight"`
	MBPerS   float64 `json:"mb_per_s"`
	P50US    float64 `json:"p50_us"`
	Raw      float64 `json:"raw_tcp_mb_per_s"`
	RawRTT   float64 `json:"raw_tcp_rtt_p50_us"`
	RawUnix  float64 `json:"raw_unix_mb_per_s"`
	RawURTT  float64 `json:"raw_unix_rtt_p50_us"`
	Baseline string  `json:"raw_baseline"` // what Ratio divides by: tcp | unix
	Ratio    float64 `json:"kelpie_over_raw"`
	Plain    float64 `json:"plain_mb_per_s"`
	Secure   float64 `json:"secure_over_plain"`
}

type report struct {
	Results    []result `json:"results"`
	Pinned     bool     `json:"pinned"`
	Transport  string   `json:"transport"`
	LoadBefore float64  `json:"load_before"`
}

type key struct {
	op                        string
	servers, workers, size, n int
}

func (k key) String() string {
	return fmt.Sprintf("%-8s %dx%d %5s inflight %d", k.op, k.servers, k.workers, size(k.size), k.n)
}

func size(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.Itoa(n)
}

// spread is a median with the least and greatest value.
type spread []float64

func (s spread) String() string {
	if len(s) == 0 {
		return "—"
	}
	v := slices.Clone(s)
	slices.Sort(v)
	return fmt.Sprintf("%.2f [%.2f–%.2f]", v[len(v)/2], v[0], v[len(v)-1])
}

func (s spread) median() float64 {
	v := slices.Clone(s)
	slices.Sort(v)
	return v[len(v)/2]
}

func runs(dir, pattern string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	sort.Strings(m)
	return m
}

func load(path string) (report, error) {
	var r report
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

// runIndex is the N of a file name ending in -N.json or -N.txt.
func runIndex(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	return base[strings.LastIndex(base, "-")+1:]
}

var checks []string

func check(ok bool, format string, a ...any) {
	mark := "ok  "
	if !ok {
		mark = "MISS"
	}
	checks = append(checks, mark+" "+fmt.Sprintf(format, a...))
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-markdown" {
		markdown(os.Args[2])
		return
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run summary.go [-markdown] OUT")
		os.Exit(2)
	}
	dir := os.Args[1]
	if b, err := os.ReadFile(filepath.Join(dir, "load.txt")); err == nil {
		fmt.Print(string(b))
	}
	kelpie := map[string]map[key]result{} // run index -> row (tcp)
	for _, tr := range []string{"tcp", "unix"} {
		files := runs(dir, "bench-"+tr+"-*.json")
		if len(files) == 0 {
			continue
		}
		rows := map[key][]result{}
		var order []key
		for _, f := range files {
			r, err := load(f)
			if err != nil {
				fmt.Fprintln(os.Stderr, f, err)
				continue
			}
			fmt.Printf("%s: pinned %v, load before %.2f\n", filepath.Base(f), r.Pinned, r.LoadBefore)
			for _, x := range r.Results {
				k := key{x.Op, x.Servers, x.Workers, x.Bytes, x.Inflight}
				if rows[k] == nil {
					order = append(order, k)
				}
				rows[k] = append(rows[k], x)
				if tr == "tcp" {
					if kelpie[runIndex(f)] == nil {
						kelpie[runIndex(f)] = map[key]result{}
					}
					kelpie[runIndex(f)][k] = x
				}
			}
		}
		fmt.Printf("\nkelpie bench pushpull --transport %s (%d runs): medians [min–max] over runs\n", tr, len(files))
		// Like for like: unix rows against the raw baseline over a Unix
		// socket (bench JSON raw_baseline), tcp rows against raw TCP.
		base := "TCP"
		if tr == "unix" {
			base = "Unix"
		}
		fmt.Printf("%-32s %22s %22s %22s %22s\n", "row", "MB/s", "raw "+base+" MB/s", "kelpie/raw", "p50 / raw RTT p50")
		for _, k := range order {
			var mb, raw, ratio, lat spread
			for _, x := range rows[k] {
				r, rtt := x.Raw, x.RawRTT
				if x.Baseline == "unix" {
					r, rtt = x.RawUnix, x.RawURTT
				}
				mb, raw, ratio = append(mb, x.MBPerS), append(raw, r), append(ratio, x.Ratio)
				lat = append(lat, x.P50US/rtt)
			}
			fmt.Printf("%-32s %22s %22s %22s %22s\n", k, mbs(mb), mbs(raw), ratio, lat)
			if tr != "tcp" {
				continue
			}
			one := k.servers == 1 && k.workers == 1
			switch {
			case one && k.n == 1 && (k.op == "push" || k.op == "pull") && k.size >= 1<<20:
				check(ratio.median() >= 0.9, "tcp %v: kelpie/raw %.2f (≥ 0.9)", k, ratio.median())
			case one && k.n == 1 && k.op == "push" && k.size == 4<<10:
				check(lat.median() <= 1.35, "tcp %v: p50/raw RTT %.2f (≤ 1.35)", k, lat.median())
			case one && k.n == 8 && k.size == 4<<10 && k.op != "pushpull":
				check(ratio.median() >= 0.8, "tcp %v: kelpie/raw %.2f (≥ 0.8)", k, ratio.median())
			}
		}
	}

	// ps-lite, side by side with the kelpie run of the same index.
	psRE := regexp.MustCompile(`RESULT op=(\w+) bytes=(\d+) servers=(\d+) p50_us=([\d.]+) mb_per_s=([\d.]+)`)
	type psKey struct {
		op   string
		size int
	}
	ps := map[psKey][][3]float64{} // MB/s, p50, kelpie's same-run figure
	var psOrder []psKey
	for _, f := range runs(dir, "pslite-*.txt") {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			m := psRE.FindStringSubmatch(sc.Text())
			if m == nil || m[3] != "1" {
				continue
			}
			n, _ := strconv.Atoi(m[2])
			p50, _ := strconv.ParseFloat(m[4], 64)
			mb, _ := strconv.ParseFloat(m[5], 64)
			k := psKey{m[1], n}
			kr, ok := kelpie[runIndex(f)][key{m[1], 1, 1, n, 1}]
			if !ok {
				continue
			}
			if ps[k] == nil {
				psOrder = append(psOrder, k)
			}
			ps[k] = append(ps[k], [3]float64{mb, p50, 0})
			last := &ps[k][len(ps[k])-1]
			if n == 4<<10 {
				last[2] = p50 / kr.P50US // latency: ps-lite's p50 over kelpie's
			} else {
				last[2] = kr.MBPerS / mb
			}
		}
		fh.Close()
	}
	if len(ps) > 0 {
		fmt.Printf("\nps-lite (ZeroMQ) beside kelpie (tcp, 1x1, 1 in flight) of the same run index\n")
		fmt.Printf("%-14s %22s %22s %30s\n", "row", "ps-lite MB/s", "ps-lite p50 µs", "kelpie ahead by (×)")
		for _, k := range psOrder {
			var mb, p50, ahead spread
			for _, v := range ps[k] {
				mb, p50, ahead = append(mb, v[0]), append(p50, v[1]), append(ahead, v[2])
			}
			what := "MB/s kelpie/ps-lite"
			if k.size == 4<<10 {
				what = "p50 ps-lite/kelpie"
			}
			fmt.Printf("%-5s %8s %22s %22s %30s\n", k.op, size(k.size), mbs(mb), p50, ahead.String()+" "+what)
			if k.size >= 64<<10 || (k.size == 4<<10 && k.op == "push") {
				check(ahead.median() > 1, "ps-lite %s %s: kelpie ahead ×%.2f (%s)", k.op, size(k.size), ahead.median(), what)
			}
		}
	}

	for _, sec := range []struct{ pattern, what string }{
		{"security-auth-*.json", "authenticated (the default) over no security"},
		{"security-enc-*.json", "authenticated and encrypted over no security"},
	} {
		files := runs(dir, sec.pattern)
		if len(files) == 0 {
			continue
		}
		rows := map[key]spread{}
		var order []key
		for _, f := range files {
			r, err := load(f)
			if err != nil {
				continue
			}
			for _, x := range r.Results {
				k := key{x.Op, x.Servers, x.Workers, x.Bytes, x.Inflight}
				if rows[k] == nil {
					order = append(order, k)
				}
				rows[k] = append(rows[k], x.Secure)
			}
		}
		fmt.Printf("\nsecurity cost: %s, MB/s ratio in the same run (%d runs)\n", sec.what, len(files))
		for _, k := range order {
			fmt.Printf("%-32s %22s\n", k, rows[k])
			if strings.HasPrefix(sec.pattern, "security-auth") && k.size == 1<<20 {
				check(rows[k].median() >= 0.95, "default security %v: ×%.3f of plain (≥ 0.95)", k, rows[k].median())
			}
		}
	}

	// End to end: samples/s per job and binary; after/before per run.
	e2e := map[string]map[string]map[string]float64{} // job -> binary -> run -> samples/s
	for _, f := range runs(dir, "e2e__*.json") {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var r struct {
			Throughput float64 `json:"throughput_samples_per_s"`
			Accuracy   float64 `json:"accuracy"`
		}
		if json.Unmarshal(b, &r) != nil || r.Throughput == 0 {
			fmt.Fprintf(os.Stderr, "%s: no result\n", filepath.Base(f))
			continue
		}
		// e2e__JOB__BINARY__RUN.json
		parts := strings.Split(strings.TrimSuffix(filepath.Base(f), ".json"), "__")
		if len(parts) != 4 {
			continue
		}
		job, bin, run := parts[1], parts[2], parts[3]
		if e2e[job] == nil {
			e2e[job] = map[string]map[string]float64{}
		}
		if e2e[job][bin] == nil {
			e2e[job][bin] = map[string]float64{}
		}
		e2e[job][bin][run] = r.Throughput
	}
	for job, bins := range e2e {
		fmt.Printf("\nend to end %s: samples/s, median [min–max] over runs\n", job)
		var names []string
		for b := range bins {
			names = append(names, b)
		}
		sort.Strings(names)
		for _, b := range names {
			var v spread
			for _, x := range bins[b] {
				v = append(v, x)
			}
			fmt.Printf("  %-24s %s\n", b, v)
		}
		// This tree's binary (run.sh names it kelpie) over each other one,
		// run by run.
		for _, b := range names {
			if b == "kelpie" || bins["kelpie"] == nil {
				continue
			}
			var r spread
			for run, x := range bins[b] {
				if y, ok := bins["kelpie"][run]; ok {
					r = append(r, y/x)
				}
			}
			fmt.Printf("  kelpie / %-15s %s\n", b, r)
		}
	}

	if len(checks) > 0 {
		fmt.Printf("\nissue 15 / 11 bounds (medians):\n")
		for _, c := range checks {
			fmt.Println(" ", c)
		}
	}
}

func mbs(s spread) string {
	if len(s) == 0 {
		return "—"
	}
	v := slices.Clone(s)
	slices.Sort(v)
	return fmt.Sprintf("%.0f [%.0f–%.0f]", v[len(v)/2], v[0], v[len(v)-1])
}

// benchRows are the rows of every bench-TRANSPORT-N.json of dir, by row,
// in the order of the first file.
func benchRows(dir, transport string) (map[key][]result, []key, int) {
	files := runs(dir, "bench-"+transport+"-*.json")
	rows := map[key][]result{}
	var order []key
	for _, f := range files {
		r, err := load(f)
		if err != nil {
			continue
		}
		for _, x := range r.Results {
			k := key{x.Op, x.Servers, x.Workers, x.Bytes, x.Inflight}
			if rows[k] == nil {
				order = append(order, k)
			}
			rows[k] = append(rows[k], x)
		}
	}
	return rows, order, len(files)
}

// med is a median (of an even count, the mean of the middle two) with its
// range, at prec decimals.
func med(s spread, prec int) string {
	if len(s) == 0 {
		return "—"
	}
	v := slices.Clone(s)
	slices.Sort(v)
	if v[0] == v[len(v)-1] {
		return strconv.FormatFloat(v[0], 'f', prec, 64)
	}
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return fmt.Sprintf("%s [%s–%s]", strconv.FormatFloat(m, 'f', prec, 64),
		strconv.FormatFloat(v[0], 'f', prec, 64), strconv.FormatFloat(v[len(v)-1], 'f', prec, 64))
}

// markdown prints the README's tables: for each transport, 1 server × 1
// worker, push and pull per size and requests in flight, kelpie's MB/s, its
// raw baseline's (raw TCP for tcp rows, a raw Unix socket for unix rows,
// both measured in the same run) and the ratio, median [min–max] over the
// runs; then ps-lite's kvbench beside kelpie's tcp run of the same index,
// and ps-lite's own benchmark.
func markdown(dir string) {
	tcpRuns := map[string]map[key]result{}
	for _, tr := range []string{"tcp", "unix"} {
		rows, order, n := benchRows(dir, tr)
		if n == 0 {
			continue
		}
		base := "raw TCP"
		if tr == "unix" {
			base = "raw Unix socket"
		}
		fmt.Printf("\n`kelpie bench pushpull --transport %s`, 1 server × 1 worker, %d runs: median [min–max]\n\n", tr, n)
		fmt.Printf("| op | size | in flight | kelpie MB/s | %s MB/s | kelpie ÷ raw | kelpie p50 µs | ÷ raw RTT p50 |\n", base)
		fmt.Printf("|---|---|---|---|---|---|---|---|\n")
		for _, k := range order {
			if k.servers != 1 || k.workers != 1 || k.op == "pushpull" {
				continue
			}
			var mb, raw, ratio, p50, lat spread
			for _, x := range rows[k] {
				r, rtt := x.Raw, x.RawRTT
				if x.Baseline == "unix" {
					r, rtt = x.RawUnix, x.RawURTT
				}
				mb, raw, ratio, p50 = append(mb, x.MBPerS), append(raw, r), append(ratio, x.Ratio), append(p50, x.P50US)
				if rtt > 0 {
					lat = append(lat, x.P50US/rtt)
				}
			}
			fmt.Printf("| %s | %s | %d | %s | %s | %s | %s | %s |\n", k.op, size(k.size), k.n, med(mb, 0), med(raw, 0), med(ratio, 2), med(p50, 1), med(lat, 2))
		}
		if tr == "tcp" {
			for _, f := range runs(dir, "bench-tcp-*.json") {
				r, err := load(f)
				if err != nil {
					continue
				}
				m := map[key]result{}
				for _, x := range r.Results {
					m[key{x.Op, x.Servers, x.Workers, x.Bytes, x.Inflight}] = x
				}
				tcpRuns[runIndex(f)] = m
			}
		}
	}
	psRE := regexp.MustCompile(`RESULT op=(\w+) bytes=(\d+) servers=(\d+) p50_us=([\d.]+) mb_per_s=([\d.]+)`)
	type psKey struct {
		op   string
		size int
	}
	type psVals struct{ mb, p50, kmb, kp50 spread }
	ps := map[psKey]*psVals{}
	var psOrder []psKey
	files := runs(dir, "pslite-[0-9]*.txt")
	psRuns := 0 // runs that printed results (ps-lite's processes can fail to meet)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if psRE.Match(b) {
			psRuns++
		}
		for _, l := range strings.Split(string(b), "\n") {
			m := psRE.FindStringSubmatch(l)
			if m == nil || m[3] != "1" {
				continue
			}
			n, _ := strconv.Atoi(m[2])
			p50, _ := strconv.ParseFloat(m[4], 64)
			mb, _ := strconv.ParseFloat(m[5], 64)
			k := psKey{m[1], n}
			kr, ok := tcpRuns[runIndex(f)][key{m[1], 1, 1, n, 1}]
			if !ok {
				continue
			}
			if ps[k] == nil {
				ps[k] = &psVals{}
				psOrder = append(psOrder, k)
			}
			v := ps[k]
			v.mb, v.p50, v.kmb, v.kp50 = append(v.mb, mb), append(v.p50, p50), append(v.kmb, kr.MBPerS/mb), append(v.kp50, p50/kr.P50US)
		}
	}
	if len(ps) > 0 {
		fmt.Printf("\nps-lite (`scripts/dataplane/pslite`, kvbench: ZeroMQ, -O3 -march=native, zero-copy pull), 1 server × 1 worker, 1 in flight, beside kelpie's tcp run of the same index, %d of %d runs (the others printed no results)\n\n", psRuns, len(files))
		fmt.Printf("| op | size | ps-lite MB/s | ps-lite p50 µs | kelpie ÷ ps-lite, MB/s | ps-lite ÷ kelpie, p50 |\n|---|---|---|---|---|---|\n")
		for _, k := range psOrder {
			v := ps[k]
			fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", k.op, size(k.size), med(v.mb, 0), med(v.p50, 1), med(v.kmb, 2), med(v.kp50, 2))
		}
	}
	ownRE := regexp.MustCompile(`num = (\d+), (Push|Pull) average time cost: ([\d.]+)ms`)
	own := map[string]spread{}
	var num int
	ownFiles := runs(dir, "pslite-own-*.txt")
	ownRuns := 0
	for _, f := range ownFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if ownRE.Match(b) {
			ownRuns++
		}
		for _, m := range ownRE.FindAllStringSubmatch(string(b), -1) {
			num, _ = strconv.Atoi(m[1])
			ms, _ := strconv.ParseFloat(m[3], 64)
			own[m[2]] = append(own[m[2]], ms)
		}
	}
	if len(own) > 0 {
		fmt.Printf("\nps-lite's own `tests/test_kv_app_benchmark.cc` (unchanged; one push and one pull of %d keys with as many float values, an empty server handler; %d of %d runs printed results): ", num, ownRuns, len(ownFiles))
		var parts []string
		for _, op := range []string{"Push", "Pull"} {
			if s := own[op]; len(s) > 0 {
				var mbs spread
				for _, ms := range s {
					mbs = append(mbs, float64(num)*4/1e6/(ms/1e3))
				}
				parts = append(parts, fmt.Sprintf("%s %s ms (%s MB/s of values; its 8-byte keys travel too)", strings.ToLower(op), med(s, 0), med(mbs, 0)))
			}
		}
		fmt.Printf("%s.\n", strings.Join(parts, ", "))
	}
}
