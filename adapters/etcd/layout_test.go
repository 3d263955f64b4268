package etcd_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	fenceetcd "github.com/fencekit/fencekit/adapters/etcd"
	"github.com/fencekit/fencekit/adapters/etcd/internal/etcdtest"
	"github.com/fencekit/fencekit/fence"
	"github.com/fencekit/fencekit/internal/testkit"
	"github.com/fencekit/fencekit/lock"
)

// TestKeyLayout backs docs/etcd.md's key layout: the keys' names (with '%'
// and '/' escaped), the owner in the lock key, attached to an etcd lease,
// the token as the lock key's create revision, and the fence and value keys.
func TestKeyLayout(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	s := fenceetcd.NewStore(cl, &fenceetcd.StoreOptions{Prefix: ns})

	for name, want := range map[string]string{
		"a/b":   ns + "lock/a%2Fb",
		"a%2F":  ns + "lock/a%252F",
		"plain": ns + "lock/plain",
	} {
		if got := b.LockKey(name); got != want {
			t.Errorf("LockKey(%q) = %q; want %q", name, got, want)
		}
	}
	if b.MetaKey("a/b") != ns+"meta/a%2Fb" || s.FenceKey("a/b") != ns+"fence/a%2Fb" || s.ValueKey("a/b") != ns+"value/a%2Fb" {
		t.Errorf("MetaKey, FenceKey, ValueKey = %q, %q, %q", b.MetaKey("a/b"), s.FenceKey("a/b"), s.ValueKey("a/b"))
	}

	o := testkit.Owner(t)
	tok, err := acquireMD(ctx, b, "a/b", o, 10*time.Second, "host-1")
	if err != nil {
		t.Fatal(err)
	}
	get, err := cl.Get(ctx, ns, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	kvs := map[string]string{}
	leases := map[string]int64{}
	for _, kv := range get.Kvs {
		kvs[string(kv.Key)] = string(kv.Value)
		leases[string(kv.Key)] = kv.Lease
		if string(kv.Key) == b.LockKey("a/b") && kv.CreateRevision != int64(tok) {
			t.Errorf("token %d; the lock key's create revision is %d", tok, kv.CreateRevision)
		}
	}
	if len(kvs) != 2 || kvs[b.LockKey("a/b")] != o || kvs[b.MetaKey("a/b")] != "host-1" {
		t.Errorf("keys under the prefix = %v; want the lock key holding the owner and the meta key holding the metadata", kvs)
	}
	if l := leases[b.LockKey("a/b")]; l == 0 || leases[b.MetaKey("a/b")] != l {
		t.Errorf("leases of the lock and meta keys = %v; want one etcd lease for both", leases)
	}

	if err := s.Put(ctx, "a/b", tok, []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a/b", tok-1, []byte("old")); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Put with a lower token: %v; want fence.ErrStale", err)
	}
	f, err := cl.Get(ctx, s.FenceKey("a/b"))
	if err != nil || len(f.Kvs) != 1 || len(f.Kvs[0].Value) != 19 {
		t.Fatalf("fence key = %v, %v; want 19 zero-padded digits", f, err)
	}
	if err := s.Delete(ctx, "a/b", tok); err != nil {
		t.Fatal(err)
	}
	v, err := cl.Get(ctx, s.ValueKey("a/b"))
	if err != nil || len(v.Kvs) != 0 {
		t.Errorf("value key after Delete = %v, %v; want gone", v, err)
	}
	if f, err := cl.Get(ctx, s.FenceKey("a/b")); err != nil || len(f.Kvs) != 1 {
		t.Errorf("fence key after Delete = %v, %v; want kept as a tombstone", f, err)
	}
}

// TestLeaseRoundsUp backs Granularity, which the conformance test declares
// to drivertest: a TTL is granted in whole seconds rounded up, so never
// shorter than asked for, and never below the server's minimum (2 s on a
// cluster with etcd's default timing, as the test cluster has).
func TestLeaseRoundsUp(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	if fenceetcd.Granularity != time.Second {
		t.Fatalf("Granularity = %v; want 1s, etcd's lease unit", fenceetcd.Granularity)
	}
	for _, c := range []struct {
		ttl  time.Duration
		want int64
	}{
		{100 * time.Millisecond, 2}, // the server's minimum
		{2 * time.Second, 2},
		{2001 * time.Millisecond, 3},
		{4500 * time.Millisecond, 5},
	} {
		name := c.ttl.String()
		if _, err := acquire(ctx, b, name, testkit.Owner(t), c.ttl); err != nil {
			t.Fatal(err)
		}
		get, err := cl.Get(ctx, b.LockKey(name))
		if err != nil || len(get.Kvs) != 1 {
			t.Fatalf("Get: %v, %v", get, err)
		}
		ttl, err := cl.TimeToLive(ctx, clientv3.LeaseID(get.Kvs[0].Lease))
		if err != nil {
			t.Fatal(err)
		}
		if granted := time.Duration(ttl.GrantedTTL) * fenceetcd.Granularity; granted < c.ttl {
			t.Errorf("a lease asked for %v was granted %v: rounded down", c.ttl, granted)
		}
		if ttl.GrantedTTL != c.want {
			t.Errorf("a lease asked for %v was granted %d s; want %d s", c.ttl, ttl.GrantedTTL, c.want)
		}
	}
}

// TestClientGoneLeaseLapses: there is no session to die. A holder whose
// client is closed (a process that exited or hung) keeps its lease until the
// lease's own TTL ends, not longer and not sooner; then the lock is free.
func TestClientGoneLeaseLapses(t *testing.T) {
	ns := prefix(t)
	ctx := testkit.Context(t)
	gone, err := etcdtest.NewClient(etcdtest.Endpoints(t))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	start := time.Now()
	if _, err := acquire(ctx, fenceetcd.NewBackend(gone, &fenceetcd.BackendOptions{Prefix: ns}), "l", testkit.Owner(t), ttl); err != nil {
		t.Fatal(err)
	}
	_ = gone.Close()
	b := fenceetcd.NewBackend(sharedClient(t), &fenceetcd.BackendOptions{Prefix: ns})
	if info, err := inspect(ctx, b, "l"); err != nil || !info.Held {
		t.Fatalf("Inspect right after the holder's client closed = %+v, %v; want held", info, err)
	}
	for {
		info, err := inspect(ctx, b, "l")
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if time.Since(start) > ttl+10*time.Second {
			t.Fatalf("lock still held %v after its holder's client closed", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held := time.Since(start); held < ttl {
		t.Fatalf("lease of %v ended after %v", ttl, held)
	}
}

// TestInspectKeyWithoutLease: a lock key written by hand, with no lease,
// gets an error from Inspect, not a spin until the context ends, and is
// not renewable.
func TestInspectKeyWithoutLease(t *testing.T) {
	cl := sharedClient(t)
	ns := prefix(t)
	ctx := testkit.Context(t)
	b := fenceetcd.NewBackend(cl, &fenceetcd.BackendOptions{Prefix: ns})
	if _, err := cl.Put(ctx, b.LockKey("l"), "someone"); err != nil {
		t.Fatal(err)
	}
	if _, err := inspect(ctx, b, "l"); err == nil || ctx.Err() != nil {
		t.Fatalf("Inspect of a lock key without a lease: %v (context: %v); want an error before the context ends", err, ctx.Err())
	}
	if err := extend(ctx, b, "l", "someone", 10*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of a lock key without a lease: %v; want lock.ErrNotHeld", err)
	}
}
