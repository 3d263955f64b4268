package require

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure instead of
// ending the goroutine, so that a test can see whether an assertion failed.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}

type codeError struct{ code string }

func (e *codeError) Error() string { return "code " + e.code }

// TestAssertions checks every assertion on a case that holds and on one that
// does not: the first must leave the test passing, the second must fail it.
func TestAssertions(t *testing.T) {
	errBase := errors.New("base")
	wrapped := fmt.Errorf("wrapped: %w", errBase)
	coded := fmt.Errorf("wrapped: %w", &codeError{"40001"})
	var target *codeError
	var nilPtr *int
	cases := []struct {
		name       string
		pass, fail func(t testing.TB)
	}{
		{"NoError", func(t testing.TB) { NoError(t, nil) }, func(t testing.TB) { NoError(t, errBase) }},
		{"Error", func(t testing.TB) { Error(t, errBase) }, func(t testing.TB) { Error(t, nil) }},
		{"ErrorIs", func(t testing.TB) { ErrorIs(t, wrapped, errBase) }, func(t testing.TB) { ErrorIs(t, errors.New("other"), errBase) }},
		{"NotErrorIs", func(t testing.TB) { NotErrorIs(t, errors.New("other"), errBase) }, func(t testing.TB) { NotErrorIs(t, wrapped, errBase) }},
		{"ErrorAs", func(t testing.TB) { ErrorAs(t, coded, &target) }, func(t testing.TB) { ErrorAs(t, wrapped, &target) }},
		{"ErrorContains", func(t testing.TB) { ErrorContains(t, wrapped, "base") }, func(t testing.TB) { ErrorContains(t, nil, "base") }},
		{"Equal", func(t testing.TB) { Equal(t, []int{1, 2}, []int{1, 2}) }, func(t testing.TB) { Equal(t, int64(1), 1) }},
		{"EqualBytes", func(t testing.TB) { Equal(t, []byte{}, []byte(nil)) }, func(t testing.TB) { Equal(t, []byte("a"), []byte("b")) }},
		{"NotEqual", func(t testing.TB) { NotEqual(t, "a", "b") }, func(t testing.TB) { NotEqual(t, "a", "a") }},
		{"EqualValues", func(t testing.TB) { EqualValues(t, 1, int64(1)) }, func(t testing.TB) { EqualValues(t, 2, int64(1)) }},
		{"True", func(t testing.TB) { True(t, true) }, func(t testing.TB) { True(t, false) }},
		{"False", func(t testing.TB) { False(t, false) }, func(t testing.TB) { False(t, true) }},
		{"Nil", func(t testing.TB) { Nil(t, nilPtr) }, func(t testing.TB) { Nil(t, 0) }},
		{"NotNil", func(t testing.TB) { NotNil(t, []byte{}) }, func(t testing.TB) { NotNil(t, []byte(nil)) }},
		{"Zero", func(t testing.TB) { Zero(t, int64(0)) }, func(t testing.TB) { Zero(t, 3) }},
		{"NotZero", func(t testing.TB) { NotZero(t, 3) }, func(t testing.TB) { NotZero(t, "") }},
		{"Empty", func(t testing.TB) { Empty(t, []byte{}) }, func(t testing.TB) { Empty(t, "x") }},
		{"Len", func(t testing.TB) { Len(t, map[string]int{"a": 1}, 1) }, func(t testing.TB) { Len(t, []int{1}, 2) }},
		{"ContainsString", func(t testing.TB) { Contains(t, "abc", "bc") }, func(t testing.TB) { Contains(t, "abc", "x") }},
		{"ContainsSlice", func(t testing.TB) { Contains(t, []string{"40001", "40P01"}, "40P01") }, func(t testing.TB) { Contains(t, []string{"40001"}, "40P01") }},
		{"ElementsMatch", func(t testing.TB) { ElementsMatch(t, []string{"a", "b", "a"}, []string{"a", "a", "b"}) }, func(t testing.TB) { ElementsMatch(t, []string{"a", "b"}, []string{"a", "a"}) }},
		{"Greater", func(t testing.TB) { Greater(t, 2*time.Second, time.Second) }, func(t testing.TB) { Greater(t, 1, 1) }},
		{"GreaterOrEqual", func(t testing.TB) { GreaterOrEqual(t, 1, 1) }, func(t testing.TB) { GreaterOrEqual(t, 0, 1) }},
		{"Positive", func(t testing.TB) { Positive(t, 1) }, func(t testing.TB) { Positive(t, 0) }},
		{"Less", func(t testing.TB) { Less(t, 0, 1) }, func(t testing.TB) { Less(t, 1, 1) }},
		{"LessOrEqual", func(t testing.TB) { LessOrEqual(t, 1, 1) }, func(t testing.TB) { LessOrEqual(t, 2, 1) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pass := &recorder{TB: t}
			c.pass(pass)
			if pass.failed {
				t.Errorf("a holding case failed: %s", pass.msg)
			}
			fail := &recorder{TB: t}
			c.fail(fail)
			if !fail.failed {
				t.Errorf("a failing case passed")
			}
		})
	}
}

// TestMessage checks that the caller's message, as a format and arguments,
// is part of the failure.
func TestMessage(t *testing.T) {
	r := &recorder{TB: t}
	Equal(r, 1, 2, "round %d of %s", 7, "x")
	if !strings.Contains(r.msg, "round 7 of x") || !strings.Contains(r.msg, "expected: 1") {
		t.Errorf("failure message %q lacks the caller's message or the values", r.msg)
	}
}
