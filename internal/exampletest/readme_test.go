package exampletest_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// directRequirements returns the module paths that the go.mod in dir
// requires directly (not "// indirect"), fencekit's own module left out.
func directRequirements(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var reqs []string
	block := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "require (":
			block = true
			continue
		case block && line == ")":
			block = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !block:
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || strings.Contains(line, "// indirect") || fields[0] == "github.com/fencekit/fencekit" {
			continue
		}
		reqs = append(reqs, fields[0])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return reqs
}

// TestReadmeListsEveryRequirement checks the README's list of what each
// importable module requires against the go.mod files, both ways: every
// direct requirement is named on its module's line, and every module path
// named there is one; and the root module's count in words ("requires six
// modules") is its number of direct requirements.
func TestReadmeListsEveryRequirement(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The list: "- `dir`...: `module`, `module`; ..." items, each possibly
	// wrapped over several lines.
	items := map[string]string{}
	re := regexp.MustCompile("(?m)^- `([a-z0-9./]+)`[^:]*:((?:.*\\n)(?:  .*\\n)*)")
	for _, m := range re.FindAllStringSubmatch(string(readme), -1) {
		items[m[1]] = m[2]
	}
	modules := []string{".", "fenceotel", "adapters/s3", "adapters/etcd", "adapters/nats", "adapters/dynamodb", "cmd/fencectl"}
	for _, dir := range modules {
		item, ok := items[dir]
		if !ok {
			t.Errorf("README lists no requirements for the module in %q", dir)
			continue
		}
		reqs := directRequirements(t, filepath.Join(root, dir))
		for _, r := range reqs {
			if !strings.Contains(item, "`"+r+"`") {
				t.Errorf("README: the line of %q does not name %s, which its go.mod requires", dir, r)
			}
		}
		for _, m := range regexp.MustCompile("`([a-z0-9.-]+\\.[a-z]+/[^`]+)`").FindAllStringSubmatch(item, -1) {
			if !slices.Contains(reqs, m[1]) {
				t.Errorf("README: the line of %q names %s, which its go.mod does not require directly", dir, m[1])
			}
		}
	}

	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	m := regexp.MustCompile(`go\.mod\s+requires\s+(\w+)\s+modules`).FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatal(`README no longer says how many modules the root go.mod requires ("requires six modules")`)
	}
	if n := len(directRequirements(t, root)); n >= len(words) || m[1] != words[n] {
		t.Errorf("README says the root go.mod requires %s modules; it requires %d", m[1], n)
	}
}
