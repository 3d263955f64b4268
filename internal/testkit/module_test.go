package testkit_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// heavyModule matches the module paths a consumer of fencekit must not
// inherit: test infrastructure and heavy integrations.
var heavyModule = regexp.MustCompile(`(?i)testcontainers|docker|moby|opentelemetry|testify|etcd|aws`)

// TestRootModuleLean checks that the root go.mod requires no heavy module.
// Every requirement listed there, direct or indirect, appears in the
// `go list -m all` of every program that imports fencekit (module graph
// pruning keeps a dependency's go.mod requirements); .ci/consumer-check
// checks that graph itself. Anything a test needs that would match belongs
// in internal/containers, a module of its own.
func TestRootModuleLean(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var requires int
	inBlock := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "require ("):
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		requires++
		if heavyModule.MatchString(fields[0]) {
			t.Errorf("go.mod requires %s: a consumer of fencekit would inherit it; move what needs it to internal/containers", fields[0])
		}
	}
	if requires == 0 {
		t.Fatal("found no requirement in go.mod: the parser is out of step with its format")
	}
}

// goDirective matches a go directive that names a minimum release without a
// patch pin: go 1.N or go 1.N.0.
var goDirective = regexp.MustCompile(`^go 1\.\d+(\.0)?$`)

// TestGoDirectiveNoPatchPin checks that every module's go directive states
// the minimum Go release the code needs, never a patch release: a patch pin
// makes every consumer's build demand that patch (or download it). CI also
// runs the tests on the newest release (.ci/run).
func TestGoDirectiveNoPatchPin(t *testing.T) {
	for _, path := range []string{"../../go.mod", "../containers/go.mod", "../../bench/go.mod", "../../adapters/etcd/go.mod"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "go ") {
				found = true
				if !goDirective.MatchString(line) {
					t.Errorf("%s: %q pins a patch release; state the minimum, as go 1.N.0", path, line)
				}
			}
		}
		if !found {
			t.Errorf("%s has no go directive", path)
		}
	}
}
