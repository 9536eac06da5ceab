package tui

import (
	"context"
	"fmt"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"google.golang.org/protobuf/proto"

	"github.com/kelpie/kelpie/proto/consolepb"
	"github.com/kelpie/kelpie/proto/timelinepb"
	"github.com/kelpie/kelpie/scheduler/console/client"
)

// replay is the job view scrubbing through a job's recorded timeline (the
// console API's history command): a finished job as it ran, or a live one
// paused and moved back. The views show client.ViewAt of the frame under
// the cursor.
type replay struct {
	job     string
	hist    *client.History
	base    *consolepb.JobView // the job's view when the history came, with every action
	cursor  int                // index of the frame shown
	loading bool
	err     error
	// then is the move that started the replay (a step or a jump), made
	// once the history is there.
	then func(*replay)
}

// historyMsg brings a job's history.
type historyMsg struct {
	job  string
	hist *client.History
	err  error
}

// startReplay pauses job at the present (or its end) and asks for its
// history; then, if not nil, moves the cursor once it is there.
func (c *shared) startReplay(job string, then func(*replay)) tea.Cmd {
	c.replay = &replay{job: job, loading: true, then: then}
	c.dataVer++
	b := c.backend
	return func() tea.Msg {
		if b == nil {
			return historyMsg{job: job, err: client.ErrNotConnected}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		h, err := client.ReadHistory(ctx, b.Send, job)
		return historyMsg{job: job, hist: h, err: err}
	}
}

// historyArrived takes a history for the replay that asked for it.
func (c *shared) historyArrived(msg historyMsg) {
	r := c.replay
	if r == nil || r.job != msg.job || !r.loading {
		return // left meanwhile
	}
	r.loading, r.err, r.hist = false, msg.err, msg.hist
	if msg.err == nil {
		if len(msg.hist.Frames) == 0 {
			r.err = fmt.Errorf("no timeline recorded for %s", msg.job)
		} else {
			r.cursor = len(msg.hist.Frames) - 1
			if r.then != nil {
				r.then(r)
			}
			if v := c.data.jobs[msg.job]; v != nil {
				r.base = proto.CloneOf(v)
				r.base.Actions = msg.hist.Actions
			} else {
				r.base = &consolepb.JobView{Name: msg.job, Actions: msg.hist.Actions}
			}
		}
	}
	if r.err != nil {
		c.setFlash(flashErr, "replay: "+r.err.Error())
		c.replay = nil
	}
	c.dataVer++
}

// replaying is the replay of job, once its history is there.
func (c *shared) replaying(job string) *replay {
	if r := c.replay; r != nil && r.job == job && r.hist != nil {
		return r
	}
	return nil
}

// stopReplay goes back to the live view.
func (c *shared) stopReplay() {
	c.replay = nil
	c.dataVer++
}

// step moves the cursor by n frames, within the timeline.
func (r *replay) step(n int) {
	r.cursor = min(max(r.cursor+n, 0), len(r.hist.Frames)-1)
}

// at is the end of the frame under the cursor.
func (r *replay) at() time.Time { return r.hist.Frames[r.cursor].GetTime().AsTime() }

// jumpAction moves the cursor to the frame of the previous (dir < 0) or
// next action after the cursor's time: when it was applied, else created.
// False when there is none that way.
func (r *replay) jumpAction(dir int) bool {
	frames := r.hist.Frames
	best := -1
	for _, a := range r.hist.Actions {
		t := a.GetCreated().AsTime()
		for _, h := range a.GetHistory() {
			if h.GetState() == "applied" {
				t = h.GetAt().AsTime()
			}
		}
		i := timelinepb.FrameAt(frames, t)
		switch {
		case dir < 0 && i < r.cursor && (best < 0 || i > best):
			best = i
		case dir > 0 && i > r.cursor && (best < 0 || i < best):
			best = i
		}
	}
	if best < 0 {
		return false
	}
	r.cursor = best
	return true
}

// view is the job's view at the cursor, with heatmap columns.
func (r *replay) view(columns int) *consolepb.JobView {
	return client.ViewAt(r.base, r.hist.Frames, r.at(), columns)
}

// label says where the cursor is: how far into the job, which frame and
// how long it spans.
func (r *replay) label() string {
	first := r.hist.Frames[0].Start()
	f := r.hist.Frames[r.cursor]
	return fmt.Sprintf("⏸ replay %s in · frame %d/%d (%s) · ←/→ step, [ ] actions, p live",
		r.at().Sub(first).Round(time.Second), r.cursor+1, len(r.hist.Frames),
		time.Duration(f.GetSpanSeconds()*float64(time.Second)).Round(time.Millisecond))
}
