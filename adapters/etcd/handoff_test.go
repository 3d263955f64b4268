package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// pollFor polls cond every 5 ms until it holds, failing the test after
// 10 s.
func pollFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueueHandoffRoundTrips backs the handoff costs of awaitTurn's doc and
// docs/etcd.md: with the first in line and the waiter behind it both in
// awaitTurn on the Backend's line watch, the release (one Txn), the first
// one's wake-up (no request: the watch is shared and stays open) and its
// acquisition with the lease granted ahead (one Txn and one KeepAlive, no
// LeaseGrant), and the second one's following the line to become first
// (no request but the LeaseGrant of its own lease ahead, in the background;
// its awaitTurn does not return) cost 4 requests in all. The lock taken
// with a lease granted ahead lasts its TTL from the acquisition (the
// KeepAlive renewed it), and its token is above the last one. The lease of
// the place that acquisition deleted is reused, renewed, for the next place
// made (the waiter's own still: no other key on it). A waiter further back
// whose awaitTurn runs out renews its place with one KeepAlive; and when the line moved meanwhile, its next awaitTurn returns
// at once and it takes the lock.
func TestQueueHandoffRoundTrips(t *testing.T) {
	cl, c := countingClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	h, a, s, x := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	const ttl, place = 10 * time.Second, 10 * time.Second

	first, err := enqueue(ctx, b, "l", h, ttl, place)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{a, s} {
		if _, err := enqueue(ctx, b, "l", o, ttl, place); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("enqueue of a held lock: %v; want ErrHeld", err)
		}
	}
	await := func(ctx context.Context, owner string, max time.Duration) chan error {
		done := make(chan error, 1)
		go func() { done <- awaitTurn(ctx, b, "l", owner, max) }()
		return done
	}
	aWoke := await(ctx, a, time.Minute)
	pollFor(t, "the first in line's lease granted ahead", func() bool { return fenceetcd.PreGranted(b, "l", a) })
	sctx, cancelS := context.WithCancel(ctx)
	defer cancelS()
	sWoke := await(sctx, s, time.Minute)
	pollFor(t, "both waiters on the line watch", func() bool { return fenceetcd.Awaiting(b, "l") == 2 })

	aPlace, err := cl.Get(ctx, b.PlaceKey("l", a))
	if err != nil || len(aPlace.Kvs) != 1 {
		t.Fatalf("the first waiter's place: %v, %v", aPlace, err)
	}
	var tok, tokBefore = first, first
	got := c.trips(t, "the handoff", func() error {
		if err := release(ctx, b, "l", h); err != nil {
			return err
		}
		if err := <-aWoke; err != nil {
			return err
		}
		var err error
		if tok, err = enqueue(ctx, b, "l", a, ttl, place); err != nil {
			return err
		}
		pollFor(t, "the second one's lease granted ahead", func() bool { return fenceetcd.PreGranted(b, "l", s) })
		return nil
	})
	if got != 4 {
		t.Errorf("release, wake-up, acquisition and the next one becoming first took %d requests; want 4 (Txn; Txn, KeepAlive; LeaseGrant)", got)
	}
	if tok <= tokBefore {
		t.Errorf("token %d after %d; want it rising", tok, tokBefore)
	}
	select {
	case err := <-sWoke:
		t.Fatalf("the second waiter's awaitTurn returned (%v) when the first took the lock; want it waiting on, first in line", err)
	default:
	}
	lk, err := cl.Get(ctx, b.LockKey("l"))
	if err != nil || len(lk.Kvs) != 1 || string(lk.Kvs[0].Value) != a {
		t.Fatalf("lock key after the handoff: %v, %v; want held by the first waiter", lk, err)
	}
	ttlResp, err := cl.TimeToLive(ctx, clientv3.LeaseID(lk.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	if ttlResp.TTL < int64(ttl/time.Second)-2 {
		t.Errorf("the lock taken with a lease granted ahead has %d s left; want about %v (renewed at the acquisition)", ttlResp.TTL, ttl)
	}

	// x waits behind s; its place is made on the spare lease of a's
	// place, renewed and holding nothing else. Its awaitTurn runs out, and
	// its renewal is one KeepAlive.
	if _, err := enqueue(ctx, b, "l", x, ttl, place); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("enqueue of a held lock: %v; want ErrHeld", err)
	}
	spare := clientv3.LeaseID(aPlace.Kvs[0].Lease)
	xPlace, err := cl.Get(ctx, b.PlaceKey("l", x))
	if err != nil || len(xPlace.Kvs) != 1 {
		t.Fatalf("x's place: %v, %v", xPlace, err)
	}
	if got := clientv3.LeaseID(xPlace.Kvs[0].Lease); got != spare {
		t.Errorf("x's place is on lease %x; want the spare lease %x of the place a's acquisition deleted", got, spare)
	}
	keys, err := cl.TimeToLive(ctx, spare, clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.Keys) != 1 || string(keys.Keys[0]) != b.PlaceKey("l", x) || keys.TTL < int64(place/time.Second)-2 {
		t.Errorf("the reused lease holds %q with %d s left; want only x's place, renewed to about %v", keys.Keys, keys.TTL, place)
	}
	if err := awaitTurn(ctx, b, "l", x, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got = c.trips(t, "a renewal after awaitTurn ran out", func() error {
		if _, err := enqueue(ctx, b, "l", x, ttl, place); !errors.Is(err, lock.ErrHeld) {
			return errors.Join(errors.New("want ErrHeld"), err)
		}
		return nil
	})
	if got != 1 {
		t.Errorf("the renewal of a waiter behind another took %d requests; want 1 (KeepAlive)", got)
	}

	// The line moves: s leaves, a releases. x's awaitTurn returns at
	// once (whether or not its renewal saw the move) and x takes the lock.
	cancelS()
	<-sWoke
	if err := leave(ctx, b, "l", s); err != nil {
		t.Fatal(err)
	}
	if err := release(ctx, b, "l", a); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		start := time.Now()
		if err := awaitTurn(ctx, b, "l", x, time.Minute); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("awaitTurn after the line moved took %v; want it woken", took)
		}
		xt, err := enqueue(ctx, b, "l", x, ttl, place)
		if err == nil {
			if xt <= tok {
				t.Errorf("token %d after %d; want it rising", xt, tok)
			}
			break
		}
		if !errors.Is(err, lock.ErrHeld) || attempt == 3 {
			t.Fatalf("enqueue by the only waiter of a free lock, attempt %d: %v", attempt, err)
		}
	}
	if err := release(ctx, b, "l", x); err != nil {
		t.Fatal(err)
	}
}
