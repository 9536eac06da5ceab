//go:build ignore

// Record gathers what scripts/dataplane/run.sh measured into one JSON
// object, with what a reader needs to trust it: the command, the commit,
// the date and the machine (CPU model and count, kernel, memory, load), and
// every raw result file of the session (kelpie bench JSON as JSON, ps-lite's
// and the others' output as text). The README's data-plane figures come
// from such a record committed under docs/bench/.
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
		if base == "kelpie" || strings.HasSuffix(base, ".log") || base == "load.txt" {
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
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
