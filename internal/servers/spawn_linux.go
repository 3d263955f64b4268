package servers

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// spawner starts every server from one goroutine locked to its OS thread
// for the life of the process: Pdeathsig fires when the thread that started
// the child ends, and that thread only ends with the process.
var spawner struct {
	once sync.Once
	reqs chan func()
}

// start starts cmd so that it dies with this process and stays out of its
// process group (a terminal's Ctrl-C reaches this process only).
func start(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked, see spawner
			for f := range spawner.reqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}
