package natstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsGiveTheBuildCommand: docs/nats.md tells a reader how to get a
// nats-server of 2.11 or later (Debian 12's is 2.9.10) with the command the
// tests run, so the command must name the module and Version that
// buildBinary installs, with the same environment, and the README must
// point there.
func TestDocsGiveTheBuildCommand(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "nats.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := `GOBIN="$PWD" GOFLAGS=-mod=mod GOWORK=off go install ` + serverModule + "@" + Version
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/nats.md does not give the command the tests run to build nats-server:\n\t%s", want)
	}
	if !strings.Contains(string(doc), "nats-server: "+Version) {
		t.Errorf("docs/nats.md does not show the version the command builds (%s)", Version)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "go install "+serverModule+"@"+Version) {
		t.Errorf("README does not say how to get nats-server %s (go install %s@%s)", Version, serverModule, Version)
	}
}
