package suite

import (
	"slices"
	"strings"
	"testing"
)

// A command's signature turns back into its arguments, and scripts are told
// apart by digest, so that two scripts' durations never share a mean.
func TestCommandClassFromSignature(t *testing.T) {
	long := strings.Repeat("x", 300)
	args := []string{"EVALSHA", "abc123", "1", "k:{a}", "0000000000000000001", long}
	back := sigArgs(Signature(args))
	want := []string{"evalsha", "abc123", "1", "k:{a}", "0000000000000000001", long[:128]}
	if !slices.Equal(back, want) {
		t.Errorf("sigArgs(Signature(%q)) = %q, want %q", args, back, want)
	}
	for in, want := range map[string]string{
		Signature([]string{"EVALSHA", "abc123", "1", "k"}): "evalsha abc123",
		Signature([]string{"evalsha", "def456", "1", "k"}): "evalsha def456",
		Signature([]string{"SET", "k", "v", "PX", "10"}):   "set",
		Signature([]string{"del", "k"}):                    "del",
	} {
		if got := commandClass(sigArgs(in)); got != want {
			t.Errorf("commandClass(%q) = %q, want %q", in, got, want)
		}
	}
	if commandClass(nil) != "" {
		t.Error("empty command has a class")
	}
}

// Every job has exactly one floor, and the targets name rows that exist.
func TestCostCasesHaveOneFloorPerJob(t *testing.T) {
	floors := map[string]int{}
	names := map[string]bool{}
	for _, c := range CostCases() {
		if c.Floor {
			floors[c.Job]++
		}
		if names[c.Job+"/"+c.Name] {
			t.Errorf("two rows %s/%s", c.Job, c.Name)
		}
		names[c.Job+"/"+c.Name] = true
		if c.New == nil {
			t.Errorf("%s/%s has no operation", c.Job, c.Name)
		}
	}
	for _, job := range []string{"fenced write", "lock cycle"} {
		if floors[job] != 1 {
			t.Errorf("job %q has %d floors", job, floors[job])
		}
	}
}
