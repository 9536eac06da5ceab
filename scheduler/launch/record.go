package launch

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kelpie/kelpie/scheduler/clock"
)

// Record is one process group the launcher started, as kept in its record
// file: enough to stop the group later, from another process (a restarted
// scheduler), without ever signalling a process that merely reuses the PID.
type Record struct {
	Node  string `json:"node"`
	Pid   int    `json:"pid"`   // the group leader; the group's ID
	Start uint64 `json:"start"` // its start time in clock ticks since boot (/proc/PID/stat field 22)
}

// procStart is a process's start time, or an error if it does not exist.
func procStart(pid int) (uint64, error) {
	_, st, err := procStat(pid)
	return st, err
}

// procStat is a process's state letter (R, S, Z…) and start time in clock
// ticks since boot, from /proc/PID/stat, or an error if it does not exist.
func procStat(pid int) (byte, uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name may hold spaces and parentheses: fields start
	// after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("launch: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("launch: /proc/%d/stat: %d fields", pid, len(f))
	}
	var st uint64
	if _, err := fmt.Sscan(f[19], &st); err != nil {
		return 0, 0, fmt.Errorf("launch: /proc/%d/stat start time: %w", pid, err)
	}
	return f[0][0], st, nil
}

var recordMu sync.Mutex // appends from launchers of this process

// appendRecord adds a started process group to the record file.
func appendRecord(path, node string, pid int) error {
	st, err := procStart(pid)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(Record{Node: node, Pid: pid, Start: st})
	recordMu.Lock()
	defer recordMu.Unlock()
	f, err := OpenPrivate(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// One write of one line: whole even if the scheduler dies mid-way.
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	return err
}

// ReadRecords reads a record file; a missing file holds no records and a
// torn last line is skipped.
func ReadRecords(path string) ([]Record, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r Record
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Pid > 1 {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// alive says whether the recorded group leader still runs (the same
// process, not a reuse of its PID).
func (r Record) alive() bool {
	st, err := procStart(r.Pid)
	return err == nil && st == r.Start
}

// Observed is a record of node's agent made from its PID as seen on this
// host (an agent that connected to a scheduler that did not launch it: a
// standby that took over from the replica that did, whose record file it
// cannot read). False when no such process runs here.
func Observed(node string, pid int) (Record, bool) {
	if pid <= 0 {
		return Record{}, false
	}
	st, err := procStart(pid)
	if err != nil {
		return Record{}, false
	}
	return Record{Node: node, Pid: pid, Start: st}, true
}

// Gone says whether the newest process group recorded for node among recs
// (ReadRecords) has ended: its leader (the node's agent) no longer runs —
// it exited, or its PID belongs to another process now. A restarted
// scheduler has no handle on the agents its predecessor launched; this is
// how it learns that one of them died. False when node has no record.
// What is left of a group whose leader exited but was not reaped (a
// zombie) is killed, so that nothing of it outlives the answer.
func Gone(recs []Record, node string) bool {
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.Node != node {
			continue
		}
		state, start, err := procStat(r.Pid)
		switch {
		case err != nil || start != r.Start:
			return true // exited and reaped, or its PID reused
		case state == 'Z':
			_ = syscall.Kill(-r.Pid, syscall.SIGKILL)
			return true
		default:
			return false
		}
	}
	return false
}

// groupAlive says whether any process of the group is left (the leader
// may have gone before its children).
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) == nil
}

// SignalRecorded sends SIGTERM to every live process group recorded in
// path, and waits for none of them: what a scheduler does at once when a
// job ends, before it answers, so that a scheduler killed right after
// (kill -9, an outage) has still told every group to stop
// (TestKillBeforeReconnect). StopRecorded then waits for them.
func SignalRecorded(path string) (int, error) {
	recs, err := ReadRecords(path)
	if err != nil {
		return 0, err
	}
	return len(terminateLive(recs)), nil
}

// terminateLive sends SIGTERM to the group of every record in recs whose
// leader still runs, and returns those records.
func terminateLive(recs []Record) []Record {
	var live []Record
	for _, r := range recs {
		if r.alive() {
			_ = syscall.Kill(-r.Pid, syscall.SIGTERM)
			live = append(live, r)
		}
	}
	return live
}

// StopRecorded stops every process group in the record file that still
// runs: SIGTERM to the group, SIGKILL after grace. Groups whose leader is
// gone or is another process now are left alone (their PID may be reused).
// It returns how many groups it signalled.
func StopRecorded(clk clock.Clock, path string, grace time.Duration) (int, error) {
	clk = clock.OrReal(clk)
	recs, err := ReadRecords(path)
	if err != nil {
		return 0, err
	}
	live := terminateLive(recs)
	deadline := clk.Now().Add(grace)
	for _, r := range live {
		for groupAlive(r.Pid) && clk.Now().Before(deadline) {
			<-clk.After(50 * time.Millisecond)
		}
		if groupAlive(r.Pid) {
			_ = syscall.Kill(-r.Pid, syscall.SIGKILL)
		}
	}
	return len(live), nil
}
