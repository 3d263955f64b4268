//go:build !linux

package testkit

import "syscall"

// redisSysProcAttr: outside Linux there is no Pdeathsig; servers are stopped
// by t.Cleanup only.
func redisSysProcAttr() *syscall.SysProcAttr { return nil }
