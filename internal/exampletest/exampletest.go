// Package exampletest runs a package's examples from an ordinary test, so
// that a test can prove what `go test -count=2` would: every example passes
// again in the same process, against the same server, after it has run once.
//
// The expected output comes from the examples' own "// Output:" comments,
// read with go/doc from the package's _test.go files, so the test cannot
// drift from the examples.
package exampletest

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// RunTwice runs every example in examples twice in a row and fails t unless
// each run prints what the example's Output comment says, compared as `go
// test` compares it (surrounding space trimmed, lines sorted for "Unordered
// output"). examples maps each example function's name (ExampleClient_Do)
// to the function. It also fails when an example of the package's _test.go
// files (in the current directory) with an Output comment is missing from
// examples, so that a new example cannot be forgotten, and when a name in
// examples has no Output comment.
func RunTwice(t testing.TB, examples map[string]func()) {
	t.Helper()
	want, err := Outputs(".")
	if err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if _, ok := examples[name]; !ok {
			t.Errorf("%s has an Output comment but is not passed to RunTwice", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(examples)) {
		out, ok := want[name]
		if !ok {
			t.Errorf("%s: no example with an Output comment by that name", name)
			continue
		}
		for run := 1; run <= 2; run++ {
			got := CaptureStdout(t, examples[name])
			if normalize(got, out.Unordered) != normalize(out.Text, out.Unordered) {
				t.Errorf("%s, run %d, printed:\n%s\nwant:\n%s", name, run, got, out.Text)
			}
		}
	}
}

// Output is what an example's Output comment expects.
type Output struct {
	Text      string
	Unordered bool
}

// Outputs returns, by function name, the expected output of every example
// with an Output comment in the _test.go files of dir.
func Outputs(dir string) (map[string]Output, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	outs := make(map[string]Output)
	for _, ex := range doc.Examples(files...) {
		if ex.Output == "" && !ex.EmptyOutput {
			continue // compiled, never run
		}
		outs["Example"+ex.Name] = Output{Text: ex.Output, Unordered: ex.Unordered}
	}
	return outs, nil
}

// normalize trims s as the testing package does before comparing, and sorts
// its lines when the order does not matter.
func normalize(s string, unordered bool) string {
	s = strings.TrimSpace(s)
	if !unordered {
		return s
	}
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// CaptureStdout runs fn with os.Stdout redirected and returns what it wrote.
// It restores os.Stdout even when fn panics or calls runtime.Goexit.
func CaptureStdout(t testing.TB, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		out <- string(b)
	}()
	finish := func() string {
		os.Stdout = saved
		_ = w.Close()
		return <-out
	}
	finished := false
	defer func() {
		if !finished { // fn panicked or called runtime.Goexit
			finish()
		}
	}()
	fn()
	finished = true
	return finish()
}
