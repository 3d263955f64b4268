package nats_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	fencenats "github.com/fencekit/fencekit/adapters/nats"
	"github.com/fencekit/fencekit/adapters/nats/internal/natstest"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestSubSecondTTLIsHeldAWholeSecond pins what the Backend documents of a
// TTL that is not whole seconds: it is neither refused nor cut short, but
// rounded up to the next second (fencenats.Granularity), because the server
// counts per-message TTLs in whole seconds. A 500 ms lease is written with
// Nats-TTL "1s", Inspect reports the server's remaining TTL of that second
// (more than the 500 ms asked for), and another owner is still refused after
// 500 ms; 1.5 s becomes 2 s.
func TestSubSecondTTLIsHeldAWholeSecond(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Single(t).URLs())
	bucket := natstest.Bucket(t, js, 1)
	b := direct{newBackend(t, js, bucket)}
	ctx := testkit.Context(t)
	for _, tc := range []struct {
		ttl, held time.Duration
		header    string
	}{
		{500 * time.Millisecond, time.Second, "1s"},
		{1500 * time.Millisecond, 2 * time.Second, "2s"},
	} {
		name := "granular-" + tc.ttl.String()
		start := time.Now() // the lease's message is stamped after this
		if _, err := b.Acquire(ctx, name, testkit.Owner(t), tc.ttl); err != nil {
			t.Fatal(err)
		}
		if h := lastMsg(t, js, bucket, b.Key(name)).Header.Get(jetstream.MsgTTLHeader); h != tc.header {
			t.Fatalf("a %v lease was written with Nats-TTL %q; want %q (rounded up to whole seconds)", tc.ttl, h, tc.header)
		}
		info, err := b.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		// The server's remaining TTL is of the rounded TTL: at most it, and
		// at least it less the time since start (and a little clock slack).
		if elapsed := time.Since(start); !info.Held || info.TTL > tc.held || info.TTL < tc.held-elapsed-50*time.Millisecond {
			t.Fatalf("a %v lease, %v after it was asked for: Inspect = %+v; want a TTL in [%v, %v]", tc.ttl, elapsed, info, tc.held-elapsed-50*time.Millisecond, tc.held)
		}
	}

	// Past the 500 ms asked for, the lease is still the server's.
	name := "granular-held"
	start := time.Now()
	if _, err := b.Acquire(ctx, name, testkit.Owner(t), 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(600 * time.Millisecond)))
	_, err := b.Acquire(ctx, name, testkit.Owner(t)+"-other", time.Second)
	switch elapsed := time.Since(start); {
	case elapsed >= fencenats.Granularity-50*time.Millisecond:
		t.Logf("the second attempt ended %v after the first began: too late to show the rounding", elapsed)
	case !errors.Is(err, lock.ErrHeld):
		t.Fatalf("another owner, %v after a 500 ms lease was asked for: %v; want ErrHeld (the lease lasts the whole second)", elapsed, err)
	}
}
