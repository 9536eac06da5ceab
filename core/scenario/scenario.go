// Package scenario replays text scenario files against a test harness, in
// the manner of etcd raft's interaction tests: each file is a list of
// commands, and the lines starting with "> " after a command are its
// expected output. Blank lines and lines starting with # are kept as they
// are. With -rewrite the files are written back with the output the harness
// produced, to be read as a diff after a deliberate change.
//
// It is for tests only (the sync model's, the gate's, EPS's and the elastic
// change's): the pure cores import it from their _test files, never from
// their code.
package scenario

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of the testdata/*.txt scenarios")

// Step runs one command line and returns its output lines.
type Step func(cmd string) ([]string, error)

// Run replays every file matching glob (e.g. "testdata/*.txt") as a subtest,
// each against the fresh harness that start returns.
func Run(t *testing.T, glob string, start func() Step) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios in %s: %v", glob, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { replay(t, f, start()) })
	}
}

func replay(t *testing.T, path string, step Step) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var want []string
	var cmd string
	var cmdLine int
	flush := func() {
		if cmd == "" {
			return
		}
		got, err := step(cmd)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", path, cmdLine, cmd, err)
		}
		for _, g := range got {
			fmt.Fprintf(&out, "> %s\n", g)
		}
		if !*rewrite && strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:%d: %s\n got: %s\nwant: %s", path, cmdLine, cmd,
				strings.Join(got, "\n      "), strings.Join(want, "\n      "))
		}
		cmd, want = "", nil
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "> "):
			want = append(want, strings.TrimPrefix(line, "> "))
			continue
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
			flush()
			out.WriteString(line + "\n")
		default:
			flush()
			out.WriteString(line + "\n")
			cmd, cmdLine = line, n
		}
	}
	flush()
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
