//go:build !linux

package dynalitetest

import "syscall"

// sysProcAttr: without Pdeathsig, a server outlives a test binary that
// dies; Main stops it on a normal exit.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// lockFile does not lock: test binaries that install dynalite for the
// first time at once run npm ci in one directory together; install once
// (go test -run TestConformance .) before running packages in parallel.
func lockFile(string) (func(), error) { return func() {}, nil }
