package lock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBoundedCarriesPanicToCaller: a backend call that panics on bounded's
// helper goroutine reaches the caller's recover as a *PanicError holding
// the value, instead of ending the program.
func TestBoundedCarriesPanicToCaller(t *testing.T) {
	boom := errors.New("backend panicked")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := func() (v any) {
		defer func() { v = recover() }()
		_ = bounded(ctx, func(context.Context) error { panic(boom) })
		return nil
	}()
	var pe *PanicError
	if err, ok := v.(error); !ok || !errors.As(err, &pe) || !errors.Is(err, boom) || len(pe.Stack) == 0 {
		t.Fatalf("recovered %#v, want a *PanicError carrying %v and a stack", v, boom)
	}
}
