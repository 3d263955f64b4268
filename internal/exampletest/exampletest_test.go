package exampletest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/internal/exampletest"
)

func ExampleCaptureStdout() {
	fmt.Println("twice")
	// Output: twice
}

func Example_unordered() {
	fmt.Println("b")
	fmt.Println("a")
	// Unordered output:
	// a
	// b
}

// recorder is a testing.TB that keeps its errors instead of failing.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestRunTwicePasses(t *testing.T) {
	exampletest.RunTwice(t, map[string]func(){
		"ExampleCaptureStdout": ExampleCaptureStdout,
		"Example_unordered":    Example_unordered,
	})
}

// An example that prints something else on its second run (state left over
// from the first, as a CREATE TABLE without IF NOT EXISTS does) is caught.
func TestRunTwiceCatchesSecondRun(t *testing.T) {
	runs := 0
	rec := &recorder{TB: t}
	exampletest.RunTwice(rec, map[string]func(){
		"ExampleCaptureStdout": func() {
			runs++
			if runs == 1 {
				fmt.Println("twice")
			} else {
				fmt.Println("table already exists")
			}
		},
		"Example_unordered": Example_unordered,
	})
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "run 2") {
		t.Fatalf("errors %q, want one about run 2", rec.errs)
	}
}

// An example left out of the map, or a name without an example, is an error.
func TestRunTwiceCatchesMissingExample(t *testing.T) {
	rec := &recorder{TB: t}
	exampletest.RunTwice(rec, map[string]func(){
		"Example_unordered": Example_unordered,
		"ExampleNoSuch":     func() {},
	})
	all := strings.Join(rec.errs, "\n")
	if len(rec.errs) != 2 || !strings.Contains(all, "ExampleCaptureStdout") || !strings.Contains(all, "ExampleNoSuch") {
		t.Fatalf("errors %q, want one for ExampleCaptureStdout and one for ExampleNoSuch", rec.errs)
	}
}
