package cli

import (
	"strings"
	"testing"

	"github.com/kelpie/kelpie/proto/consolepb"
)

// TestTriggerHelpListsEveryKind: `job trigger --help` names every action
// kind of the console API's registry, ADD_SERVER, REMOVE_SERVER and
// REASSIGN included, each with what it takes.
func TestTriggerHelpListsEveryKind(t *testing.T) {
	c := jobCmd()
	trigger, _, err := c.Find([]string{"trigger"})
	if err != nil {
		t.Fatal(err)
	}
	help := trigger.Long
	for n, name := range consolepb.ActionKind_name {
		if n == 0 {
			continue
		}
		k := strings.TrimPrefix(name, "ACTION_KIND_")
		if !strings.Contains(help, "\n  "+k+" ") || kindArgs[k] == "" {
			t.Errorf("trigger --help lacks %s (with its arguments):\n%s", k, help)
		}
	}
}
