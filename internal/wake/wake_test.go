package wake

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A wake-up posted before Wait is kept and counts even with max 0; a
// second Post while one waits does not block and adds nothing.
func TestPostBeforeWait(t *testing.T) {
	box := NewBox()
	Post(box)
	Post(box) // must not block
	if err := Wait(context.Background(), box, 0); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	select {
	case <-box:
		t.Fatal("two wake-ups kept; want one")
	default:
	}
}

// Wait returns nil after max with nothing posted, and the context's error
// when the context ends first; a nil box is never woken.
func TestWaitBounds(t *testing.T) {
	start := time.Now()
	if err := Wait(context.Background(), nil, 20*time.Millisecond); err != nil {
		t.Fatalf("Wait after max = %v", err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("Wait returned after %v; want max, 20ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Wait(ctx, NewBox(), time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with an ended context = %v; want context.Canceled", err)
	}
}

// A wake-up posted while Wait blocks ends it.
func TestPostWakesWait(t *testing.T) {
	box := NewBox()
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), box, time.Hour) }()
	Post(box)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait not woken by Post")
	}
}
