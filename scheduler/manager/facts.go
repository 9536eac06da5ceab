package manager

import (
	"time"

	"github.com/kelpie/kelpie/scheduler/launch"
)

// jobFacts is what the job's other goroutines read most of its state —
// its ticker, its watchers, EPS, the console's views, Wait, describe —
// frozen: the actor publishes a new value after each batch of its turn and
// after each call (publishFacts), in O(1), and never changes one once
// published. A reader takes it without waiting for the actor (facts).
type jobFacts struct {
	state, err  string
	over        bool // completed, failed, killed or diverged
	relaunching bool // the checkpoint-and-restart baseline is stopping the agents
	ended       time.Time
	res         *Result       // set once, when the job ends; never changed after
	launcher    *launch.Local // nil for an adopted job
	nodes       int           // nodes in the job, removed ones included
}

// publishFacts publishes the job's facts as they are now. It runs on the
// actor (or before the job is published, or in the ended actor's stead).
func (j *jobState) publishFacts() {
	j.pub.Store(&jobFacts{state: j.state, err: j.err, over: j.over(), relaunching: j.relaunching > 0, ended: j.ended,
		res: j.res, launcher: j.launcher, nodes: len(j.nodes)})
}

// facts is the job's facts as last published.
func (j *jobState) facts() *jobFacts {
	if f := j.pub.Load(); f != nil {
		return f
	}
	return &jobFacts{}
}
