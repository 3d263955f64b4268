package servers

import (
	"errors"
	"net"
	"os/exec"
	"time"
)

// ErrNoBinary means the server's binaries are not installed.
var ErrNoBinary = errors.New("servers: server binary not found")

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// process is a started child and a channel closed when it has exited.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func watch(cmd *exec.Cmd) *process {
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the process to exit.
func (p *process) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a server a test harness starts itself.
func FreePort() (int, error) { return freePort() }

// Start starts cmd as the servers of this package are started: on Linux it
// dies with this process (even one that panics or times out) and stays out
// of the terminal's process group. Test harnesses of other modules
// (adapters/dynamodb's dynalitetest) start their servers with it.
func Start(cmd *exec.Cmd) error { return start(cmd, nil) }
