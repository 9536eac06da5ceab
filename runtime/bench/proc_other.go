//go:build !linux

package bench

import "os/exec"

// setParentDeath is Linux-only; elsewhere a server notices its parent's
// death when its stdin reaches EOF.
func setParentDeath(*exec.Cmd) {}
