package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// kindArgs says what each action kind takes on the command line. The list
// of kinds itself comes from the console API's registry (ActionKind in
// proto/console.proto), so a new kind shows in the help even before it
// has a line here.
var kindArgs = map[string]string{
	"ADJUST_BS":      "--sizes worker-0=96,worker-1=32,... [--accumulation worker-0=2,...]: every worker's batch size",
	"KILL_RESTART":   "NODE: kill a node and relaunch it (a worker or a server)",
	"BACKUP_WORKERS": "--params drop=1: drop the slowest gradients of each iteration (0: off)",
	"ADJUST_LR":      "NODE --params lr_scale=0.5: scale a worker's learning rate",
	"REASSIGN":       "move parameter blocks between servers (PSLD's assignment, computed by the scheduler)",
	"ADD_SERVER":     "add a parameter server; blocks move to it (PSLD/EPS)",
	"REMOVE_SERVER":  "NODE: remove a parameter server; its blocks move to the others (PSLD/EPS)",
	"ADD_WORKER":     "add a worker; the global batch is split again (EPS)",
	"REMOVE_WORKER":  "NODE: remove a worker; its shards go back to the queue (EPS)",
	"SET_SYNC":       "--sync-model ssp --params staleness=3: switch the synchronisation model (FluentPS)",
}

// actionKinds lists the kinds the console API knows, in the registry's
// order.
func actionKinds() []string {
	nums := make([]int, 0, len(consolepb.ActionKind_name))
	for n := range consolepb.ActionKind_name {
		if n != int32(consolepb.ActionKind_ACTION_KIND_UNSPECIFIED) {
			nums = append(nums, int(n))
		}
	}
	sort.Ints(nums)
	out := make([]string, len(nums))
	for i, n := range nums {
		out[i] = strings.TrimPrefix(consolepb.ActionKind_name[int32(n)], "ACTION_KIND_")
	}
	return out
}

// kindsHelp is one line per kind with its arguments.
func kindsHelp() string {
	var b strings.Builder
	for _, k := range actionKinds() {
		args := kindArgs[k]
		if args == "" {
			args = "(see docs/console-api.md)"
		}
		fmt.Fprintf(&b, "  %-15s %s\n", k, args)
	}
	return b.String()
}
