//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fencectl

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// rawInput, when in is a terminal, turns off its line buffering and echo so
// that a single q reaches watch without Enter, and returns what puts the
// terminal back. Signals stay on: Ctrl-C still interrupts.
func rawInput(in io.Reader) (restore func()) {
	f, ok := in.(*os.File)
	if !ok {
		return func() {}
	}
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return func() {} // not a terminal
	}
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &raw); err != nil {
		return func() {}
	}
	return func() { _ = unix.IoctlSetTermios(fd, ioctlSetTermios, old) }
}
