package testkit

import "syscall"

// redisSysProcAttr makes a redis-server die with the test binary (see
// redisSpawner) and keeps it out of the test's process group, so a terminal's
// Ctrl-C reaches the test binary only.
func redisSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
