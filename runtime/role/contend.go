package role

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/kelpie/kelpie/core/straggler"
	"github.com/kelpie/kelpie/runtime/contend"
)

// contention carries out the node's kind cpu stragglers for real: this
// process (and also, a torch worker's Python child) pinned to one CPU, competitors on it while an injection is
// active (runtime/contend). It returns what stops them; a node without
// kind cpu gets a no-op.
func contention(o Options, sched straggler.Schedule, start time.Time, log *slog.Logger, also ...int) (stop func(), err error) {
	if !sched.Contends() {
		return func() {}, nil
	}
	c, err := contend.Start(contend.Config{Pid: os.Getpid(), Also: also, Schedule: sched, Start: start, CPU: -1,
		Logf: func(format string, a ...any) { log.Info(fmt.Sprintf(format, a...)) }})
	if err != nil {
		return nil, fmt.Errorf("%s: cpu straggler: %v", o.Node, err)
	}
	return c.Stop, nil
}
