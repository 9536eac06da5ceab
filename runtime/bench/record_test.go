package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEQuotesDataplaneRecord: the README's data-plane tables are the
// committed record's (docs/bench/dataplane.json, written by `make
// bench-dataplane` through scripts/dataplane/record.go), word for word, and
// the record says what produced it: the command, the commit, the machine,
// the load and the raw files its tables come from.
func TestREADMEQuotesDataplaneRecord(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "docs", "bench", "dataplane.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Command string `json:"command"`
		Commit  string `json:"commit"`
		Date    string `json:"date"`
		Machine struct {
			CPU  string `json:"cpu"`
			CPUs int    `json:"cpus"`
		} `json:"machine"`
		Load   string                     `json:"load"`
		Readme string                     `json:"readme"`
		Files  map[string]json.RawMessage `json:"files"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("docs/bench/dataplane.json: %v", err)
	}
	if rec.Command == "" || len(rec.Commit) < 7 || rec.Date == "" || rec.Machine.CPU == "" || rec.Machine.CPUs == 0 || rec.Load == "" {
		t.Errorf("the record does not say what produced it: command %q, commit %q, date %q, cpu %q × %d, load %q",
			rec.Command, rec.Commit, rec.Date, rec.Machine.CPU, rec.Machine.CPUs, rec.Load)
	}
	for _, f := range []string{"bench-tcp-1.json", "bench-unix-1.json"} {
		if _, ok := rec.Files[f]; !ok {
			t.Errorf("the record has no %s", f)
		}
	}
	if !strings.Contains(rec.Readme, "raw Unix socket") || !strings.Contains(rec.Readme, "raw TCP") {
		t.Errorf("the record's tables do not set tcp rows against raw TCP and unix rows against a raw Unix socket:\n%s", rec.Readme)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), strings.TrimSpace(rec.Readme)) {
		t.Errorf("README.md does not quote docs/bench/dataplane.json's readme field word for word; paste it into the Data plane section:\n%s", rec.Readme)
	}
}
