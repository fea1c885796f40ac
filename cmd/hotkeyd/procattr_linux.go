package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when hotkeyd dies, however it dies, so that the
// demo never leaves a redis-server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
