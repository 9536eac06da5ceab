//go:build ignore

// Record gathers what scripts/dataplane/run.sh measured into one JSON
// object, with what a reader needs to trust it: the command, the commit,
// the date and the machine (CPU model and count, kernel, memory, load), and
// every raw result file of the session (kelpie bench JSON as JSON, ps-lite's
// and the others' output as text), and the README's data-plane tables made
// from them (readme: OUT/readme-tables.md, which summary.go -markdown
// writes, under a line naming the session). `make bench-dataplane` writes
// the record to docs/bench/dataplane.json; the README quotes its readme
// field word for word (runtime/bench's TestREADMEQuotesDataplaneRecord).
//
//	go run scripts/dataplane/record.go OUT COMMAND COMMIT > record.json
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

type machine struct {
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	Kernel string `json:"kernel"`
	MemKB  string `json:"mem_total"`
	GOARCH string `json:"goarch"`
}

type record struct {
	Command string                     `json:"command"`
	Commit  string                     `json:"commit"`
	Date    string                     `json:"date"`
	Machine machine                    `json:"machine"`
	Load    string                     `json:"load"`
	Readme  string                     `json:"readme"`
	Files   map[string]json.RawMessage `json:"files"`
}

func field(file, prefix string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return ""
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: go run record.go OUT COMMAND COMMIT")
		os.Exit(2)
	}
	dir := os.Args[1]
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	load, _ := os.ReadFile(filepath.Join(dir, "load.txt"))
	r := record{Command: os.Args[2], Commit: os.Args[3], Date: time.Now().UTC().Format(time.RFC3339),
		Machine: machine{CPU: field("/proc/cpuinfo", "model name"), CPUs: runtime.NumCPU(),
			Kernel: strings.TrimSpace(string(kernel)), MemKB: field("/proc/meminfo", "MemTotal"), GOARCH: runtime.GOARCH},
		Load: strings.TrimSpace(string(load)), Files: map[string]json.RawMessage{}}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	sort.Strings(names)
	for _, f := range names {
		base := filepath.Base(f)
		if base == "kelpie" || strings.HasSuffix(base, ".log") || base == "load.txt" || base == "readme-tables.md" || base == "record.json" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if json.Valid(b) {
			r.Files[base] = b
			continue
		}
		s, _ := json.Marshal(string(b))
		r.Files[base] = s
	}
	if tables, err := os.ReadFile(filepath.Join(dir, "readme-tables.md")); err == nil {
		short := r.Commit
		if len(short) > 12 {
			short = short[:12]
		}
		r.Readme = fmt.Sprintf("Session of %s: `%s` at commit %s on %s (%d CPUs, shared with other work), %s.\n%s",
			r.Date[:10], r.Command, short, r.Machine.CPU, r.Machine.CPUs, loadWords(string(load)), tables)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// loadWords is load.txt ("load before: a b c", "load after: ...") as
// "load average before a, after a" (1-minute figures).
func loadWords(s string) string {
	var parts []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		what, v, ok := strings.Cut(l, ":")
		if f := strings.Fields(v); ok && len(f) > 0 {
			parts = append(parts, strings.TrimPrefix(what, "load ")+" "+f[0])
		}
	}
	if len(parts) == 0 {
		return "load not recorded"
	}
	return "1-minute load average " + strings.Join(parts, ", ")
}
