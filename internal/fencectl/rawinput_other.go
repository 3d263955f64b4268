//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package fencectl

import "io"

// rawInput does nothing where fencectl knows no terminal calls: q then
// Enter ends watch, as does Ctrl-C.
func rawInput(io.Reader) (restore func()) { return func() {} }
