package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the server if the test binary dies without running
// its cleanups (a crash, or a timeout panic), so no server outlives its test.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
