package dynamodb_test

import (
	"errors"
	"testing"
	"time"

	fenceddb "github.com/fencekit/fencekit/adapters/dynamodb"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock/driver"
)

// offset is a clock off by d from this machine's, as another machine's may
// be.
func offset(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// A contender whose clock runs 10 s ahead of the holder's (and a holder
// whose clock runs 10 s behind) never takes a live lease: while the
// holder renews, every try is refused. Once the holder stops renewing (a
// pause), the contender gets in no earlier than a whole TTL after the
// holder's last renewal was sent, and within two seconds after that; the paused holder's
// late write is then refused by the store.
func TestFastClockNeverTakesALiveLease(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	holder := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix})
	contender := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix})
	fenceddb.SetClock(holder, offset(-10*time.Second))
	fenceddb.SetClock(contender, offset(10*time.Second))
	store := storeWithPrefix(t, srv, prefix+"store/")

	// Renewals every 300 ms leave a loaded machine 2.7 s of margin.
	const ttl = 3 * time.Second
	name := "job"
	req := func(owner string) driver.Request {
		return driver.Request{Name: name, Owner: owner, TTL: ttl, Kind: driver.Exclusive}
	}
	g, err := holder.Acquire(ctx, req("holder"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Advance(ctx, "ledger", g.Token); err != nil {
		t.Fatal(err)
	}
	claim := driver.Claim{Name: name, Owner: "holder", Kind: driver.Exclusive}

	// The holder renews every 300 ms for 2.5 s; the contender tries every
	// 20 ms meanwhile.
	var lastSent time.Time
	renewEnd := time.Now().Add(2500 * time.Millisecond)
	nextRenew := time.Now()
	tries := 0
	for time.Now().Before(renewEnd) {
		if !time.Now().Before(nextRenew) {
			lastSent = time.Now()
			if err := holder.Extend(ctx, claim, ttl); err != nil {
				t.Fatalf("holder's Extend: %v", err)
			}
			nextRenew = lastSent.Add(300 * time.Millisecond)
		}
		_, err := contender.Acquire(ctx, req("contender"))
		if !errors.Is(err, driver.ErrHeld) {
			t.Fatalf("contender's try %d while the holder renews: %v, want ErrHeld", tries, err)
		}
		tries++
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d tries refused while the holder renewed", tries)

	// The holder is paused: no more renewals.
	var g2 driver.Grant
	for {
		g2, err = contender.Acquire(ctx, req("contender"))
		if err == nil {
			break
		}
		if !errors.Is(err, driver.ErrHeld) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(lastSent)
	if took < ttl {
		t.Fatalf("the contender took the lease %v after the holder's last renewal was sent: before its TTL of %v", took, ttl)
	}
	if took > ttl+2*time.Second {
		t.Fatalf("the contender took the lease %v after the holder's last renewal: want within two seconds of its TTL", took)
	}
	if g2.Token <= g.Token {
		t.Fatalf("contender's token %d is not above the holder's %d", g2.Token, g.Token)
	}
	if err := store.Put(ctx, "ledger", g2.Token, []byte("contender")); err != nil {
		t.Fatal(err)
	}
	err = store.Put(ctx, "ledger", g.Token, []byte("paused holder"))
	if se := (*fence.StaleError)(nil); !errors.As(err, &se) || se.Fence != g2.Token {
		t.Fatalf("the paused holder's late write: %v, want refused at fence %d", err, g2.Token)
	}
	if err := holder.Extend(ctx, claim, ttl); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the paused holder's Extend after the takeover: %v, want ErrNotHeld", err)
	}
	t.Logf("taken over %v after the last renewal was sent (TTL %v)", took.Round(time.Millisecond), ttl)
}

// A Backend that looks at a name for the first time cannot know how long
// its holder has been gone: it waits a whole TTL from its first look, even
// for a lease whose TTL ran out long before.
func TestFirstLookWaitsAWholeTTL(t *testing.T) {
	srv := server(t)
	ctx := testkit.Context(t)
	prefix := testkit.Namespace(t) + "/"
	gone := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix})
	const ttl = 500 * time.Millisecond
	if _, err := gone.Acquire(ctx, driver.Request{Name: "n", Owner: "gone", TTL: ttl, Kind: driver.Exclusive}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl) // the lease ran out on its holder's side

	fresh := newBackend(t, srv, &fenceddb.BackendOptions{Prefix: prefix})
	first := time.Now()
	for {
		_, err := fresh.Acquire(ctx, driver.Request{Name: "n", Owner: "fresh", TTL: ttl, Kind: driver.Exclusive})
		if err == nil {
			break
		}
		if !errors.Is(err, driver.ErrHeld) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(first); took < ttl {
		t.Fatalf("a fresh Backend took the lease %v after its first look: want a whole TTL (%v) of watching", took, ttl)
	}
}
