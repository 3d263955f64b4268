package fencectl

import (
	"fmt"
	"strings"
)

// unreachableError is a server that did not answer fencectl's first
// request (exit code 1). It prints as one line: the driver's message may
// span several (pgx lists every address it tried), and the operator reads
// one line.
type unreachableError struct {
	what, addr string // "Redis" or "PostgreSQL", and host:port (or a list)
	err        error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach %s at %s: %s", e.what, e.addr, oneLine(e.err.Error()))
}

func (e *unreachableError) Unwrap() error { return e.err }

// oneLine joins msg's lines with "; " (with " " after a line that ends in
// a colon), dropping blank ones and repeats (one attempt per address often
// fails the same way).
func oneLine(msg string) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, line := range strings.Split(msg, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || seen[line] {
			continue
		}
		seen[line] = true
		switch s := b.String(); {
		case s == "":
		case strings.HasSuffix(s, ":"):
			b.WriteString(" ")
		default:
			b.WriteString("; ")
		}
		b.WriteString(line)
	}
	return b.String()
}
