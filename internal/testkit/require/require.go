// Package require holds the few assertions fencekit's tests use, built on
// the standard library alone. Each one fails the test at once (t.Fatalf)
// when its condition does not hold, with the values involved and the
// optional message: a format string and its arguments, or values printed
// as by fmt.Sprint.
//
// It replaces github.com/stretchr/testify/require with the same call shapes,
// so that the root module, and with it every consumer of fencekit, does not
// depend on testify (see internal/testkit's package comment).
package require

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// failf fails t with what went wrong and the caller's message, if any.
func failf(t testing.TB, msgAndArgs []any, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if m := message(msgAndArgs); m != "" {
		msg += "\n\tmessage: " + m
	}
	t.Fatalf("%s", msg)
}

// message renders testify-style msgAndArgs: a format string and its
// arguments, or a single value.
func message(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return ""
	}
	if format, ok := msgAndArgs[0].(string); ok && len(msgAndArgs) > 1 {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

// equal reports whether expected and actual are deeply equal, comparing
// []byte by content (nil equals empty, as in testify).
func equal(expected, actual any) bool {
	eb, ok1 := expected.([]byte)
	ab, ok2 := actual.([]byte)
	if ok1 && ok2 {
		return bytes.Equal(eb, ab)
	}
	return reflect.DeepEqual(expected, actual)
}

// isNil reports whether v is nil or a nil pointer, slice, map, channel,
// function or interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// NoError fails t when err is not nil.
func NoError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		failf(t, msgAndArgs, "unexpected error: %v", err)
	}
}

// Error fails t when err is nil.
func Error(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err == nil {
		failf(t, msgAndArgs, "an error was expected, got nil")
	}
}

// ErrorIs fails t unless errors.Is(err, target).
func ErrorIs(t testing.TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		failf(t, msgAndArgs, "error %v does not match %v", err, target)
	}
}

// NotErrorIs fails t when errors.Is(err, target).
func NotErrorIs(t testing.TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if errors.Is(err, target) {
		failf(t, msgAndArgs, "error %v matches %v, and should not", err, target)
	}
}

// ErrorAs fails t unless errors.As(err, target).
func ErrorAs(t testing.TB, err error, target any, msgAndArgs ...any) {
	t.Helper()
	if !errors.As(err, target) {
		failf(t, msgAndArgs, "error %v (%T) has nothing assignable to %T in its chain", err, err, target)
	}
}

// ErrorContains fails t unless err is not nil and its message contains sub.
func ErrorContains(t testing.TB, err error, sub string, msgAndArgs ...any) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), sub) {
		failf(t, msgAndArgs, "error %v does not contain %q", err, sub)
	}
}

// Equal fails t unless expected and actual are deeply equal.
func Equal(t testing.TB, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if !equal(expected, actual) {
		failf(t, msgAndArgs, "not equal:\n\texpected: %#v\n\tactual:   %#v", expected, actual)
	}
}

// NotEqual fails t when expected and actual are deeply equal.
func NotEqual(t testing.TB, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if equal(expected, actual) {
		failf(t, msgAndArgs, "both are %#v, and should differ", actual)
	}
}

// EqualValues fails t unless expected, converted to actual's type when it
// can be, equals actual: EqualValues(t, 1, int64(1)) holds.
func EqualValues(t testing.TB, expected, actual any, msgAndArgs ...any) {
	t.Helper()
	if equal(expected, actual) {
		return
	}
	if expected != nil && actual != nil {
		ev, at := reflect.ValueOf(expected), reflect.TypeOf(actual)
		if ev.Type().ConvertibleTo(at) && equal(ev.Convert(at).Interface(), actual) {
			return
		}
	}
	failf(t, msgAndArgs, "not equal values:\n\texpected: %#v\n\tactual:   %#v", expected, actual)
}

// True fails t unless v is true.
func True(t testing.TB, v bool, msgAndArgs ...any) {
	t.Helper()
	if !v {
		failf(t, msgAndArgs, "should be true")
	}
}

// False fails t unless v is false.
func False(t testing.TB, v bool, msgAndArgs ...any) {
	t.Helper()
	if v {
		failf(t, msgAndArgs, "should be false")
	}
}

// Nil fails t unless v is nil (or a nil pointer, slice, map, ...).
func Nil(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if !isNil(v) {
		failf(t, msgAndArgs, "expected nil, got %#v", v)
	}
}

// NotNil fails t when v is nil (or a nil pointer, slice, map, ...).
func NotNil(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if isNil(v) {
		failf(t, msgAndArgs, "expected a value, got nil")
	}
}

// Zero fails t unless v is its type's zero value.
func Zero(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if v != nil && !reflect.ValueOf(v).IsZero() {
		failf(t, msgAndArgs, "expected the zero value, got %#v", v)
	}
}

// NotZero fails t when v is its type's zero value.
func NotZero(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if v == nil || reflect.ValueOf(v).IsZero() {
		failf(t, msgAndArgs, "expected a non-zero value, got %#v", v)
	}
}

// Empty fails t unless v is nil, zero, or has length zero.
func Empty(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if v == nil {
		return
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		if rv.Len() == 0 {
			return
		}
	default:
		if rv.IsZero() {
			return
		}
	}
	failf(t, msgAndArgs, "expected empty, got %#v", v)
}

// Len fails t unless v (array, channel, map, slice or string) has length n.
func Len(t testing.TB, v any, n int, msgAndArgs ...any) {
	t.Helper()
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		if rv.Len() != n {
			failf(t, msgAndArgs, "expected length %d, got %d: %#v", n, rv.Len(), v)
		}
	default:
		failf(t, msgAndArgs, "%T has no length", v)
	}
}

// Contains fails t unless s contains elem: a substring of a string, an
// element of a slice or array, or a key of a map.
func Contains(t testing.TB, s, elem any, msgAndArgs ...any) {
	t.Helper()
	if !contains(s, elem) {
		failf(t, msgAndArgs, "%#v does not contain %#v", s, elem)
	}
}

// contains reports whether s contains elem, as Contains defines it.
func contains(s, elem any) bool {
	if str, ok := s.(string); ok {
		sub, ok := elem.(string)
		return ok && strings.Contains(str, sub)
	}
	rv := reflect.ValueOf(s)
	switch rv.Kind() {
	case reflect.Array, reflect.Slice:
		for i := 0; i < rv.Len(); i++ {
			if equal(rv.Index(i).Interface(), elem) {
				return true
			}
		}
	case reflect.Map:
		for _, k := range rv.MapKeys() {
			if equal(k.Interface(), elem) {
				return true
			}
		}
	}
	return false
}

// ElementsMatch fails t unless the slices or arrays a and b hold the same
// elements, each as often, in any order.
func ElementsMatch(t testing.TB, a, b any, msgAndArgs ...any) {
	t.Helper()
	av, bv := reflect.ValueOf(a), reflect.ValueOf(b)
	ok := av.Len() == bv.Len()
	used := make([]bool, bv.Len())
	for i := 0; ok && i < av.Len(); i++ {
		found := false
		for j := 0; j < bv.Len(); j++ {
			if !used[j] && equal(av.Index(i).Interface(), bv.Index(j).Interface()) {
				used[j], found = true, true
				break
			}
		}
		ok = found
	}
	if !ok {
		failf(t, msgAndArgs, "elements differ:\n\ta: %#v\n\tb: %#v", a, b)
	}
}

// Greater fails t unless a > b.
func Greater[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	if !(a > b) {
		failf(t, msgAndArgs, "%v is not greater than %v", a, b)
	}
}

// GreaterOrEqual fails t unless a >= b.
func GreaterOrEqual[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	if !(a >= b) {
		failf(t, msgAndArgs, "%v is not greater than or equal to %v", a, b)
	}
}

// Less fails t unless a < b.
func Less[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	if !(a < b) {
		failf(t, msgAndArgs, "%v is not less than %v", a, b)
	}
}

// LessOrEqual fails t unless a <= b.
func LessOrEqual[T cmp.Ordered](t testing.TB, a, b T, msgAndArgs ...any) {
	t.Helper()
	if !(a <= b) {
		failf(t, msgAndArgs, "%v is not less than or equal to %v", a, b)
	}
}

// Positive fails t unless v > 0.
func Positive[T cmp.Ordered](t testing.TB, v T, msgAndArgs ...any) {
	t.Helper()
	var zero T
	if !(v > zero) {
		failf(t, msgAndArgs, "%v is not positive", v)
	}
}
