package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestStopRecorded: a launcher records the process groups it starts; a
// later StopRecorded (another launcher, as after a scheduler restart) stops
// every group still running, children included, and leaves alone a PID
// whose recorded start time is not the running process's (a reused PID).
func TestStopRecorded(t *testing.T) {
	rec := filepath.Join(t.TempDir(), "procs.jsonl")
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	l := &Local{Exe: sh, Detach: true, LogDir: t.TempDir(), RecordFile: rec}
	// A group leader with a child: both must go.
	p, err := l.Start("node-0", "-c", "sleep 300 & wait")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	// A process the record misdescribes (wrong start time) must survive.
	other := exec.Command("sleep", "300")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	f, _ := os.OpenFile(rec, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"node":"stranger","pid":` + itoa(other.Process.Pid) + `,"start":1}` + "\n" + `{"node":"torn","pi`)
	f.Close()

	recs, err := ReadRecords(rec)
	if err != nil || len(recs) != 2 || recs[0].Node != "node-0" || recs[0].Pid != p.Pid() {
		t.Fatalf("ReadRecords = %+v, %v; want node-0 (pid %d) and the stranger", recs, err, p.Pid())
	}
	n, err := StopRecorded(nil, rec, 2*time.Second)
	if err != nil || n != 1 {
		t.Fatalf("StopRecorded = %d, %v; want 1 group stopped", n, err)
	}
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("the recorded group leader still runs")
	}
	if groupAlive(p.Pid()) {
		t.Error("a child of the recorded group still runs")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the process with a mismatched record was signalled: %v", err)
	}
	// Nothing left to stop.
	if n, _ := StopRecorded(nil, rec, time.Second); n != 0 {
		t.Errorf("second StopRecorded stopped %d groups; want 0", n)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
