// Package gocall runs a call on a goroutine of its own, waits for it at most
// until a context ends, and carries a panic (or a runtime.Goexit) of the
// call back to the goroutine that waits, so that the caller's recover sees
// it as if the call had run on its own goroutine.
//
// lock and adapters/redis use it to return on time from backend calls whose
// client keeps waiting past the context's deadline.
package gocall

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// PanicError is the value Bounded re-panics with in the caller's goroutine
// when call panicked on its helper goroutine: the original value, and that
// goroutine's stack at the panic (the caller's own trace no longer shows
// where the panic happened). When Value is an error, PanicError unwraps to
// it, so errors.Is and errors.As on the recovered value see it.
type PanicError struct {
	Value any    // what call panicked with
	Stack []byte // the helper goroutine's stack, from debug.Stack at the panic
}

// Error says what call panicked with and where.
func (e *PanicError) Error() string {
	return fmt.Sprintf("panic on a helper goroutine: %v\n\nhelper goroutine's stack:\n%s", e.Value, e.Stack)
}

// Unwrap returns Value when it is an error, else nil.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// outcome is how call ended.
type outcome struct {
	panicked *PanicError // non-nil: call panicked
	goexit   bool        // call ended its goroutine with runtime.Goexit
}

// Bounded runs call and reports whether it finished before ctx ended.
//
// With a ctx that can never end, call runs on the caller's goroutine, and a
// panic goes up unchanged. Otherwise call runs on a goroutine of its own:
// when it finishes first, Bounded returns true; when it panicked, Bounded
// panics in the caller's goroutine with a *PanicError (a *PanicError from a
// nested Bounded is passed on as it is); when it called runtime.Goexit (a
// test's t.FailNow), Bounded calls runtime.Goexit too. When ctx ends first,
// Bounded returns false at once and call keeps running; the caller must
// not look at what call writes then. If that abandoned call panics later,
// no caller can recover it any more, and the panic goes up on the helper
// goroutine, ending the program as any unrecovered panic does: it is never
// lost silently.
func Bounded(ctx context.Context, call func()) (finished bool) {
	if ctx.Done() == nil {
		call()
		return true
	}
	var (
		mu       sync.Mutex
		gone     bool                    // the caller stopped waiting
		finishes = make(chan outcome, 1) // buffered: the helper never blocks on it
	)
	go func() {
		var out outcome
		normal := false
		defer func() {
			if !normal && out.panicked == nil {
				out.goexit = true // neither a return nor a panic: runtime.Goexit
			}
			mu.Lock()
			defer mu.Unlock()
			if gone {
				if out.panicked != nil {
					panic(out.panicked) // nobody waits: crash as an unrecovered panic would
				}
				return
			}
			finishes <- out
		}()
		defer func() {
			if v := recover(); v != nil {
				out.panicked = asPanicError(v)
			}
		}()
		call()
		normal = true
	}()
	select {
	case out := <-finishes:
		return rethrow(out)
	case <-ctx.Done():
		mu.Lock()
		select {
		case out := <-finishes: // it finished at the same moment: its outcome stands
			mu.Unlock()
			return rethrow(out)
		default:
			gone = true
			mu.Unlock()
			return false
		}
	}
}

// asPanicError wraps a recovered value with the current goroutine's stack,
// keeping a *PanicError from a nested Bounded (its stack is the one that
// shows the panic's origin).
func asPanicError(v any) *PanicError {
	if pe, ok := v.(*PanicError); ok {
		return pe
	}
	return &PanicError{Value: v, Stack: debug.Stack()}
}

// rethrow replays out in the caller's goroutine and returns true when call
// returned normally.
func rethrow(out outcome) bool {
	switch {
	case out.panicked != nil:
		panic(out.panicked)
	case out.goexit:
		runtime.Goexit()
	}
	return true
}
