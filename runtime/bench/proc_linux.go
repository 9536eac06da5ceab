package bench

import (
	"os/exec"
	"syscall"
)

// setParentDeath has the kernel kill the server if the benchmark dies
// without stopping it (SIGKILL, a crash).
func setParentDeath(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
