package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopRecorded: a launcher records the process groups it starts; a
// later StopRecorded (another launcher, as after a scheduler restart) stops
// every group still running, children included, and leaves alone a PID
// whose recorded start time is not the running process's (a reused PID).
func TestStopRecorded(t *testing.T) {
	rec, p, other := recordedGroups(t)
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

// recordedGroups records, in a record file, a process group that a stop
// must end (a shell and its child) and a process the record misdescribes
// (a wrong start time: a reused PID) that must survive, then a torn last
// line; all are stopped when the test ends.
func recordedGroups(t *testing.T) (rec string, p *Proc, other *exec.Cmd) {
	t.Helper()
	rec = filepath.Join(t.TempDir(), "procs.jsonl")
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	l := &Local{Exe: sh, Detach: true, LogDir: t.TempDir(), RecordFile: rec}
	if p, err = l.Start("node-0", "-c", "sleep 300 & wait"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(time.Second) })
	other = exec.Command("sleep", "300")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	f, err := os.OpenFile(rec, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"node":"stranger","pid":` + itoa(other.Process.Pid) + `,"start":1}` + "\n" + `{"node":"torn","pi`)
	f.Close()
	return rec, p, other
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestGone: a restarted scheduler learns from the record file whether a
// node's newest agent has ended — running: no; exited but not reaped (a
// zombie, as when the scheduler that launched it died): yes, and what is
// left of its group is killed; a record whose PID another process holds
// now: yes; no record: no.
func TestGone(t *testing.T) {
	rec := filepath.Join(t.TempDir(), "procs.jsonl")
	gone := func(node string) bool {
		t.Helper()
		recs, err := ReadRecords(rec)
		if err != nil {
			t.Fatal(err)
		}
		return Gone(recs, node)
	}
	if gone("node-0") {
		t.Error("Gone with no record = true; want false")
	}
	// An agent (group leader) with a role (its child); not waited for, so
	// that once killed it stays a zombie.
	agent := exec.Command("sh", "-c", "sleep 300 & wait")
	agent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := agent.Start(); err != nil {
		t.Skip(err)
	}
	pid := agent.Process.Pid
	defer func() { _ = syscall.Kill(-pid, syscall.SIGKILL); _ = agent.Wait() }()
	if err := appendRecord(rec, "node-0", pid); err != nil {
		t.Fatal(err)
	}
	if gone("node-0") {
		t.Error("Gone of a running agent = true; want false")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !gone("node-0") {
		if time.Now().After(deadline) {
			t.Fatal("Gone of a killed agent still false after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, _, _ := procStat(pid); st != 'Z' {
		t.Errorf("the killed agent's state %q; want a zombie (Z) for this test", st)
	}
	// Its child, left in the group, was killed with what was left.
	alive := func() bool {
		out, _ := exec.Command("pgrep", "-g", strconv.Itoa(pid)).Output()
		for _, f := range strings.Fields(string(out)) {
			if f != strconv.Itoa(pid) {
				if st, _, err := procStat(atoi(f)); err == nil && st != 'Z' {
					return true
				}
			}
		}
		return false
	}
	for deadline := time.Now().Add(5 * time.Second); alive() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if alive() {
		t.Error("the killed agent's child still runs")
	}
	// A newer record of the node, running: not gone.
	next := exec.Command("sleep", "300")
	next.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := next.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = next.Process.Kill(); _ = next.Wait() }()
	if err := appendRecord(rec, "node-0", next.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if gone("node-0") {
		t.Error("Gone with a newer running agent = true; want false")
	}
	// A record whose PID is another process's now (start time differs).
	f, _ := os.OpenFile(rec, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"node":"node-1","pid":` + itoa(next.Process.Pid) + `,"start":1}` + "\n")
	f.Close()
	if !gone("node-1") {
		t.Error("Gone of a record whose PID was reused = false; want true")
	}
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestObserved: an agent seen connecting is recorded from its PID on this
// host (a replica that did not launch it has no record of its own), and
// Gone reads that record as it reads the launcher's: alive while the
// process runs, gone once it has exited.
func TestObserved(t *testing.T) {
	if _, ok := Observed("worker-0", 0); ok {
		t.Error("PID 0 observed")
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r, ok := Observed("worker-0", cmd.Process.Pid)
	if !ok || r.Pid != cmd.Process.Pid || r.Start == 0 {
		t.Fatalf("Observed(running sleep) = %+v, %v", r, ok)
	}
	if Gone([]Record{r}, "worker-0") {
		t.Error("a running agent is gone")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if !Gone([]Record{r}, "worker-0") {
		t.Error("an agent that exited is not gone")
	}
	if _, ok := Observed("worker-0", cmd.Process.Pid); ok {
		t.Error("an exited process observed")
	}
}

// TestSignalRecorded: SignalRecorded tells every live recorded group to
// stop and returns without waiting; the group (a shell and its child,
// which take SIGTERM's default) is then gone with nobody left to wait for
// it — as when the scheduler is killed right after a job ends — and a
// process the record misdescribes is left alone.
func TestSignalRecorded(t *testing.T) {
	rec, p, other := recordedGroups(t)
	if n, err := SignalRecorded(rec); err != nil || n != 1 {
		t.Fatalf("SignalRecorded = %d, %v; want 1 group signalled", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for groupAlive(p.Pid()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if groupAlive(p.Pid()) {
		t.Error("the recorded group still runs 5 s after its SIGTERM")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the misdescribed process was signalled: %v", err)
	}
}
