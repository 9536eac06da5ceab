package cli

import (
	"context"
	"fmt"
)

// runConsole opens the TUI on a scheduler.
func runConsole(ctx context.Context, addr, token, job string) error {
	return fmt.Errorf("the console is not built yet: attach with `kelpie job describe --scheduler %s %s`", addr, job)
}
