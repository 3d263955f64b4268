package containers

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain says, once, why every container test is about to skip: a
// passing `go test ./...` shows only "ok" for a package, which would not say
// that nothing was tested. The line goes to stdout (seen with -v, in CI's
// log, and when the package fails) and, when the tests run in a terminal,
// to the terminal as well, since go test keeps a passing package's output
// to itself.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(RequireEnv) != "1" {
		if err := dockerReady(); err != nil {
			msg := noEngineNotice(err)
			fmt.Println(msg)
			if !testing.Verbose() {
				toTerminal(msg)
			}
		}
	}
	os.Exit(m.Run())
}

// noEngineNotice is the line TestMain prints when no Docker engine answers.
func noEngineNotice(err error) string {
	return fmt.Sprintf("internal/containers: no Docker engine (%v): its container tests skip. "+
		"To run them, start Docker or point DOCKER_HOST at a Docker API (podman: see .ci/containers); "+
		"%s=1 makes a missing engine a failure.", err, RequireEnv)
}

// toTerminal writes line to the controlling terminal, if there is one; on
// a machine without one (CI) it does nothing.
func toTerminal(line string) {
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer tty.Close()
	fmt.Fprintln(tty, line)
}
