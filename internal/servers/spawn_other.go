//go:build !linux

package servers

import (
	"os/exec"
	"syscall"
)

func start(cmd *exec.Cmd, cred *syscall.Credential) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	return cmd.Start()
}
