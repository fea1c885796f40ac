//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death signal; the demo
// still stops its redis-server when it ends or is interrupted.
func dieWithParent(*exec.Cmd) {}
