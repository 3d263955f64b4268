package gocall

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// recoverFrom runs f and returns what it panicked with (nil: no panic).
func recoverFrom(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func withDeadline(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var errBoom = errors.New("boom")

func panicsWithBoom() { panic(errBoom) }

func TestBoundedCarriesAnErrorPanicToTheCaller(t *testing.T) {
	v := recoverFrom(func() { Bounded(withDeadline(t), panicsWithBoom) })
	pe, ok := v.(*PanicError)
	if !ok {
		t.Fatalf("recovered %T %v, want *PanicError", v, v)
	}
	if pe.Value != errBoom || !errors.Is(pe, errBoom) {
		t.Fatalf("PanicError %v does not carry %v", pe.Value, errBoom)
	}
	if !strings.Contains(string(pe.Stack), "panicsWithBoom") {
		t.Fatalf("stack does not show where the panic happened:\n%s", pe.Stack)
	}
	if !strings.Contains(pe.Error(), "boom") || !strings.Contains(pe.Error(), "panicsWithBoom") {
		t.Fatalf("Error() = %q, want the value and the stack", pe.Error())
	}
}

func TestBoundedCarriesANonErrorPanic(t *testing.T) {
	v := recoverFrom(func() { Bounded(withDeadline(t), func() { panic(42) }) })
	pe, ok := v.(*PanicError)
	if !ok || pe.Value != 42 || pe.Unwrap() != nil {
		t.Fatalf("recovered %#v, want a *PanicError with Value 42 and nothing to unwrap", v)
	}
}

func TestBoundedPassesANestedPanicErrorOn(t *testing.T) {
	ctx := withDeadline(t)
	v := recoverFrom(func() { Bounded(ctx, func() { Bounded(ctx, panicsWithBoom) }) })
	pe, ok := v.(*PanicError)
	if !ok || pe.Value != errBoom {
		t.Fatalf("recovered %#v, want the inner *PanicError, not a wrapper of it", v)
	}
}

func TestBoundedWithoutDeadlineRunsOnTheCallersGoroutine(t *testing.T) {
	if v := recoverFrom(func() { Bounded(context.Background(), panicsWithBoom) }); v != errBoom {
		t.Fatalf("recovered %#v, want %v unchanged", v, errBoom)
	}
	ran := false
	if !Bounded(context.Background(), func() { ran = true }) || !ran {
		t.Fatal("call did not run, or Bounded said it did not finish")
	}
}

func TestBoundedReturnsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	go func() { <-started; cancel() }()
	if Bounded(ctx, func() { close(started); <-release }) {
		t.Fatal("Bounded said finished, but the call was still blocked when ctx ended")
	}
}

func TestBoundedCarriesGoexit(t *testing.T) {
	var wg sync.WaitGroup
	wg.Add(1)
	after := false
	go func() {
		defer wg.Done()
		Bounded(withDeadline(t), runtime.Goexit)
		after = true
	}()
	wg.Wait()
	if after {
		t.Fatal("the caller went on after its call called runtime.Goexit")
	}
}

// TestBoundedAbandonedPanicEndsTheProgram: a panic in a call whose caller
// stopped waiting is never swallowed. The panic runs in a child process.
func TestBoundedAbandonedPanicEndsTheProgram(t *testing.T) {
	if os.Getenv("GOCALL_ABANDONED_CHILD") == "1" {
		ctx, cancel := context.WithCancel(context.Background())
		proceed := make(chan struct{})
		started := make(chan struct{})
		go func() { <-started; cancel() }()
		if Bounded(ctx, func() { close(started); <-proceed; panic("late panic") }) {
			os.Exit(3)
		}
		close(proceed)
		time.Sleep(time.Minute) // not a synchronisation: a bound; the helper's panic ends the process at once
		os.Exit(4)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBoundedAbandonedPanicEndsTheProgram$")
	cmd.Env = append(os.Environ(), "GOCALL_ABANDONED_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "late panic") {
		t.Fatalf("child: %v, want exit 2 with the panic's value\n%s", err, out)
	}
}
