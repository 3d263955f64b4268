package exampletest_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPatternsCiteExistingTests checks that every test, example and
// conformance check that docs/patterns.md names as the evidence for a
// promise exists, so that a renamed or removed test cannot leave a promise
// unbacked unnoticed.
func TestPatternsCiteExistingTests(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "patterns.md"))
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	src := sources.String()

	cited := regexp.MustCompile("`((?:Test|Example)[A-Za-z0-9_]*)`").FindAllStringSubmatch(string(doc), -1)
	if len(cited) < 10 {
		t.Fatalf("found only %d cited tests and examples; has the page's format changed?", len(cited))
	}
	for _, m := range cited {
		if !strings.Contains(src, "func "+m[1]+"(") {
			t.Errorf("docs/patterns.md cites %s, which no test file defines", m[1])
		}
	}
	// Conformance checks are cited after the suite's name: "drivertest
	// `KeepAliveDetectsLoss`, `DoCancelsOnLoss`" (locktest, its old name,
	// too) or "fault kit check `X`".
	checks := regexp.MustCompile("(?:fencetest|drivertest|locktest|fault kit(?: check)?)\\s+((?:`[A-Z][A-Za-z]+`[,\\s]*(?:and\\s+)?)+)").FindAllStringSubmatch(string(doc), -1)
	n := 0
	for _, m := range checks {
		for _, name := range regexp.MustCompile("`([A-Z][A-Za-z]+)`").FindAllStringSubmatch(m[1], -1) {
			n++
			if !strings.Contains(src, `"`+name[1]+`"`) && !strings.Contains(src, "func "+name[1]+"(") {
				t.Errorf("docs/patterns.md cites the check %s, which no suite defines", name[1])
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d cited checks; has the page's format changed?", n)
	}
}
