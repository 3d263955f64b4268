package etcd_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestQueueRoundTrips backs the costs acquireInLine's doc and docs/etcd.md
// promise: on a free lock nobody waits for, an Acquire with a place is one
// without: two requests (LeaseGrant, Txn), and so is a queued
// Client.Acquire; a waiter first in line takes the lock after the release
// in those same two, and the waiter behind it, woken because the first
// took the lock, renews its place in three (Txn, KeepAlive,
// LeaseTimeToLive) without granting a lease; a new owner of a lock seen
// contended makes its place in three (Txn, LeaseGrant, Txn). Inspect
// counts the places in line in the Txn that reads the holder: still two
// requests (Txn, LeaseTimeToLive).
func TestQueueRoundTrips(t *testing.T) {
	cl, c := countingClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	h, a, s := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	const ttl, place = 10 * time.Second, 10 * time.Second

	want := func(what string, want int64, op func() error) {
		t.Helper()
		if got := c.trips(t, what, op); got != want {
			t.Errorf("%s took %d round trips; want %d", what, got, want)
		}
	}
	want("enqueue of a free lock", 2, func() error {
		_, err := enqueue(ctx, b, "l", h, ttl, place)
		return err
	})
	if _, err := enqueue(ctx, b, "l", a, ttl, place); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("enqueue of a held lock: %v; want ErrHeld", err)
	}
	if _, err := enqueue(ctx, b, "l", s, ttl, place); !errors.Is(err, lock.ErrHeld) {
		t.Fatalf("enqueue of a held lock: %v; want ErrHeld", err)
	}
	want("Release", 1, func() error { return release(ctx, b, "l", h) })
	want("enqueue by the first in line after the release", 2, func() error {
		_, err := enqueue(ctx, b, "l", a, ttl, place)
		return err
	})
	want("enqueue by the second in line after the first took the lock", 3, func() error {
		if _, err := enqueue(ctx, b, "l", s, ttl, place); !errors.Is(err, lock.ErrHeld) {
			return fmt.Errorf("%v; want ErrHeld", err)
		}
		return nil
	})
	x := testkit.Owner(t)
	want("enqueue by a new owner of a lock seen contended", 3, func() error {
		if _, err := enqueue(ctx, b, "l", x, ttl, place); !errors.Is(err, lock.ErrHeld) {
			return fmt.Errorf("%v; want ErrHeld", err)
		}
		return nil
	})
	want("Inspect of a held lock with two in line", 2, func() error {
		info, err := inspect(ctx, b, "l")
		if err == nil && (info.Owner != a || info.Waiting != 2) {
			return fmt.Errorf("Inspect = %+v; want held by the first waiter, two in line", info)
		}
		return err
	})
	if err := release(ctx, b, "l", a); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{s, x} {
		if err := leave(ctx, b, "l", o); err != nil {
			t.Fatal(err)
		}
	}
	client := lock.New(b, nil)
	want("queued Client.Acquire and Release of a free lock", 3, func() error {
		l, err := client.Acquire(ctx, "job", ttl)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	})
}

// TestQueueKeyLayout backs docs/etcd.md's queue layout: a waiter's place is
// PlaceKey, under QueueKey, holding the owner, attached to an etcd lease of
// its own (not the holder's), made in arrival order (create revisions),
// and deleted when the waiter takes the lock or leaves.
func TestQueueKeyLayout(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	if got, want := b.QueueKey("a/b"), ns+"queue/a%2Fb/"; got != want {
		t.Errorf("QueueKey = %q; want %q", got, want)
	}
	if got, want := b.PlaceKey("a/b", "o/1"), ns+"queue/a%2Fb/o%2F1"; got != want {
		t.Errorf("PlaceKey = %q; want %q", got, want)
	}
	h, a, c := testkit.Owner(t), testkit.Owner(t), testkit.Owner(t)
	const ttl = 10 * time.Second
	if _, err := enqueue(ctx, b, "a/b", h, ttl, ttl); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{a, c} {
		if _, err := enqueue(ctx, b, "a/b", o, ttl, ttl); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("enqueue of a held lock: %v; want ErrHeld", err)
		}
	}
	get, err := cl.Get(ctx, b.QueueKey("a/b"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	lk, err := cl.Get(ctx, b.LockKey("a/b"))
	if err != nil || len(lk.Kvs) != 1 {
		t.Fatalf("lock key: %v, %v", lk, err)
	}
	if len(get.Kvs) != 2 {
		t.Fatalf("%d places; want 2", len(get.Kvs))
	}
	for i, o := range []string{a, c} {
		kv := get.Kvs[i]
		if string(kv.Key) != b.PlaceKey("a/b", o) || string(kv.Value) != o {
			t.Errorf("place %d = %s: %s; want %s: %s", i+1, kv.Key, kv.Value, b.PlaceKey("a/b", o), o)
		}
		if kv.Lease == 0 || kv.Lease == lk.Kvs[0].Lease {
			t.Errorf("place %d has lease %x (the holder's %x); want a lease of its own", i+1, kv.Lease, lk.Kvs[0].Lease)
		}
	}
	if err := leave(ctx, b, "a/b", c); err != nil {
		t.Fatal(err)
	}
	if err := release(ctx, b, "a/b", h); err != nil {
		t.Fatal(err)
	}
	if _, err := enqueue(ctx, b, "a/b", a, ttl, ttl); err != nil {
		t.Fatalf("enqueue by the only waiter of a free lock: %v", err)
	}
	if left, err := cl.Get(ctx, b.QueueKey("a/b"), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || left.Count != 0 {
		t.Errorf("places left after one waiter took the lock and the other left: %v, %v; want none", left, err)
	}
}

// TestQueuePlaceRenewedKeepsPosition: a waiter that waits for several place
// TTLs keeps its place (the same key, made at the same revision) because
// each renewal keeps its lease alive, and is served before the waiter that
// queued after it. A read of the queue that lost the places' lease IDs
// (etcd drops them from a keys-only range) let every place lapse and queue
// again at the tail.
func TestQueuePlaceRenewedKeepsPosition(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	h := testkit.Owner(t)
	first, err := acquire(ctx, b, "l", h, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var hs holds
	a := startQueuedWaiter(t, ctx, b, "l", "the first waiter", &hs)
	c := startQueuedWaiter(t, ctx, b, "l", "the second waiter", &hs)
	places := func() []string {
		t.Helper()
		get, err := cl.Get(ctx, b.QueueKey("l"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range get.Kvs {
			out = append(out, fmt.Sprintf("%s@%d", kv.Value, kv.CreateRevision))
		}
		return out
	}
	before := places()
	// The scenario: the places' TTL passes twice over while both wait.
	time.Sleep(2*waiterPlace + time.Second)
	if after := places(); !slices.Equal(before, after) {
		t.Fatalf("places %v after two place TTLs; want them kept as %v", after, before)
	}
	if err := release(ctx, b, "l", h); err != nil {
		t.Fatal(err)
	}
	a.servedWithin(t, time.Now(), waiterBound, "the release")
	<-c.done
	hs.check(t, first, a.who, c.who)
}

// TestAwaitTurnPromptAfterRelease: a waiter first in line whose holder
// released between its enqueue and its awaitTurn, while other
// writes moved the store on, is woken at once. A watch from the revision
// the enqueue read went through etcd's catch-up of past-revision
// watches, which runs every 100 ms, and took 50 ms on average.
func TestAwaitTurnPromptAfterRelease(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	const ttl = 10 * time.Second
	var took []time.Duration
	for i := range 7 {
		h, a := testkit.Owner(t), testkit.Owner(t)
		name := fmt.Sprintf("l%d", i)
		if _, err := acquire(ctx, b, name, h, ttl); err != nil {
			t.Fatal(err)
		}
		if _, err := enqueue(ctx, b, name, a, ttl, ttl); !errors.Is(err, lock.ErrHeld) {
			t.Fatalf("enqueue of a held lock: %v; want ErrHeld", err)
		}
		if _, err := cl.Put(ctx, ns+"other", "x"); err != nil {
			t.Fatal(err)
		}
		if err := release(ctx, b, name, h); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := awaitTurn(ctx, b, name, a, ttl); err != nil {
			t.Fatal(err)
		}
		took = append(took, time.Since(start))
		if _, err := enqueue(ctx, b, name, a, ttl, ttl); err != nil {
			t.Fatalf("enqueue by the woken first in line: %v", err)
		}
	}
	slices.Sort(took)
	if median := took[len(took)/2]; median > 30*time.Millisecond {
		t.Fatalf("awaitTurn after the release took %v (median of %v); want it woken at once", median, took)
	}
	t.Logf("awaitTurn after the release: %v", took)
}
