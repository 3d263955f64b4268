//go:build !linux

package natstest

import "syscall"

// sysProcAttr: without Pdeathsig, a server outlives a test binary that
// dies; Main stops it on a normal exit.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// lockFile does not lock: concurrent first builds each build, and the last
// rename wins.
func lockFile(string) (func(), error) { return func() {}, nil }
