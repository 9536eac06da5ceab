package launch

import (
	"io"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestKillGroup: a process killed with KillGroup leaves nothing behind —
// neither the children in its process group nor one that left the group
// (setsid), as a moved node's agent must not (scheduler/manager, hosts.go).
func TestKillGroup(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip(err)
	}
	l := &Local{Exe: sh, Log: io.Discard}
	p, err := l.Start("node", "-c", "setsid sleep 60 & sleep 60 & wait")
	if err != nil {
		t.Fatal(err)
	}
	defer l.StopAll(time.Second)
	var kids []int
	for deadline := time.Now().Add(10 * time.Second); len(kids) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		kids = Descendants(p.Pid())
	}
	if len(kids) < 2 {
		t.Fatalf("Descendants(%d) = %v; want the two sleeps", p.Pid(), kids)
	}
	if err := p.KillGroup(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		gone := false
		for deadline := time.Now().Add(10 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			state, _, err := procStat(k)
			gone = err != nil || state == 'Z' || syscall.Kill(k, 0) != nil
		}
		if !gone {
			t.Errorf("process %d, started by the killed one, still runs", k)
		}
	}
}
